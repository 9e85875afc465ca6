"""The pieces of the optimisation testbeds' training loop: (minibatch) gradient descent with a
``step_size`` slot and an optional ``batch_size`` slot, counting every cost that fair
comparison needs. The loop itself is ``seed_axis.train_seeds``, one for a run of one seed
(``Task.run``, a seed axis of one: ``seed_axis.train_one``) and for the seeds of a trial.

Per step: ask the batch-size method for the batch size, draw a minibatch (without replacement
within an epoch, seeded), call ``optimizer.step(closure)``, evaluate the full objective, log.
``time/wall_seconds`` counts the optimizer's own time only: full-data evaluation and logging
are excluded.

Where the batch-size method requires ``per_sample_grads`` (one seed only), the step's first
gradient evaluation computes per-sample gradients G_i (``torch.func.vmap`` of ``grad``; the
same single pass, so no extra gradient evaluation is counted) and hands the method:

- ``grad_sq_big`` = |mean_i G_i|^2 at ``big_batch_size`` = b,
- ``grad_sq_small`` = mean_i |G_i|^2 at ``small_batch_size`` = 1,
- ``grad_var`` = sum_i |G_i - mean G|^2 / (b - 1), the trace of the per-sample covariance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch.func import vmap

from workbench.common import seeds
from workbench.common.budget import Budget


@dataclass
class Pure:
    """A problem's formulas as pure functions of the variables and the data: ``loss(variables,
    data, idx)`` (the mean loss over rows ``idx``, None: all) and ``metrics(variables, data)``
    (the full-data metrics). Written over any leading axes: one seed's ``Problem`` calls them
    on its own leaves (``pure_problem``; each result 0-d), ``train_seeds`` on the stacked
    variables and data of S seeds with ``idx`` of shape (S, b) (each result of shape (S,))."""

    data: tuple[torch.Tensor, ...]
    loss: Callable[..., torch.Tensor]
    metrics: Callable[..., dict[str, torch.Tensor]]
    # metrics logged every ``every`` steps only (step 0 and the last step included), e.g.
    # validation
    occasional: Callable[..., dict[str, torch.Tensor]] | None = None
    every: int = 1
    # formulas of one seed's tensors only (a module's forward): mapped with torch.func.vmap
    # over a seed axis instead of called on the stacked tensors
    one_seed: bool = False
    # step-size inputs given as formulas (``lmo``, ``margins``): name -> fn(variables, data,
    # idx, *args) over leading axes; the optimizer's ``info[name](*args)`` is fn at the
    # current variables and the step's rows, without gradient (``bound_inputs``)
    inputs: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def evaluate(self, variables: list[torch.Tensor], step: int,
                 last: bool = False) -> dict[str, torch.Tensor]:
        """The metrics logged at ``step`` (the occasional ones every ``every`` steps and at the
        ``last`` step)."""
        metrics = dict(self.metrics(variables, self.data))
        if self.occasional is not None and (step % self.every == 0 or last):
            metrics.update(self.occasional(variables, self.data))
        return metrics

    def on_seed_axis(self, data: tuple[torch.Tensor, ...]) -> Pure:
        """These formulas over stacked ``data`` (a leading seed axis), mapped where they take
        one seed's tensors only."""
        if not self.one_seed:
            return Pure(data, self.loss, self.metrics, self.occasional, self.every,
                        inputs=self.inputs)
        if self.inputs:
            raise ValueError("inputs of one-seed formulas cannot be mapped over a seed axis")

        def loss(variables, data, idx):
            if idx is None:
                return vmap(partial(self.loss, idx=None))(variables, data)
            return vmap(self.loss)(variables, data, idx)

        occasional = None if self.occasional is None else vmap(self.occasional)
        return Pure(data, loss, vmap(self.metrics), occasional, self.every)


    def bound_inputs(self, variables: Callable[[], list[torch.Tensor]],
                     idx: Callable[[], torch.Tensor | None],
                     lift: Callable[[Any], Any] = lambda v: v,
                     drop: Callable[[Any], Any] = lambda v: v) -> dict[str, Callable[..., Any]]:
        """``inputs`` as the optimizer's callables: ``info[name](*args)`` =
        drop(fn(variables(), data, idx(), *lift(args))) without gradient."""

        def bound(fn):
            @torch.no_grad()
            def call(*args):
                return drop(fn(variables(), self.data, idx(), *lift(args)))
            return call

        return {name: bound(fn) for name, fn in self.inputs.items()}


def _on_axis_of_one(value: Any) -> Any:
    """Tensors (alone or in a list or tuple) with a leading seed axis of one."""
    if isinstance(value, torch.Tensor):
        return value.unsqueeze(0)
    return type(value)(_on_axis_of_one(v) for v in value)


def _off_axis_of_one(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value[0]
    return type(value)(_off_axis_of_one(v) for v in value)


@dataclass
class Problem:
    """A finite-sum objective f(x) = mean_i f_i(x) over ``n_samples`` terms.

    ``sample_loss(variables, *row)`` (one sample's loss as a pure function of the variables,
    with ``row`` taken from ``data``) enables per-sample gradients.
    """

    variables: list[torch.Tensor]
    n_samples: int
    batch_loss: Callable[[torch.Tensor | None], torch.Tensor]  # indices (None: all) -> mean loss
    # full-data metrics, at no counted cost; evaluate(last=True) at the run's last step
    evaluate: Callable[..., dict[str, float]]
    info: dict[str, Any] = field(default_factory=dict)
    sample_loss: Callable[..., torch.Tensor] | None = None
    data: tuple[torch.Tensor, ...] = ()
    current: dict[str, Any] = field(default_factory=dict)  # "batch": the step's indices
    pure: Pure | None = None  # the same formulas, pure: the problem can run on a seed axis


def with_horizon(problem: Problem, budget: Budget, batch_size: int | None) -> Problem:
    """``problem`` with ``info['total_steps']``, the horizon of step-size schedules, set to the
    steps ``budget`` allows at ``batch_size`` samples a step (all ``n_samples`` for a full
    batch): a budget in samples plans its own steps."""
    problem.info["total_steps"] = budget.planned_steps(batch_size or problem.n_samples)
    return problem


def grad_sq_per_seed(variables: list[torch.Tensor], n_seeds: int) -> torch.Tensor:
    """||grad||^2 of each seed's variables (float64, shape (n_seeds,)); one seed: n_seeds=1."""
    return sum((v.grad * v.grad).reshape(n_seeds, -1).sum(dim=1).double() for v in variables)


def matvec(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """a @ x over leading axes: a (..., n, d), x (..., d) -> (..., n), as an element-wise
    product summed over d (and, backwards, over n): every row is reduced alone, so a seed's
    result does not depend on how many seeds share the call (a batched matmul's does, in the
    last bits)."""
    return (a * x.unsqueeze(-2)).sum(-1)


def rows(idx: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rows ``idx`` of each tensor: ``t[idx]`` for one seed (idx (b,), t (n, ...)), each
    seed's own rows on a seed axis (idx (S, b), t (S, n, ...) -> (S, b, ...))."""
    if idx.dim() == 1:
        return tuple(t[idx] for t in tensors)
    n_seeds, n = tensors[0].shape[:2]
    flat = (idx + n * torch.arange(n_seeds, device=idx.device).unsqueeze(1)).reshape(-1)
    return tuple(t.reshape(n_seeds * n, *t.shape[2:])[flat].reshape(*idx.shape, *t.shape[2:])
                 for t in tensors)


def pure_problem(variables: list[torch.Tensor], n_samples: int, pure: Pure,
                 info: dict[str, Any], **extra: Any) -> Problem:
    """The ``Problem`` whose loss and metrics are ``pure``'s on ``variables`` (one seed)."""

    # formulas over leading axes see this seed on a seed axis of one, so that every reduction
    # runs as it does on a seed axis of S (row by row): a seed's numbers are the same bits
    one = pure if pure.one_seed else pure.on_seed_axis(tuple(t.unsqueeze(0) for t in pure.data))

    def lifted() -> list[torch.Tensor]:
        return variables if pure.one_seed else [v.unsqueeze(0) for v in variables]

    def batch_loss(idx):
        if pure.one_seed:
            return pure.loss(variables, pure.data, idx)
        return one.loss(lifted(), one.data, None if idx is None else idx.unsqueeze(0))[0]

    evaluations = 0

    @torch.no_grad()
    def evaluate(last: bool = False):
        nonlocal evaluations
        metrics = one.evaluate(lifted(), evaluations, last)
        evaluations += 1
        return {key: float(value.reshape(-1)[0]) for key, value in metrics.items()}

    current = extra.setdefault("current", {})

    def step_rows():
        idx = current.get("batch")
        return None if idx is None else idx.unsqueeze(0)

    given = one.bound_inputs(lifted, step_rows, _on_axis_of_one, _off_axis_of_one)
    return Problem(variables, n_samples, batch_loss, evaluate, {**info, **given}, pure=pure,
                   **extra)


@dataclass(frozen=True)
class Target:
    """``steps_to_target``: the first step at which ``metric`` reaches ``value``."""

    metric: str
    value: float
    direction: str = "maximize"

    def reached(self, metrics: Mapping[str, float]) -> bool:
        got = metrics.get(self.metric, math.nan)
        return got >= self.value if self.direction == "maximize" else got <= self.value


    def first(self, reached_at: float, step: int, metrics: dict[str, float]) -> float:
        """The step the target was first reached at (NaN until then), recorded in
        ``metrics`` as ``train/steps_to_target``."""
        if math.isnan(reached_at) and self.reached(metrics):
            reached_at = float(step)
        metrics["train/steps_to_target"] = reached_at
        return reached_at


def step_metrics(evaluated: Mapping[str, float], extra: Mapping[str, float], *,
                 step_size: float, samples: int, grad_evals: int, loss_evals: int,
                 seconds: float) -> dict[str, float]:
    """One logged step: the full-data metrics, the step's own, and the costs so far."""
    metrics = dict(evaluated)
    metrics.update(extra)
    metrics.update({
        "method/step_size": step_size,
        "cost/samples": float(samples),
        "cost/grad_evals": float(grad_evals),
        "cost/loss_evals": float(loss_evals),
        "time/wall_seconds": seconds,
    })
    return metrics


class Batches:
    """Seeded epochs of shuffled indices; ``None`` for full-batch steps."""

    def __init__(self, n: int, seed: int, device: torch.device):
        self.n, self.device = n, device
        self.generator = seeds.torch_generator(seed, "batches")
        self.order: torch.Tensor | None = None
        self.cursor = n

    def next(self, size: int | None) -> torch.Tensor | None:
        if size is None or size >= self.n:
            return None
        if self.cursor + size > self.n:
            self.order = torch.randperm(self.n, generator=self.generator).to(self.device)
            self.cursor = 0
        batch = self.order[self.cursor : self.cursor + size]
        self.cursor += size
        return batch


def random_start(dim: int, scale: float, seed: int, device, dtype: torch.dtype,
                 draw_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """x_0 = scale * N(0, I) from the seed's "init" stream, drawn in ``draw_dtype`` (so the
    start does not depend on the working precision), as a leaf on ``device`` that requires
    grad."""
    x0 = scale * torch.randn(dim, generator=seeds.torch_generator(seed, "init"), dtype=draw_dtype)
    return x0.to(device, dtype).requires_grad_(True)


def batches_per_epoch(n_samples: int, batch_size: int | None) -> int:
    return 1 if batch_size is None or batch_size >= n_samples else n_samples // batch_size


def per_sample_stats(problem: Problem, batch: torch.Tensor | None) -> tuple[torch.Tensor, dict]:
    """Per-sample gradients of the batch: (their mean, flattened) and the statistics above."""
    from torch.func import grad, vmap

    rows = tuple(d if batch is None else d[batch] for d in problem.data)
    params = tuple(v.detach() for v in problem.variables)
    per_sample = vmap(grad(lambda p, *row: problem.sample_loss(list(p), *row)),
                      in_dims=(None,) + (0,) * len(rows))(params, *rows)
    flat = torch.cat([g.reshape(g.shape[0], -1) for g in per_sample], dim=1)
    b = flat.shape[0]
    mean = flat.mean(dim=0)
    stats = {
        "grad_sq_big": float(mean @ mean), "big_batch_size": b,
        "grad_sq_small": float((flat * flat).sum(dim=1).mean()), "small_batch_size": 1,
        "grad_var": float(((flat - mean) ** 2).sum() / max(b - 1, 1)),
    }
    return per_sample, stats
