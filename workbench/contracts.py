"""Per-family method contracts: deterministic checks that a method keeps its family's promises.

``check(cls)`` runs the contract of ``cls.family`` on a method class (registered or not) and
returns the problems as plain-English sentences; ``check_all(family)`` does it for every
registered method. A method is run in several configurations: its defaults; for each
hyperparameter with a default search range, the low and the high end of that range (the others
at their defaults); and every choice of each ``Choice``. A configuration whose
``requirements(params)`` the contract's synthetic problem does not provide is skipped silently;
if none can run, that is the problem reported. An exception raised by the method becomes a
problem naming its type and message.

- step_size: 20 steps on a seeded float64 quadratic over two parameter tensors (a 2x2 matrix and
  a 3-vector), with ``info`` giving total_steps=20, batches_per_epoch=1, f_star,
  loss_lower_bound, smoothness, return_upper_bound=500 and an ``lmo`` for a Euclidean ball
  around the start; an optimizer with ``observe`` gets synthetic RL statistics after each step
  (KL swinging around typical targets, a return NaN at first then rising). Every step calls
  ``closure`` and returns a loss; ``last_step_size`` is a finite float, >= 0 and at
  most ``step_size_cap()`` (relative tolerance 1e-12); the iterate stays finite; the state
  survives ``state_dict()`` / ``load_state_dict()`` (before steps 1 and 10, a fresh optimizer
  loaded with the saved state takes the same step, to 1e-12).
- batch_size: ``start({"batch_size": 16, "n_samples": 256})`` and 20 ``next_batch_size``
  calls on synthetic statistics (the per-sample ones included; each step's ``batch_size`` is
  the previous answer, as the loop clamps it). Every answer is a positive int within
  [min_size, max_size or n_samples] when the method declares those hyperparameters (else
  [1, n_samples]); ``diagnostics()`` is a dict of floats; two fresh instances fed the same
  statistics give the same answers and diagnostics.
- entropy: after ``start({"total_steps": 50})``, ``coefficient(step, entropy)`` for steps
  0..49 with an entropy that falls then rises is a finite number within
  ``coefficient_bounds()``, the same for two fresh instances;
  ``policy_loss_hook(log_probs=, old_log_probs=, advantages=, mask=, entropy=)`` on (8, 16)
  tensors returns a mapping of finite tensors (or numbers; ``metrics``: a mapping of numbers)
  and leaves its inputs unchanged.
- advantage: ``compute`` gets the inputs its ``requirements`` name among rewards (8, 12),
  values (8, 13), mask (8, 12; float, right-padded rows), group_ids (8,; four groups of two,
  shuffled), dones (8, 12), terminated (8, 12; the rows that end early and one other done are
  terminal, the remaining done is a truncation), next_values (8, 12; values[:, 1:] except at
  the truncation) and reward_baselines (8,), float64 and seeded. It returns a pair of finite
  tensors of the shape of rewards; it is a pure function (same inputs, same outputs; inputs
  not modified in place); changing rewards, values, next_values, dones and terminated at
  padded positions changes nothing at valid ones (values of the state of a valid step or of
  the state after one are kept); each declared invariant holds (``zero_mean_per_group``:
  atol 1e-6).
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from workbench import registry
from workbench.families import REQUIRABLE
from workbench.hyperparams import Choice, HyperparameterError

STEP_SIZE_STEPS = 20
STEP_SIZE_RELOAD_AT = (1, 10)
BATCH_STEPS = 20
BATCH_INFO = {"batch_size": 16, "n_samples": 256}
ENTROPY_STEPS = 50
ROWS, GROUP_SIZE, HORIZON, HOOK_HORIZON = 8, 2, 12, 16
INVARIANT_ATOL = 1e-6
KNOWN_INVARIANTS = frozenset({"zero_mean_per_group"})

PROVIDED = REQUIRABLE  # what the checks below give a method: everything its family allows


class ContractViolation(Exception):
    """One broken promise; its message is the problem sentence (without the method's name)."""


def check(cls: type[registry.Method]) -> list[str]:
    """The contract of ``cls.family`` run on ``cls``: problems as sentences (empty: passes)."""
    key = f"{getattr(cls, 'family', '?')}/{getattr(cls, 'name', cls.__qualname__)}"
    runner = _RUNNERS.get(getattr(cls, "family", None))
    if runner is None:
        return [f"{key}: unknown family; allowed: {', '.join(registry.FAMILIES)}"]
    problems, ran, unmet = [], 0, set()
    for label, overrides in configurations(cls):
        where = key if label == "defaults" else f"{key} with {label}"
        try:
            method = cls(**overrides)
            needs = cls.requirements(method.params)
        except Exception as err:  # a declaration the method itself rejects
            problems.append(f"{where}: could not be built: {_describe(err)}")
            continue
        missing = set(needs) - PROVIDED[cls.family]
        if missing:
            unmet |= missing
            continue
        ran += 1
        try:
            runner(cls, overrides, method)
        except ContractViolation as violation:
            problems.extend(f"{where}: {line}" for line in violation.args)
        except Exception as err:  # raised where no narrower guard names the call
            problems.append(f"{where}: raised {_describe(err)}")
    if ran == 0 and not problems:
        problems.append(
            f"{key}: no configuration can run on the {cls.family} contract's synthetic "
            f"problem: they require {', '.join(sorted(unmet))}, which it does not provide "
            f"(it provides {', '.join(sorted(PROVIDED[cls.family]))})"
        )
    return problems


def check_all(family: str | None = None) -> dict[str, list[str]]:
    """``family/name`` -> problems, for every registered method (of ``family`` if given)."""
    keys = registry.available() if family is None else [
        f"{family}/{name}" for name in registry.available(family)]
    return {key: check(registry.get(*key.split("/", 1))) for key in keys}


def configurations(cls: type[registry.Method]) -> list[tuple[str, dict[str, Any]]]:
    """(label, overrides): the defaults, both ends of each default search range, each choice."""
    configs: list[tuple[str, dict[str, Any]]] = [("defaults", {})]
    for key, hp in cls.hyperparameters.items():
        if isinstance(hp, Choice):
            configs += [(f"{key}={c!r}", {key: c}) for c in hp.choices if c != hp.default]
            continue
        try:
            dist = hp.distribution()
        except HyperparameterError as err:
            configs.append((f"{key}'s default search range ({err})", {key: None}))
            continue
        if dist is None:
            continue
        for end, value in (("low", dist.low), ("high", dist.high)):
            if value != hp.default:
                configs.append((f"{key}={value!r} (the {end} end of its search range)",
                                {key: value}))
    return configs


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def _guarded(what: str, call: Callable[[], Any]) -> Any:
    """``call()``, with an exception it raises turned into a violation naming ``what``."""
    try:
        return call()
    except ContractViolation:
        raise
    except Exception as err:
        raise ContractViolation(f"raised {_describe(err)} {what}") from None


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# step_size -------------------------------------------------------------------------------------

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

    def loss():
        d = torch.cat([p.reshape(-1) for p in params]) - x_star
        return 0.5 * d @ (a @ d) + f_star

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

    info = {"total_steps": STEP_SIZE_STEPS, "batches_per_epoch": 1, "f_star": f_star,
            "loss_lower_bound": 0.0, "smoothness": float(eigenvalues.max()), "lmo": lmo,
            "return_upper_bound": 500.0}
    return params, closure, calls, info


def _check_step_size(cls, overrides, method) -> None:
    params, closure, calls, info = _quadratic()
    cap = _guarded("in step_size_cap()", method.step_size_cap)
    if not _is_real(cap) or math.isnan(cap) or cap < 0:
        raise ContractViolation(
            f"step_size_cap() returned {cap!r}; it must be a number >= 0 (inf: no cap)")
    optimizer = _guarded("in build()", lambda: method.build(params, info))
    for step in range(STEP_SIZE_STEPS):
        if step in STEP_SIZE_RELOAD_AT:
            start = [p.detach().clone() for p in params]
            state = _guarded(f"in state_dict() before step {step}",
                             lambda: copy.deepcopy(optimizer.state_dict()))
        calls[0] = 0
        loss = _guarded(f"at step {step}", lambda: optimizer.step(closure))
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
        if step in STEP_SIZE_RELOAD_AT:
            _check_round_trip(method, optimizer.last_step_size, params, closure, info, step,
                              start, state)
        observe = getattr(optimizer, "observe", None)
        if observe is not None:
            _guarded(f"in observe() after step {step}", lambda: observe(_rl_stats(step)))  # noqa: B023


def _rl_stats(step: int) -> dict[str, float]:
    """Synthetic ``observe`` statistics: a KL that swings across typical targets, a return
    unknown at first (NaN) then rising towards the upper bound."""
    return {"approx_kl": 0.001 * (1 + 30 * (step % 3 == 1)),
            "episodic_return": math.nan if step < 2 else 20.0 * step, "update": step // 4}


def _check_step_size_value(optimizer, step: int, cap: float) -> None:
    size = getattr(optimizer, "last_step_size", None)
    if not _is_real(size):
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

    fresh_size = _guarded(f"in a fresh optimizer loaded with the state saved before step {step}",
                          reloaded)
    gap = max(float((p.detach() - x).abs().max()) for p, x in zip(params, after, strict=True))
    if not gap <= 1e-12:
        raise ContractViolation(
            f"its state does not survive state_dict()/load_state_dict(): a fresh optimizer "
            f"loaded with the state saved before step {step} stepped to a different point "
            f"(largest difference {gap:.3g})")
    if fresh_size != size and not (_is_real(size) and _is_real(fresh_size)
                                   and math.isclose(size, fresh_size, rel_tol=1e-12)):
        raise ContractViolation(
            f"its state does not survive state_dict()/load_state_dict(): a fresh optimizer "
            f"loaded with the state saved before step {step} reported step size "
            f"{fresh_size!r} instead of {size!r}")
    with torch.no_grad():  # back to where the original optimizer left them
        for p, x in zip(params, after, strict=True):
            p.copy_(x)


# batch_size ------------------------------------------------------------------------------------

def _batch_statistics(step: int, batch_size: int, samples: int) -> dict[str, float]:
    """One step's statistics: |grad|^2 = 1/step shrinking, per-sample variance trace 4."""
    grad_sq, variance = 1.0 / step, 4.0
    return {
        "loss": 2.0 / (1.0 + 0.1 * step), "grad_sq": grad_sq + variance / batch_size,
        "batch_size": batch_size, "samples": samples, "n_samples": BATCH_INFO["n_samples"],
        "grad_sq_big": grad_sq + variance / batch_size, "big_batch_size": batch_size,
        "grad_sq_small": grad_sq + variance, "small_batch_size": 1, "grad_var": variance,
    }


def _size_range(method) -> tuple[int, int, str]:
    n_samples = BATCH_INFO["n_samples"]
    if "min_size" in method.params and "max_size" in method.params:
        highest = min(method.params["max_size"] or n_samples, n_samples)
        lowest = min(method.params["min_size"], highest)
        return lowest, highest, f"its min_size/max_size with n_samples={n_samples}"
    return 1, n_samples, f"n_samples={n_samples}"


def _batch_run(cls, overrides, feed: list[dict] | None = None):
    """Answers and diagnostics of a fresh instance; statistics follow its answers unless
    ``feed`` gives them. Returns (answers, diagnostics, statistics fed)."""
    method = cls(**overrides)
    lowest, highest, bounds = _size_range(method)
    answers = [_guarded("in start()", lambda: method.start(dict(BATCH_INFO)))]
    shown = [_guarded("in diagnostics() after start()", method.diagnostics)]
    fed, samples = [], 0
    for step in range(1, BATCH_STEPS + 1):
        _check_batch_answer(answers[-1], step - 1, lowest, highest, bounds)
        _check_diagnostics(shown[-1], step - 1)
        if feed is None:
            used = min(max(answers[-1], 1), BATCH_INFO["n_samples"])
            samples += used
            stats = _batch_statistics(step, used, samples)
        else:
            stats = feed[step - 1]
        fed.append(stats)
        answers.append(_guarded(f"at step {step}",
                                lambda: method.next_batch_size(step, dict(stats))))  # noqa: B023
        shown.append(_guarded(f"in diagnostics() at step {step}", method.diagnostics))
    _check_batch_answer(answers[-1], BATCH_STEPS, lowest, highest, bounds)
    _check_diagnostics(shown[-1], BATCH_STEPS)
    return answers, shown, fed


def _check_batch_answer(size, step: int, lowest: int, highest: int, bounds: str) -> None:
    if (not isinstance(size, int) or isinstance(size, bool)
            or not lowest <= size <= highest):
        at = "from start()" if step == 0 else f"at step {step}"
        raise ContractViolation(
            f"returned {size!r} {at}; a batch size must be a positive integer within "
            f"[{lowest}, {highest}] ({bounds})")


def _check_diagnostics(metrics, step: int) -> None:
    at = "after start()" if step == 0 else f"at step {step}"
    if not isinstance(metrics, dict):
        raise ContractViolation(
            f"diagnostics() {at} returned {type(metrics).__name__}; it must return a dict of "
            "floats")
    for name, value in metrics.items():
        if not isinstance(name, str) or not isinstance(value, float):
            raise ContractViolation(
                f"diagnostics() {at} returned {value!r} for {name!r}; it must return a dict "
                "of floats")


def _same_metrics(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def _check_batch_size(cls, overrides, method) -> None:
    answers, shown, fed = _batch_run(cls, overrides)
    again, shown_again, _ = _batch_run(cls, overrides, feed=fed)
    for step, (a, b) in enumerate(zip(answers, again, strict=True)):
        if a != b:
            raise ContractViolation(
                f"is not deterministic: two fresh instances fed the same statistics answered "
                f"{a} and {b} at step {step}")
    for step, (a, b) in enumerate(zip(shown, shown_again, strict=True)):
        if not _same_metrics(a, b):
            raise ContractViolation(
                f"is not deterministic: two fresh instances fed the same statistics gave "
                f"diagnostics {a} and {b} at step {step}")


# entropy ---------------------------------------------------------------------------------------

def _entropy_at(step: int) -> float:
    """Falls linearly from 1.55 to 0.05 at step 30, then rises to 1.05 at step 49."""
    if step <= 30:
        return 0.05 + 1.5 * (30 - step) / 30
    return 0.05 + (step - 30) / 19


def _right_padded_mask(gen: torch.Generator, rows: int, horizon: int) -> torch.Tensor:
    """Float mask, 1 on a prefix of each row: lengths in [horizon / 4, horizon], row 0 full."""
    lengths = torch.randint(horizon // 4, horizon + 1, (rows,), generator=gen)
    lengths[0] = horizon
    return (torch.arange(horizon) < lengths[:, None]).to(torch.float64)


def _hook_inputs() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    shape = (ROWS, HOOK_HORIZON)
    log_probs = -torch.rand(shape, generator=gen, dtype=torch.float64) * 3.0 - 0.01
    return {
        "log_probs": log_probs,
        "old_log_probs": log_probs + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64),
        "advantages": torch.randn(shape, generator=gen, dtype=torch.float64),
        "mask": _right_padded_mask(gen, ROWS, HOOK_HORIZON),
        "entropy": torch.rand(shape, generator=gen, dtype=torch.float64) * 2.0,
    }


def _coefficients(cls, overrides) -> list:
    method = cls(**overrides)
    _guarded("in start()", lambda: method.start({"total_steps": ENTROPY_STEPS}))
    bounds = _guarded("in coefficient_bounds()", method.coefficient_bounds)
    if (not isinstance(bounds, tuple | list) or len(bounds) != 2
            or not all(_is_real(b) and not math.isnan(b) for b in bounds)
            or bounds[0] > bounds[1]):
        raise ContractViolation(
            f"coefficient_bounds() returned {bounds!r}; it must be a pair (low, high) of "
            "numbers with low <= high")
    low, high = bounds
    values = []
    for step in range(ENTROPY_STEPS):
        entropy = _entropy_at(step)
        call = f"coefficient(step={step}, entropy={entropy:.3g})"
        value = _guarded(f"in {call}", lambda: method.coefficient(step, entropy))  # noqa: B023
        if not _is_real(value):
            raise ContractViolation(f"{call} returned {value!r}; a coefficient must be a float")
        if not math.isfinite(value):
            raise ContractViolation(f"{call} returned {value!r}; a coefficient must be finite")
        if not low <= value <= high:
            raise ContractViolation(
                f"{call} returned {value!r}, outside its coefficient_bounds() [{low}, {high}]")
        values.append(value)
    return values


def _check_entropy(cls, overrides, method) -> None:
    problems = []
    try:
        first, second = _coefficients(cls, overrides), _coefficients(cls, overrides)
        if first != second:
            step = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
            problems.append(
                f"is not deterministic: two fresh instances gave coefficients {first[step]!r} "
                f"and {second[step]!r} at step {step}")
    except ContractViolation as violation:
        problems.extend(violation.args)
    try:
        _check_hook(cls(**overrides))
    except ContractViolation as violation:
        problems.extend(violation.args)
    if problems:
        raise ContractViolation(*problems)


def _check_hook(method) -> None:
    inputs = _hook_inputs()
    given = {k: v.clone() for k, v in inputs.items()}
    out = _guarded("in policy_loss_hook()", lambda: method.policy_loss_hook(**given))
    if not isinstance(out, Mapping):
        raise ContractViolation(
            f"policy_loss_hook() returned {type(out).__name__}; it must return a mapping of "
            "names to tensors")
    for name, value in out.items():
        if name == "metrics":
            _check_hook_metrics(value)
            continue
        if isinstance(value, torch.Tensor):
            finite = bool(torch.isfinite(value).all()) if value.is_floating_point() else True
        elif _is_real(value):
            finite = math.isfinite(value)
        else:
            raise ContractViolation(
                f"policy_loss_hook() returned {type(value).__name__} for {name!r}; its values "
                "must be tensors")
        if not finite:
            raise ContractViolation(
                f"policy_loss_hook() returned a non-finite value (NaN or inf) in {name!r}")
    _check_unchanged("policy_loss_hook()", inputs, given)


def _check_hook_metrics(metrics: Any) -> None:
    if not isinstance(metrics, Mapping):
        raise ContractViolation(
            f"policy_loss_hook() returned {type(metrics).__name__} for 'metrics'; it must be a "
            "mapping of names to numbers")
    for key, value in metrics.items():
        number = float(value) if isinstance(value, torch.Tensor) and value.numel() == 1 else value
        if not _is_real(number) or math.isnan(number):
            raise ContractViolation(
                f"policy_loss_hook() returned {value!r} for metrics[{key!r}]; metrics must be "
                "numbers (not NaN)")


def _check_unchanged(what: str, original: dict, given: dict) -> None:
    for name, tensor in original.items():
        if not torch.equal(tensor, given[name]):
            raise ContractViolation(f"changed its input {name!r} in place (in {what})")


# advantage -------------------------------------------------------------------------------------

def _advantage_inputs() -> dict[str, torch.Tensor]:
    """Seeded synthetic inputs; see the module docstring."""
    gen = torch.Generator().manual_seed(2)
    shape = (ROWS, HORIZON)
    mask = _right_padded_mask(gen, ROWS, HORIZON)
    lengths = mask.sum(dim=1).long()
    dones = torch.zeros(shape, dtype=torch.bool)
    for row, length in enumerate(lengths.tolist()):
        if length < HORIZON:
            dones[row, length - 1] = True  # rows that end early end in a terminal state
    terminated = dones.clone()
    dones[0, HORIZON // 2] = True  # an episode boundary inside a row: a truncation
    dones[0, HORIZON // 4] = terminated[0, HORIZON // 4] = True  # and a terminal state
    group_ids = torch.arange(ROWS // GROUP_SIZE).repeat_interleave(GROUP_SIZE)
    group_ids = group_ids[torch.randperm(ROWS, generator=gen)]
    values = torch.randn((ROWS, HORIZON + 1), generator=gen, dtype=torch.float64)
    next_values = values[:, 1:].clone()
    next_values[0, HORIZON // 2] = 3.0  # the value of the final observation at the truncation
    return {
        "rewards": torch.randn(shape, generator=gen, dtype=torch.float64),
        "values": values,
        "mask": mask,
        "group_ids": group_ids,
        "dones": dones,
        "terminated": terminated,
        "next_values": next_values,
        "reward_baselines": torch.randn(ROWS, generator=gen, dtype=torch.float64),
    }


def _perturb_padding(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inputs with rewards, values and dones changed at padded positions only."""
    gen = torch.Generator().manual_seed(3)
    padded = inputs["mask"] == 0
    out = {k: v.clone() for k, v in inputs.items()}
    noise = 100.0 + 10.0 * torch.randn(padded.shape, generator=gen, dtype=torch.float64)
    if "rewards" in out:
        out["rewards"] = torch.where(padded, noise, out["rewards"])
    if "values" in out:
        # the value of state t is used by step t and by step t - 1: keep it if either is valid
        valid = torch.zeros(out["values"].shape, dtype=torch.bool)
        valid[:, :-1] |= ~padded
        valid[:, 1:] |= ~padded
        value_noise = -50.0 + 10.0 * torch.randn(valid.shape, generator=gen, dtype=torch.float64)
        out["values"] = torch.where(valid, out["values"], value_noise)
    if "next_values" in out:
        out["next_values"] = torch.where(padded, noise - 30.0, out["next_values"])
    for name in ("dones", "terminated"):
        if name in out:
            out[name] = torch.where(padded, ~out[name], out[name])
    return out


def _compute(method, inputs: dict[str, torch.Tensor], what: str, problems: list[str]):
    """Run ``compute`` on clones and check the result's form; a changed clone adds a problem."""
    given = {k: v.clone() for k, v in inputs.items()}
    out = _guarded(what, lambda: method.compute(**given))
    if (not isinstance(out, tuple | list) or len(out) != 2
            or not all(isinstance(t, torch.Tensor) for t in out)):
        raise ContractViolation(
            f"compute() returned {type(out).__name__}; it must return a pair (advantages, "
            "returns) of tensors")
    shape = tuple(inputs["rewards"].shape) if "rewards" in inputs else (ROWS, HORIZON)
    for name, tensor in zip(("advantages", "returns"), out, strict=True):
        if tuple(tensor.shape) != shape:
            raise ContractViolation(
                f"compute() returned {name} of shape {tuple(tensor.shape)}; it must have the "
                f"shape of rewards {shape}")
        if not bool(torch.isfinite(tensor).all()):
            raise ContractViolation(f"compute() returned non-finite {name} (NaN or inf)")
    try:
        _check_unchanged("compute()", inputs, given)
    except ContractViolation as violation:
        if violation.args[0] not in problems:
            problems.append(violation.args[0])
    return tuple(t.detach().to(torch.float64) for t in out)


def _check_advantage(cls, overrides, method) -> None:
    full = _advantage_inputs()
    names = method.requirements(method.params)
    inputs = {k: v for k, v in full.items() if k in names}
    problems: list[str] = []
    out = _compute(method, inputs, "in compute()", problems)
    again = _compute(method, inputs, "in a second compute() on the same inputs", problems)
    for name, a, b in zip(("advantages", "returns"), out, again, strict=True):
        if not torch.equal(a, b):
            problems.append(f"compute() is not a pure function: two calls with the same inputs "
                            f"gave different {name}")
    valid = inputs["mask"] != 0 if "mask" in inputs else torch.ones(ROWS, HORIZON, dtype=bool)
    if "mask" in inputs:
        moved = _compute(method, _perturb_padding(inputs),
                         "in compute() on inputs changed at padded positions", problems)
        for name, a, b in zip(("advantages", "returns"), out, moved, strict=True):
            change = (a - b).abs().where(valid, torch.zeros((), dtype=a.dtype))
            if not bool(torch.allclose(a[valid], b[valid], rtol=1e-6, atol=1e-6)):
                row, step = divmod(int(change.argmax()), HORIZON)
                problems.append(
                    f"changing rewards/values/dones at padded positions (mask == 0) changed its "
                    f"{name} at valid positions (by {float(change.max()):.3g} at row {row}, "
                    f"step {step}); padding must not leak into valid results")
    problems += _invariant_problems(cls, out[0], full["group_ids"], valid)
    if problems:
        raise ContractViolation(*problems)


def _invariant_problems(cls, advantages, group_ids, valid) -> Iterator[str]:
    declared = frozenset(getattr(cls, "invariants", frozenset()))
    for name in sorted(declared - KNOWN_INVARIANTS):
        yield (f"declares invariant {name!r}, which the contract does not know (known: "
               f"{', '.join(sorted(KNOWN_INVARIANTS))})")
    if "zero_mean_per_group" in declared:
        for group in group_ids.unique().tolist():
            rows = group_ids == group
            mean = float(advantages[rows][valid[rows]].mean())
            if not abs(mean) <= INVARIANT_ATOL:
                yield (f"declares invariant 'zero_mean_per_group' but its advantages average "
                       f"{mean:.3g} over the valid positions of group {group} (atol "
                       f"{INVARIANT_ATOL:g})")
                return


_RUNNERS: dict[str, Callable[..., None]] = {
    "step_size": _check_step_size,
    "batch_size": _check_batch_size,
    "entropy": _check_entropy,
    "advantage": _check_advantage,
}
