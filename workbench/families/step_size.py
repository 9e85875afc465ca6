"""The step-size family: the optimizer a method builds, the loops' side of it, the inputs a
method may require and the contract check.

Caller side: a loop calls ``optimizer.step(closure)``, then ``step_size_taken(optimizer)``
(``method/step_size``) and, in a policy-gradient loop, ``observe_rl_stats(optimizer, ...)``
(all three done by ``rl_update.policy_step``, which every RL loop calls); a multi-epoch
update steps over ``minibatch_epochs`` and logs ``mean_over_steps``.

Contract check: 20 steps on a seeded float64 quadratic over two parameter tensors (a 2x2
matrix and a 3-vector), with ``info`` giving total_steps=20, batches_per_epoch=1, f_star,
loss_lower_bound, smoothness, return_upper_bound=500, an ``lmo`` for a Euclidean ball
around the start, the quadratic's ``hvp``, a ``logit_jvp`` of fixed linear logits and an
``importance_ess`` of the current point (1 / (1 + |x|^2 / 10), in (0, 1]); an
optimizer with ``observe`` gets synthetic RL
statistics after each step (KL swinging around typical targets, a return NaN at first then
rising). Every step calls ``closure`` and returns a loss; ``last_step_size`` is a finite
float, >= 0 and at most ``step_size_cap()`` (relative tolerance 1e-12); the iterate stays
finite; the state survives ``state_dict()`` / ``load_state_dict()`` (before steps 1 and 10, a
fresh optimizer loaded with the saved state takes the same step, to 1e-12).

Seed axis (a method with ``vectorised = True``; ``execution: {seeds: vectorised}``): ``info``
holds ``seeds`` = S and every parameter has a leading axis of S seeds. ``closure()`` returns the
S per-seed losses (a tensor (S,)) and fills ``.grad`` with each seed's own gradient;
``closure(backward=False, active=mask)`` evaluates every seed's loss and counts a loss
evaluation for the seeds in ``mask`` only (``closure(active=mask)`` likewise a gradient
evaluation: a probe only some seeds take). Every scalar the scheme computes is per seed
(reductions over a seed's own slice); ``last_step_size`` is a float shared by all seeds or a
tensor (S,). An ``info`` value that differs by seed (``f_star``, ``smoothness``) is a tensor
(S,); only the inputs in ``SEED_AXIS_INPUTS`` are given on a seed axis. The callables among
them (``SEED_AXIS_CALLABLES``: ``lmo``, ``margins``, ``hvp``, ``logit_jvp``) cannot be
stacked from the seeds' own: the task builds them on the seed axis itself, over the stacked
tensors, each seed's rows its own (``lmo``: the gradients [(S, ...)] -> the vertices
[(S, ...)]; ``margins``: () -> (S, b); ``hvp``: the vectors [(S, ...)] -> the products
[(S, ...)]; ``logit_jvp``: the vectors [(S, ...)] -> (S, b, K)).
``observe(stats)`` (``rl_stats``) gets ``approx_kl`` and ``episodic_return`` as float64
tensors (S,), each seed's own, and ``update`` as an int.
Contract check, on top of the above: the same 20 steps on three seeds' quadratics stacked
(each with the ``lmo`` of the ball around its own start and its own margins) give each seed
the iterates and step sizes of its own run, to 1e-9 relative.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch

from workbench.families._checks import ContractViolation, guarded, is_real
from workbench.registry import Method

FAMILY = "step_size"

#: The inputs a step-size method may ``require`` (a task's ``provides`` names those it gives),
#: each with its meaning. All but ``closure`` and ``rl_stats`` are keys of ``build``'s ``info``.
REQUIRABLE: Mapping[str, str] = {
    "closure": "step(closure) may call closure(backward=False) to evaluate the loss at a trial "
               "point (a line search)",
    "total_steps": "the run's budget of optimizer steps",
    "batches_per_epoch": "optimizer steps per pass over the data",
    "f_star": "the exact optimal value of the loss",
    "loss_lower_bound": "a number the loss never goes below",
    "smoothness": "L, the Lipschitz constant of the gradient",
    "lmo": "the linear minimisation oracle: a list of gradient tensors -> the list of vertex "
           "tensors s = argmin_{s in C} <g, s> of the feasible set C",
    "rl_stats": "observe(stats) after every step with approx_kl (the k3 estimate of "
                "KL(old || new) on that minibatch, measured before the step), episodic_return "
                "(mean return of the episodes finished in the latest rollout, NaN before the "
                "first) and update (rollout index)",
    "return_upper_bound": "the largest return an episode can have",
    "margins": "a callable () -> the signed margins y_i <a_i, x> (a 1-D tensor) of the step's "
               "samples at the current parameters (binary linear classification)",
    "hvp": "a callable (a list of tensors v shaped as the parameters) -> the list of tensors "
           "H v, H the Hessian of the step's (minibatch) loss at the current parameters (not "
           "counted as a gradient evaluation)",
    "logit_jvp": "a callable (a list of tensors v shaped as the parameters) -> the directional "
                 "derivatives J v (b, K) of the K class logits of the step's b samples at the "
                 "current parameters along v (softmax cross-entropy tasks)",
    "importance_ess": "a callable () -> ESS_hat in (0, 1], the normalised effective sample "
                      "size (sum w)^2 / (N sum w^2) of the sequence-level importance weights "
                      "w_i = pi(y_i) / mu(y_i) of the rollout the step trains on (the learner "
                      "against the behaviour policy that sampled it; "
                      "``workbench.families.importance``); 1 on-policy",
}


#: The inputs a task can give on a seed axis (the others are callables of one seed's state).
SEED_AXIS_INPUTS = frozenset({"closure", "total_steps", "batches_per_epoch", "f_star",
                              "loss_lower_bound", "smoothness", "return_upper_bound", "lmo",
                              "margins", "hvp", "logit_jvp", "rl_stats", "importance_ess"})

#: The callables of ``SEED_AXIS_INPUTS``, as the task builds them on a seed axis of S:
#: ``lmo`` takes the list of stacked gradients (S, ...) and returns the list of stacked
#: vertices, seed s's vertex the argmin over its own feasible set of <g_s, s>; ``margins``
#: returns the (S, b) margins y_i <a_i, x_s> of each seed's own samples of the step; ``hvp``
#: takes the stacked vectors (S, ...) and returns the stacked H_s v_s, each seed's own Hessian;
#: ``logit_jvp`` takes the stacked vectors and returns the (S, b, K) J_s v_s of each seed's own
#: samples; ``importance_ess`` returns the (S,) ESS_hat of each seed's own rollout.
SEED_AXIS_CALLABLES = frozenset({"lmo", "margins", "hvp", "logit_jvp", "importance_ess"})


class StepSizeMethod(Method):
    """Builds a ``torch.optim.Optimizer`` over the task's parameters.

    The task calls ``optimizer.step(closure)``. ``closure(backward=True)`` evaluates the loss on
    the current minibatch at the current parameters, fills ``.grad`` and returns the loss;
    ``closure(backward=False)`` only evaluates the loss (a line search's trial point). The
    optimizer calls it at least once and sets ``last_step_size`` (a float) on every step.
    ``info`` holds what the task provides (always ``total_steps`` and ``batches_per_epoch``);
    a method ``requires`` the names it reads, from ``REQUIRABLE`` (with their meanings).

    Policy-gradient tasks (which provide ``rl_stats``) call the optimizer's ``observe(stats)``,
    where it defines one, after every optimizer step (``observe_rl_stats``).
    """

    family = FAMILY

    def build(
        self, params: Iterable[torch.Tensor], info: Mapping[str, Any]
    ) -> torch.optim.Optimizer:
        raise NotImplementedError

    def step_size_cap(self) -> float:
        """The largest ``last_step_size`` this configuration may report (inf: no cap)."""
        return float("inf")


# caller side -----------------------------------------------------------------------------------

def step_size_taken(optimizer: torch.optim.Optimizer) -> float:
    """``method/step_size``: the step the optimizer reports for its last ``step`` (NaN for a
    plain torch optimizer, which reports none)."""
    return float(getattr(optimizer, "last_step_size", math.nan))


def step_sizes_taken(optimizer: torch.optim.Optimizer, seeds: int) -> list[float]:
    """``method/step_size`` of each seed on a seed axis of ``seeds``: the per-seed sizes, or
    the one size all seeds share (NaN for a plain torch optimizer)."""
    size = getattr(optimizer, "last_step_size", math.nan)
    if isinstance(size, torch.Tensor):
        return [float(v) for v in size.tolist()]
    return [float(size)] * seeds


def seed_axis_info(infos: Sequence[Mapping[str, Any]],
                   on_axis: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``build``'s ``info`` on a seed axis from each seed's own: ``seeds`` = S, and each input
    of ``SEED_AXIS_INPUTS`` the seeds share as it is, one that differs by seed as a float64
    tensor (S,). The callables (``SEED_AXIS_CALLABLES``) come from ``on_axis``, the ones the
    task built over the stacked tensors; the seeds' own callables are left out."""
    info: dict[str, Any] = {"seeds": len(infos)}
    for key in (SEED_AXIS_INPUTS - SEED_AXIS_CALLABLES) & set(infos[0]):
        values = [i[key] for i in infos]
        info[key] = (values[0] if all(v == values[0] for v in values)
                     else torch.tensor([float(v) for v in values], dtype=torch.float64))
    for key, value in (on_axis or {}).items():
        if key not in SEED_AXIS_CALLABLES:
            raise ValueError(f"{key!r} is not an input a task builds on a seed axis; "
                             f"allowed: {', '.join(sorted(SEED_AXIS_CALLABLES))}")
        info[key] = value
    return info


def observe_rl_stats(optimizer: torch.optim.Optimizer, *, approx_kl: float | Sequence[float],
                     episodic_return: float | Sequence[float], update: int) -> None:
    """Give a policy-gradient step's statistics (``REQUIRABLE["rl_stats"]``) to the
    optimizer's ``observe``, where it defines one; on a seed axis each seed's value (a
    sequence of S numbers, given as a float64 tensor)."""
    observe = getattr(optimizer, "observe", None)
    if observe is None:
        return
    if isinstance(approx_kl, Sequence):
        approx_kl = torch.tensor(approx_kl, dtype=torch.float64)
        episodic_return = torch.tensor(episodic_return, dtype=torch.float64)
    observe({"approx_kl": approx_kl, "episodic_return": episodic_return, "update": update})


def minibatch_epochs(rows: int, *, epochs: int, minibatches: int, generator: torch.Generator,
                     device: torch.device | str) -> Iterator[torch.Tensor]:
    """The row indices of each optimizer step of a multi-epoch update (PPO): ``epochs`` passes,
    each over a fresh permutation drawn from ``generator`` (on the CPU, then moved to
    ``device``) cut into minibatches of max(1, rows // minibatches) rows, a remainder left out
    of that pass; ``epochs * minibatches`` steps when rows >= minibatches."""
    size = max(1, rows // minibatches)
    for _ in range(epochs):
        order = torch.randperm(rows, generator=generator).to(device)
        for start in range(0, rows - size + 1, size):
            yield order[start:start + size]


def mean_over_steps(per_step: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each metric's mean over the optimizer steps of one update (summed in step order)."""
    totals: dict[str, float] = {}
    for stats in per_step:
        for key, value in stats.items():
            totals[key] = totals.get(key, 0.0) + value
    return {key: value / len(per_step) for key, value in totals.items()}


# contract check --------------------------------------------------------------------------------

STEPS = 20
RELOAD_AT = (1, 10)


def _quadratic(seed: int = 0):
    """Parameters, counted closure and info of f = 1/2 (x - x*)^T A (x - x*) + f_star over
    x = (2x2 matrix, 3-vector) flattened; float64."""
    dim, f_star = 7, 0.5
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    eigenvalues = 0.05 + 0.95 * torch.rand(dim, generator=gen, dtype=torch.float64)
    a = q @ torch.diag(eigenvalues) @ q.T
    a = 0.5 * (a + a.T)
    x_star = torch.randn(dim, generator=gen, dtype=torch.float64)
    start = torch.randn(dim, generator=gen, dtype=torch.float64)
    params = [start[:4].reshape(2, 2).clone().requires_grad_(True),
              start[4:].clone().requires_grad_(True)]
    calls = [0]

    def loss_at(variables):
        d = torch.cat([v.reshape(-1) for v in variables]) - x_star
        return 0.5 * d @ (a @ d) + f_star

    def loss():
        return loss_at(params)

    def closure(backward=True):
        calls[0] += 1
        if not backward:
            with torch.no_grad():
                return loss()
        for p in params:
            p.grad = None
        value = loss()
        value.backward()
        return value.detach()

    centre = [p.detach().clone() for p in params]
    radius = 2.0 * float(start.norm()) + 1.0

    def lmo(grads):
        norm = math.sqrt(sum(float(torch.sum(g * g)) for g in grads)) or 1.0
        return [c - radius * g / norm for c, g in zip(centre, grads, strict=True)]

    rows = torch.randn(5, dim, generator=gen, dtype=torch.float64)

    def margins_at(variables):
        return rows @ torch.cat([v.detach().reshape(-1) for v in variables])

    def margins():
        return margins_at(params)

    def hvp(vectors):  # A v, split as the parameters
        flat = a @ torch.cat([v.reshape(-1) for v in vectors])
        return [flat[:4].reshape(2, 2), flat[4:]]

    logit_rows = torch.randn(5, 3, dim, generator=gen, dtype=torch.float64)

    def logit_jvp(vectors):  # five samples' three logits, linear in x: J v = R v
        return logit_rows @ torch.cat([v.reshape(-1) for v in vectors])

    def ess_at(variables):  # a synthetic ESS_hat in (0, 1] that moves with the iterate
        flat = torch.cat([v.detach().reshape(-1) for v in variables])
        return 1.0 / (1.0 + float(flat @ flat) / 10.0)

    def importance_ess():
        return ess_at(params)

    info = {"total_steps": STEPS, "batches_per_epoch": 1, "f_star": f_star,
            "loss_lower_bound": 0.0, "smoothness": float(eigenvalues.max()), "lmo": lmo,
            "return_upper_bound": 500.0, "margins": margins, "hvp": hvp,
            "logit_jvp": logit_jvp, "importance_ess": importance_ess}
    return params, closure, calls, info, loss_at, margins_at, ess_at


def check_configuration(cls, overrides, method) -> None:
    """The step-size contract on one configuration (see the module docstring)."""
    params, closure, calls, info, *_ = _quadratic()
    cap = guarded("in step_size_cap()", method.step_size_cap)
    if not is_real(cap) or math.isnan(cap) or cap < 0:
        raise ContractViolation(
            f"step_size_cap() returned {cap!r}; it must be a number >= 0 (inf: no cap)")
    optimizer = guarded("in build()", lambda: method.build(params, info))
    for step in range(STEPS):
        if step in RELOAD_AT:
            start = [p.detach().clone() for p in params]
            state = guarded(f"in state_dict() before step {step}",
                            lambda: copy.deepcopy(optimizer.state_dict()))
        calls[0] = 0
        loss = guarded(f"at step {step}", lambda: optimizer.step(closure))
        if calls[0] == 0:
            raise ContractViolation(
                f"step {step} never called closure(); a step must evaluate the loss at least "
                "once")
        if loss is None:
            raise ContractViolation(
                f"step {step} returned None; step(closure) must return the loss closure() gave")
        _check_step_size_value(optimizer, step, cap)
        if not all(bool(torch.isfinite(p).all()) for p in params):
            raise ContractViolation(f"the iterate is not finite after step {step}")
        if step in RELOAD_AT:
            _check_round_trip(method, optimizer.last_step_size, params, closure, info, step,
                              start, state)
        observe = getattr(optimizer, "observe", None)
        if observe is not None:
            guarded(f"in observe() after step {step}", lambda: observe(_rl_stats(step)))  # noqa: B023
    if type(method).vectorised:
        _check_seed_axis(method)


SEED_AXIS_SEEDS = (0, 1, 2)
SEED_AXIS_TOLERANCE = 1e-9


def _check_seed_axis(method) -> None:
    """Three seeds' quadratics stacked on a seed axis: each seed's iterates and step sizes
    must be those of its own run (relative 1e-9)."""
    needs = method.requirements(method.params) - SEED_AXIS_INPUTS
    if needs:
        raise ContractViolation(
            f"it declares vectorised = True but requires {', '.join(sorted(needs))}, which a "
            "task cannot give on a seed axis; declare vectorised = False")
    alone = []
    for seed in SEED_AXIS_SEEDS:
        params, closure, _, info, *_ = _quadratic(seed)
        optimizer = type(method)(**method.params).build(params, info)
        path = []
        for step in range(STEPS):
            optimizer.step(closure)
            path.append(([p.detach().clone() for p in params], step_size_taken(optimizer)))
            stats = _rl_stats(step, seed)
            observe_rl_stats(optimizer, approx_kl=stats["approx_kl"],
                             episodic_return=stats["episodic_return"], update=stats["update"])
        alone.append(path)
    params, closure, info = _stacked_quadratics(SEED_AXIS_SEEDS)
    optimizer = guarded("in build() on a seed axis",
                        lambda: type(method)(**method.params).build(params, info))
    for step in range(STEPS):
        guarded(f"at step {step} on a seed axis", lambda: optimizer.step(closure))
        sizes = step_sizes_taken(optimizer, len(SEED_AXIS_SEEDS))
        each = [_rl_stats(step, seed) for seed in SEED_AXIS_SEEDS]
        guarded(f"in observe() after step {step} on a seed axis", lambda: observe_rl_stats(
            optimizer, approx_kl=[e["approx_kl"] for e in each],  # noqa: B023
            episodic_return=[e["episodic_return"] for e in each], update=each[0]["update"]))  # noqa: B023
        for s, path in enumerate(alone):
            want_params, want_size = path[step]
            gap = max(float(((p.detach()[s] - w).abs() / (w.abs() + 1e-12)).max())
                      for p, w in zip(params, want_params, strict=True))
            size_gap = abs(sizes[s] - want_size) / (abs(want_size) + 1e-300)
            if not (gap <= SEED_AXIS_TOLERANCE and (size_gap <= SEED_AXIS_TOLERANCE
                                                    or sizes[s] == want_size)):
                raise ContractViolation(
                    f"on a seed axis, seed {s} at step {step} left its own run (iterate "
                    f"relative gap {gap:.3g}, step size {sizes[s]!r} vs {want_size!r}); every "
                    "scalar must be computed per seed")


def _stacked_quadratics(seed_list):
    """The contract's quadratics of ``seed_list`` on a seed axis: parameters (S, 2, 2) and
    (S, 3), a closure with the seed-axis signature, and info with per-seed values."""
    parts = [_quadratic(seed) for seed in seed_list]
    params = [torch.stack([part[0][i].detach() for part in parts]).requires_grad_(True)
              for i in range(2)]
    losses = [part[4] for part in parts]

    def per_seed():
        return torch.stack([loss([p[s] for p in params]) for s, loss in enumerate(losses)])

    def closure(backward=True, active=None):
        if not backward:
            with torch.no_grad():
                return per_seed()
        for p in params:
            p.grad = None
        value = per_seed()
        value.sum().backward()
        return value.detach()

    infos = [part[3] for part in parts]
    info = {key: infos[0][key] for key in ("total_steps", "batches_per_epoch", "f_star",
                                            "loss_lower_bound", "return_upper_bound")}
    info["smoothness"] = torch.tensor([i["smoothness"] for i in infos], dtype=torch.float64)
    info["seeds"] = len(seed_list)

    def lmo(grads):  # each seed's vertex on the ball around its own start
        vertices = [i["lmo"]([g[s] for g in grads]) for s, i in enumerate(infos)]
        return [torch.stack(column) for column in zip(*vertices, strict=True)]

    margins_of = [part[5] for part in parts]

    def margins():
        return torch.stack([at([p[s] for p in params]) for s, at in enumerate(margins_of)])

    def hvp(vectors):  # each seed's A v on its own slice
        products = [i["hvp"]([v[s] for v in vectors]) for s, i in enumerate(infos)]
        return [torch.stack(column) for column in zip(*products, strict=True)]

    def logit_jvp(vectors):
        return torch.stack([i["logit_jvp"]([v[s] for v in vectors])
                            for s, i in enumerate(infos)])

    ess_of = [part[6] for part in parts]

    def importance_ess():
        return torch.tensor([at([p[s] for p in params]) for s, at in enumerate(ess_of)],
                            dtype=torch.float64)

    info["lmo"], info["margins"], info["hvp"] = lmo, margins, hvp
    info["logit_jvp"], info["importance_ess"] = logit_jvp, importance_ess
    return params, closure, info


def _rl_stats(step: int, seed: int = 0) -> dict[str, float]:
    """Synthetic ``observe`` statistics: a KL that swings across typical targets, a return
    unknown at first (NaN) then rising towards the upper bound; each seed's its own (seed 1's
    KL swings a step later, seed 2's return is known a step later and runs higher)."""
    return {"approx_kl": 0.001 * (1 + 30 * ((step + seed) % 3 == 1)),
            "episodic_return": math.nan if step < 2 + seed // 2 else (20.0 + seed) * step,
            "update": step // 4}


def _check_step_size_value(optimizer, step: int, cap: float) -> None:
    size = getattr(optimizer, "last_step_size", None)
    if not is_real(size):
        raise ContractViolation(
            f"step {step} left last_step_size = {size!r}; it must be a float")
    if not math.isfinite(size) or size < 0:
        raise ContractViolation(
            f"step {step} reported step size {size!r}; it must be finite and >= 0")
    if size > cap * (1 + 1e-12):
        raise ContractViolation(
            f"step {step} reported step size {size!r}, above its step_size_cap() {cap!r}")


def _check_round_trip(method, size, params, closure, info, step, start, state) -> None:
    """Retake step ``step`` from ``start`` with a fresh optimizer loaded with ``state`` (saved
    before the step); it must land where the original did (the current parameters)."""
    after = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p, x in zip(params, start, strict=True):
            p.copy_(x)

    def reloaded():
        fresh = method.build(params, info)
        fresh.load_state_dict(state)
        fresh.step(closure)
        return getattr(fresh, "last_step_size", None)

    fresh_size = guarded(f"in a fresh optimizer loaded with the state saved before step {step}",
                         reloaded)
    gap = max(float((p.detach() - x).abs().max()) for p, x in zip(params, after, strict=True))
    if not gap <= 1e-12:
        raise ContractViolation(
            f"its state does not survive state_dict()/load_state_dict(): a fresh optimizer "
            f"loaded with the state saved before step {step} stepped to a different point "
            f"(largest difference {gap:.3g})")
    if fresh_size != size and not (is_real(size) and is_real(fresh_size)
                                   and math.isclose(size, fresh_size, rel_tol=1e-12)):
        raise ContractViolation(
            f"its state does not survive state_dict()/load_state_dict(): a fresh optimizer "
            f"loaded with the state saved before step {step} reported step size "
            f"{fresh_size!r} instead of {size!r}")
    with torch.no_grad():  # back to where the original optimizer left them
        for p, x in zip(params, after, strict=True):
            p.copy_(x)
