"""The optimisation loop on a seed axis: the S seeds of a trial as one computation.

Each seed keeps what it has in ``loop.train``: its own data, start and minibatch stream (its
``Problem``, built from its seed), its own counters, metrics and stopping. The variables of the
S problems are stacked on a leading seed axis; the loss and the metrics are the problems'
``Pure`` formulas (written over leading axes) called once on the stacked tensors; one optimizer
built on the seed axis (``families.step_size``'s seed-axis contract) steps all seeds at once.
A seed whose loss stops being finite stops (its rows are frozen: no gradient, no counts, no
more metrics) while the others go on. The batch-size slot takes only methods declared
``vectorised`` (schedules, whose sizes the seeds share). ``time/wall_seconds`` is each seed's
share of the batch's optimizer time (the batch's time / S). The step-size inputs the formulas
give (``Pure.inputs``: ``lmo``, ``margins``) are built here over the stacked variables and the
step's rows; ``closure(active=mask)`` (a probe some seeds take) counts a gradient evaluation
for the seeds in ``mask`` only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from workbench.common.budget import Budget, SeedsLogFn
from workbench.families import BatchSlot, seed_axis_info, step_sizes_taken
from workbench.testbeds.optimisation.loop import (
    Batches,
    Problem,
    Target,
    grad_sq_per_seed,
    step_metrics,
)


def _stacked(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack([t.detach() for t in tensors])


def _per_seed(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-seed mask or scalar broadcast over ``like``'s trailing axes."""
    return value.reshape(-1, *([1] * (like.dim() - 1)))


def train_seeds(problems: Sequence[Problem], step_method, *, batch_size: int | None,
                budget: Budget, seeds: Sequence[int], device: torch.device, log: SeedsLogFn,
                batch_method=None, target: Target | None = None) -> list[dict[str, Any]]:
    """``loop.train`` for every problem (seed ``seeds[i]``'s) at once; each seed's final
    metrics. The problems must carry their ``Pure`` formulas."""
    n_seeds = len(problems)
    first = problems[0].pure
    variables = [_stacked([p.variables[k] for p in problems]).requires_grad_(True)
                 for k in range(len(problems[0].variables))]
    pure = first.on_seed_axis(tuple(_stacked([p.pure.data[j] for p in problems])
                                    for j in range(len(first.data))))
    data = pure.data
    batch: torch.Tensor | None = None
    on_axis = pure.bound_inputs(lambda: variables, lambda: batch)
    optimizer = step_method.build(variables, seed_axis_info([p.info for p in problems], on_axis))
    n_samples = problems[0].n_samples
    streams = [Batches(p.n_samples, seed, device) for p, seed in zip(problems, seeds, strict=True)]
    live = torch.ones(n_seeds, dtype=torch.bool, device=device)
    grad_evals = torch.zeros(n_seeds, dtype=torch.int64, device=device)
    loss_evals = torch.zeros_like(grad_evals)

    def losses(values: list[torch.Tensor]) -> torch.Tensor:
        return pure.loss(values, data, batch)

    def closure(backward: bool = True, active: torch.Tensor | None = None) -> torch.Tensor:
        nonlocal grad_evals, loss_evals
        if not backward:
            loss_evals = loss_evals + (live if active is None else live & active)
            with torch.no_grad():
                return losses(variables)
        grad_evals = grad_evals + (live if active is None else live & active)
        optimizer.zero_grad(set_to_none=False)
        # a stopped seed's rows are detached: no gradient, whatever its values became
        value = losses([torch.where(_per_seed(live, v), v, v.detach()) for v in variables])
        value.sum().backward()
        return value.detach()

    slot = BatchSlot(batch_method, n_samples)
    size = batch_size if batch_method is None else slot.start(batch_size, **problems[0].info)
    step_sizes = [math.nan] * n_seeds
    reached = [math.nan] * n_seeds
    samples, seconds = 0, 0.0
    finals: list[dict[str, Any] | None] = [None] * n_seeds

    def record(step: int, extra: list[dict[str, float]],
               last: bool = False) -> list[dict[str, float] | None]:
        with torch.no_grad():
            evaluated = pure.evaluate(variables, step, last)
        names = list(evaluated)
        table = torch.stack([evaluated[k].double() for k in names], dim=1).tolist()
        counts = torch.stack([grad_evals, loss_evals], dim=1).tolist()
        shown: list[dict[str, float] | None] = [None] * n_seeds
        for s in range(n_seeds):
            if finals[s] is not None:
                continue
            metrics = step_metrics(dict(zip(names, table[s], strict=True)), extra[s],
                                   step_size=step_sizes[s], samples=samples,
                                   grad_evals=counts[s][0], loss_evals=counts[s][1],
                                   seconds=seconds / n_seeds)
            if target is not None:
                reached[s] = target.first(reached[s], step, metrics)
            shown[s] = metrics
        log(step, shown)
        return shown

    record(0, [{"batch/size": float(size or n_samples)}] * n_seeds)
    step = 0
    for step in range(1, budget.steps + 1):
        picks = [stream.next(size) for stream in streams]
        batch = None if picks[0] is None else torch.stack(picks)
        used = n_samples if batch is None else batch.shape[1]
        started = time.perf_counter()
        batch_losses = optimizer.step(closure).detach().double()
        grad_sq = grad_sq_per_seed(variables, n_seeds)
        first = int(torch.nonzero(live)[0])
        if batch_method is not None:  # a schedule: its sizes never read a seed's statistics
            size = slot.after_step(step, loss=float(batch_losses[first]),
                                   grad_sq=float(grad_sq[first]), batch_size=used,
                                   samples=samples + used, extra={})
        seconds += time.perf_counter() - started
        samples += used
        step_sizes = step_sizes_taken(optimizer, n_seeds)
        diagnostics = slot.diagnostics()
        rows = torch.stack([batch_losses, grad_sq.sqrt()], dim=1).tolist()
        extra = [{"train/batch_loss": loss, "train/grad_norm": norm, "batch/size": float(used),
                  **diagnostics} for loss, norm in rows]
        spent = budget.spent(samples, seconds / n_seeds)
        shown = record(step, extra, last=spent or step == budget.steps)
        for s, metrics in enumerate(shown):
            if metrics is None:
                continue
            diverged = not math.isfinite(metrics["train/loss"])
            if diverged or spent or step == budget.steps:
                finals[s] = {**metrics, "steps": step, "diverged": diverged}
                live[s] = False
        if not bool(live.any()):
            break
    return finals
