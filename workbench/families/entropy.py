"""The entropy family: the method's interface, the loops' side of it (``EntropySlot``), the
inputs its hook may require and the contract check.

Contract check: after ``start({"total_steps": 50})``, ``coefficient(step, entropy)`` for steps
0..49 with an entropy that falls then rises is a finite number within
``coefficient_bounds()``, the same for two fresh instances;
``policy_loss_hook(log_probs=, old_log_probs=, advantages=, mask=, entropy=)`` on (8, 16)
tensors returns a mapping of finite tensors (or numbers; ``metrics``: a mapping of numbers)
and leaves its inputs unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from workbench.families._checks import (
    ContractViolation,
    check_unchanged,
    guarded,
    is_real,
    right_padded_mask,
)
from workbench.registry import Method

FAMILY = "entropy"

#: The inputs an entropy method's ``policy_loss_hook`` may ``require`` (a task's ``provides``
#: names those it gives), each with its meaning; all are (B, T) tensors of one minibatch.
REQUIRABLE: Mapping[str, str] = {
    "log_probs": "log-probabilities of the taken actions (tokens) under the current policy",
    "old_log_probs": "the same under the policy that sampled them",
    "advantages": "the advantages of the minibatch",
    "mask": "1 where a token (step) is valid, 0 for padding",
    "entropy": "the current policy's entropy at each token (nats), detached",
}


class EntropyMethod(Method):
    """Returns the entropy coefficient from the step and the measured policy entropy; may also
    adjust the policy loss (clip bounds, token masks) through ``policy_loss_hook``.

    ``start(info)`` is called once before a run (an instance may serve several runs) with
    ``total_steps``, the number of policy updates of the run; it resets all state.
    ``coefficient(step, entropy)`` is called once per update (step 0, 1, ...) with the mean
    policy entropy (nats) of that update's batch; the loss gets ``- coefficient * entropy``.

    ``policy_loss_hook(**inputs)`` (the ``REQUIRABLE`` tensors, of one shape (B, T)) returns
    any of: ``clip_low`` and ``clip_high`` (the PPO ratio is clipped to
    [1 - clip_low, 1 + clip_high]), ``loss_mask`` (a (B, T) 0/1 tensor: which tokens the
    policy-gradient term is taken over; it multiplies ``mask``, so the aggregation counts only
    those), ``loss_weight`` (a (B, T) tensor multiplying each token's policy-gradient term
    while the aggregation still counts every token of ``mask``), ``extra_loss`` (a scalar
    tensor added to the loss; it may depend on ``log_probs``) and ``metrics`` (a mapping of
    floats to log). Unknown keys are ignored by the loop.
    """

    family = FAMILY
    # on a seed axis the loop gives each seed its own instance (``open_rl_seed_slots``), so
    # every method runs there as it runs alone
    vectorised: ClassVar[bool] = True

    def start(self, info: Mapping[str, Any]) -> None:
        """Reset state before a run; ``info['total_steps']`` is the number of updates."""

    def coefficient(self, step: int, entropy: float) -> float:
        raise NotImplementedError

    def coefficient_bounds(self) -> tuple[float, float]:
        """The interval ``(low, high)`` every ``coefficient`` of this configuration lies in;
        [0, inf) unless a method declares tighter bounds (the contract checks it)."""
        return (0.0, math.inf)

    def policy_loss_hook(self, **inputs: torch.Tensor) -> Mapping[str, torch.Tensor]:
        return {}


# caller side -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LossAdjustment:
    """What an entropy method's ``policy_loss_hook`` does to one minibatch's policy loss, read
    once for every loop: the clip bounds, the mask the policy-gradient term is aggregated
    over (``mask * loss_mask``), the per-token ``weight`` (``loss_weight``, None: 1), the
    ``extra_loss`` to add (0 when none) and the hook's metrics as ``method/NAME`` floats."""

    clip_low: Any
    clip_high: Any
    mask: torch.Tensor
    weight: torch.Tensor | None
    extra_loss: Any
    metrics: dict[str, float]


class EntropySlot:
    """The loops' side of the entropy contract: the method started for a run of
    ``total_steps`` updates, its coefficient once per update, and its hook's answer on each
    minibatch's policy loss."""

    def __init__(self, method: EntropyMethod, *, total_steps: int):
        self.method = method
        method.start({"total_steps": total_steps})

    def coefficient(self, step: int, entropy: float) -> float:
        """``method/entropy_coef`` of update ``step`` from the batch's mean entropy (nats)."""
        return float(self.method.coefficient(step, entropy))

    def adjust_policy_loss(self, *, log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                           advantages: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor,
                           clip: float) -> LossAdjustment:
        """Call the hook on (B, T) tensors (``entropy`` detached) and read its answer; ``clip``
        is the loop's own bound, used on a side the hook does not set."""
        hook = self.method.policy_loss_hook(log_probs=log_probs, old_log_probs=old_log_probs,
                                            advantages=advantages, mask=mask,
                                            entropy=entropy.detach())
        return LossAdjustment(
            clip_low=hook.get("clip_low", clip), clip_high=hook.get("clip_high", clip),
            mask=mask * hook["loss_mask"] if "loss_mask" in hook else mask,
            weight=hook.get("loss_weight"), extra_loss=hook.get("extra_loss", 0.0),
            metrics={f"method/{k}": float(v) for k, v in hook.get("metrics", {}).items()})


def adjust_per_seed(slots: list[EntropySlot], live: list[bool], *, log_probs: torch.Tensor,
                    old_log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                    entropy: torch.Tensor, clip: float
                    ) -> tuple[LossAdjustment, list[dict[str, float]]]:
    """``EntropySlot.adjust_policy_loss`` on a seed axis: seed s's hook on its own (B, T)
    slice of the (S, B, T) tensors (a stopped seed's hook is not called: the loop's clip and
    mask); the answers stacked, clip bounds and masks (S, B, T), ``extra_loss`` (S,), and each
    seed's metrics."""
    shape, like = log_probs.shape[1:], log_probs

    def full(value) -> torch.Tensor:
        return torch.as_tensor(value, dtype=like.dtype, device=like.device).expand(shape)

    each = [slot.adjust_policy_loss(
                log_probs=log_probs[s], old_log_probs=old_log_probs[s],
                advantages=advantages[s], mask=mask[s], entropy=entropy[s], clip=clip)
            if live[s] else LossAdjustment(clip, clip, mask[s], None, 0.0, {})
            for s, slot in enumerate(slots)]
    weights = None
    if any(a.weight is not None for a in each):
        weights = torch.stack([full(1.0) if a.weight is None else full(a.weight) for a in each])
    stacked = LossAdjustment(
        clip_low=torch.stack([full(a.clip_low) for a in each]),
        clip_high=torch.stack([full(a.clip_high) for a in each]),
        mask=torch.stack([full(a.mask) for a in each]), weight=weights,
        extra_loss=torch.stack([torch.as_tensor(a.extra_loss, dtype=like.dtype,
                                                device=like.device) for a in each]),
        metrics={})
    return stacked, [a.metrics for a in each]


# contract check --------------------------------------------------------------------------------

STEPS = 50
HOOK_ROWS, HOOK_HORIZON = 8, 16


def _entropy_at(step: int) -> float:
    """Falls linearly from 1.55 to 0.05 at step 30, then rises to 1.05 at step 49."""
    if step <= 30:
        return 0.05 + 1.5 * (30 - step) / 30
    return 0.05 + (step - 30) / 19


def _hook_inputs() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    shape = (HOOK_ROWS, HOOK_HORIZON)
    log_probs = -torch.rand(shape, generator=gen, dtype=torch.float64) * 3.0 - 0.01
    return {
        "log_probs": log_probs,
        "old_log_probs": log_probs + 0.1 * torch.randn(shape, generator=gen, dtype=torch.float64),
        "advantages": torch.randn(shape, generator=gen, dtype=torch.float64),
        "mask": right_padded_mask(gen, HOOK_ROWS, HOOK_HORIZON),
        "entropy": torch.rand(shape, generator=gen, dtype=torch.float64) * 2.0,
    }


def _coefficients(cls, overrides) -> list:
    method = cls(**overrides)
    guarded("in start()", lambda: method.start({"total_steps": STEPS}))
    bounds = guarded("in coefficient_bounds()", method.coefficient_bounds)
    if (not isinstance(bounds, tuple | list) or len(bounds) != 2
            or not all(is_real(b) and not math.isnan(b) for b in bounds)
            or bounds[0] > bounds[1]):
        raise ContractViolation(
            f"coefficient_bounds() returned {bounds!r}; it must be a pair (low, high) of "
            "numbers with low <= high")
    low, high = bounds
    values = []
    for step in range(STEPS):
        entropy = _entropy_at(step)
        call = f"coefficient(step={step}, entropy={entropy:.3g})"
        value = guarded(f"in {call}", lambda: method.coefficient(step, entropy))  # noqa: B023
        if not is_real(value):
            raise ContractViolation(f"{call} returned {value!r}; a coefficient must be a float")
        if not math.isfinite(value):
            raise ContractViolation(f"{call} returned {value!r}; a coefficient must be finite")
        if not low <= value <= high:
            raise ContractViolation(
                f"{call} returned {value!r}, outside its coefficient_bounds() [{low}, {high}]")
        values.append(value)
    return values


def check_configuration(cls, overrides, method) -> None:
    """The entropy contract on one configuration (see the module docstring)."""
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
    out = guarded("in policy_loss_hook()", lambda: method.policy_loss_hook(**given))
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
        elif is_real(value):
            finite = math.isfinite(value)
        else:
            raise ContractViolation(
                f"policy_loss_hook() returned {type(value).__name__} for {name!r}; its values "
                "must be tensors")
        if not finite:
            raise ContractViolation(
                f"policy_loss_hook() returned a non-finite value (NaN or inf) in {name!r}")
    check_unchanged("policy_loss_hook()", inputs, given)


def _check_hook_metrics(metrics: Any) -> None:
    if not isinstance(metrics, Mapping):
        raise ContractViolation(
            f"policy_loss_hook() returned {type(metrics).__name__} for 'metrics'; it must be a "
            "mapping of names to numbers")
    for key, value in metrics.items():
        number = float(value) if isinstance(value, torch.Tensor) and value.numel() == 1 else value
        if not is_real(number) or math.isnan(number):
            raise ContractViolation(
                f"policy_loss_hook() returned {value!r} for metrics[{key!r}]; metrics must be "
                "numbers (not NaN)")
