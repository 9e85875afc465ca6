"""The per-family contracts a registered method implements (DESIGN.md, "Method interface").

Each family base class fixes ``family`` and the one or two methods a task calls. A method's
``requires`` names what the task must provide (``Task.provides``); incompatible pairs are
refused when a sweep spec is checked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from workbench.registry import Method

#: The names a method of each family may ``require``: one definition, read by the contract
#: checks (``workbench.contracts``) and by the spec check against each task's ``provides``
#: (every name a task provides is one of these; tests/test_tasks.py checks it). Their
#: meanings are in each family's docstring below.
REQUIRABLE: dict[str, frozenset[str]] = {
    "step_size": frozenset({"closure", "total_steps", "batches_per_epoch", "f_star",
                            "loss_lower_bound", "smoothness", "lmo", "rl_stats",
                            "return_upper_bound"}),
    "batch_size": frozenset({"per_sample_grads"}),
    "entropy": frozenset({"log_probs", "old_log_probs", "advantages", "mask", "entropy"}),
    "advantage": frozenset({"rewards", "values", "mask", "group_ids", "dones", "terminated",
                            "next_values", "reward_baselines"}),
}


class StepSizeMethod(Method):
    """Builds a ``torch.optim.Optimizer`` over the task's parameters.

    The task calls ``optimizer.step(closure)``. ``closure(backward=True)`` evaluates the loss on
    the current minibatch at the current parameters, fills ``.grad`` and returns the loss;
    ``closure(backward=False)`` only evaluates the loss (a line search's trial point). The
    optimizer calls it at least once and sets ``last_step_size`` (a float) on every step.
    ``info`` holds what the task provides: always ``total_steps`` (the step budget) and
    ``batches_per_epoch``; where known ``f_star`` (exact optimal value), ``loss_lower_bound``,
    ``smoothness`` (L), and for constrained tasks ``lmo`` (linear minimisation oracle: a list
    of gradient tensors -> the list of vertex tensors s = argmin_{s in C} <g, s>). A method
    ``requires`` the keys it reads (``closure`` for re-evaluations, ``f_star``, ``lmo``, ...).

    Policy-gradient tasks (which provide ``rl_stats``) call the optimizer's ``observe(stats)``,
    where it defines one, after every optimizer step with ``approx_kl`` (the k3 estimate of
    KL(old || new) on that minibatch, measured before the step), ``episodic_return`` (mean return
    of the episodes finished so far in the latest rollout, NaN before the first) and ``update``
    (rollout index); their ``info`` also gives ``return_upper_bound`` (the largest return an
    episode can have) where known.
    """

    family = "step_size"

    def build(
        self, params: Iterable[torch.Tensor], info: Mapping[str, Any]
    ) -> torch.optim.Optimizer:
        raise NotImplementedError

    def step_size_cap(self) -> float:
        """The largest ``last_step_size`` this configuration may report (inf: no cap)."""
        return float("inf")


def step_size_taken(optimizer: torch.optim.Optimizer) -> float:
    """``method/step_size``: the step the optimizer reports for its last ``step`` (NaN for a
    plain torch optimizer, which reports none)."""
    return float(getattr(optimizer, "last_step_size", math.nan))


class BatchSizeMethod(Method):
    """Chooses the batch size of every step.

    ``start(info)`` resets all state (an instance may serve several runs) and returns the
    first batch size; ``info`` holds the task's ``batch_size`` (its
    base size; None means the full batch) and ``n_samples``. After each step,
    ``next_batch_size(step, stats)`` returns the next one from the step's statistics: ``loss``,
    ``grad_sq`` (squared norm of the batch gradient), ``batch_size``, ``samples`` (seen so
    far), ``n_samples``, and, where the method ``requires`` ``per_sample_grads``,
    ``grad_sq_big``/``big_batch_size``, ``grad_sq_small``/``small_batch_size`` and
    ``grad_var`` (see ``workbench.testbeds.optimisation.loop``). The loop clamps the answer to
    [1, n_samples]. ``diagnostics()`` returns extra metrics to log at every step (e.g.
    ``batch/noise_scale``).
    """

    family = "batch_size"

    def start(self, info: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def next_batch_size(self, step: int, stats: Mapping[str, float]) -> int:
        raise NotImplementedError

    def diagnostics(self) -> dict[str, float]:
        return {}


#: ``n_samples`` where the data never runs out (an RL loop draws fresh rollouts) and the
#: budget sets no sample limit.
UNLIMITED_SAMPLES = 2**40


class BatchSlot:
    """The loops' side of the batch-size contract: the method's first answer and one answer
    after every step, each clamped to [1, n_samples]; without a method (a task whose spec
    leaves the slot empty) every answer is None and the loop keeps its own size."""

    def __init__(self, method: BatchSizeMethod | None, n_samples: int | None):
        self.method = method
        self.n_samples = int(n_samples or UNLIMITED_SAMPLES)

    def _clamp(self, size) -> int:
        return max(1, min(int(size), self.n_samples))

    def start(self, batch_size: int | None, **info: Any) -> int | None:
        if self.method is None:
            return None
        return self._clamp(self.method.start({**info, "batch_size": batch_size,
                                              "n_samples": self.n_samples}))

    def after_step(self, step: int, *, loss: float, grad_sq: float, batch_size: int,
                   samples: int, extra: Mapping[str, float] | None = None) -> int | None:
        """The next batch size from the step's statistics (see ``BatchSizeMethod``);
        ``extra``: the per-sample statistics of a method that requires them."""
        if self.method is None:
            return None
        return self._clamp(self.method.next_batch_size(step, {
            **(extra or {}), "loss": loss, "grad_sq": grad_sq, "batch_size": batch_size,
            "samples": samples, "n_samples": self.n_samples}))

    def diagnostics(self) -> dict[str, float]:
        return {} if self.method is None else self.method.diagnostics()


class EntropyMethod(Method):
    """Returns the entropy coefficient from the step and the measured policy entropy; may also
    adjust the policy loss (clip bounds, token masks) through ``policy_loss_hook``.

    ``start(info)`` is called once before a run (an instance may serve several runs) with
    ``total_steps``, the number of policy updates of the run; it resets all state.
    ``coefficient(step, entropy)`` is called once per update (step 0, 1, ...) with the mean
    policy entropy (nats) of that update's batch; the loss gets ``- coefficient * entropy``.

    ``policy_loss_hook(log_probs=, old_log_probs=, advantages=, mask=, entropy=)`` (tensors of
    one shape, (B, T); ``entropy`` per token) returns any of: ``clip_low`` and ``clip_high``
    (the PPO ratio is clipped to [1 - clip_low, 1 + clip_high]), ``loss_mask`` (a (B, T) 0/1
    tensor: which tokens the policy-gradient term is taken over; it multiplies ``mask``, so
    the aggregation counts only those), ``loss_weight`` (a (B, T) tensor multiplying each
    token's policy-gradient term while the aggregation still counts every token of ``mask``),
    ``extra_loss`` (a scalar tensor added to the loss; it may depend on ``log_probs``) and
    ``metrics`` (a mapping of floats to log). Unknown keys are ignored by the loop.
    """

    family = "entropy"

    def start(self, info: Mapping[str, Any]) -> None:
        """Reset state before a run; ``info['total_steps']`` is the number of updates."""

    def coefficient(self, step: int, entropy: float) -> float:
        raise NotImplementedError

    def coefficient_bounds(self) -> tuple[float, float]:
        """The interval ``(low, high)`` every ``coefficient`` of this configuration lies in;
        [0, inf) unless a method declares tighter bounds (``workbench.contracts`` checks it)."""
        return (0.0, math.inf)

    def policy_loss_hook(self, **inputs: torch.Tensor) -> Mapping[str, torch.Tensor]:
        return {}


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


def adjust_policy_loss(method: EntropyMethod, *, log_probs: torch.Tensor,
                       old_log_probs: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, entropy: torch.Tensor,
                       clip: float) -> LossAdjustment:
    """Call the hook on (B, T) tensors (``entropy`` detached) and read its answer; ``clip`` is
    the loop's own bound, used on a side the hook does not set."""
    hook = method.policy_loss_hook(log_probs=log_probs, old_log_probs=old_log_probs,
                                   advantages=advantages, mask=mask, entropy=entropy.detach())
    return LossAdjustment(
        clip_low=hook.get("clip_low", clip), clip_high=hook.get("clip_high", clip),
        mask=mask * hook["loss_mask"] if "loss_mask" in hook else mask,
        weight=hook.get("loss_weight"), extra_loss=hook.get("extra_loss", 0.0),
        metrics={f"method/{k}": float(v) for k, v in hook.get("metrics", {}).items()})


class AdvantageMethod(Method):
    """A pure function on tensors (rewards, values, masks, group ids, ... as ``requires``
    names them) returning ``(advantages, returns)``, each of the shape of ``rewards``. No hidden
    state; inputs are never modified in place.

    Input names, for B rows (sequences or environment rollouts) of T steps:
    ``rewards`` (B, T) float; ``values`` (B, T + 1) float (the last column is the value of the
    state after step T - 1); ``mask`` (B, T) float or bool, 1 where a token/step is valid and
    0 for padding; ``group_ids`` (B,) long, rows with the same id answer the same prompt;
    ``dones`` (B, T) bool, True where an episode ends at that step (terminated or truncated);
    ``terminated`` (B, T) bool, True where it ends in a terminal state (no bootstrapping; a done
    that is not terminated is a truncation); ``next_values`` (B, T) float, the value of the
    state actually reached after step t, before any automatic reset (equal to
    ``values[:, t + 1]`` except at truncations, where it is the value of the final
    observation); ``reward_baselines`` (B,) float, a per-row baseline reward (ReMax: the
    reward of the greedy answer). Results at valid positions must not depend on inputs at
    padded ones.

    ``invariants`` declares properties the contract (``workbench.contracts``) checks; known:
    ``"zero_mean_per_group"``: within each group the advantages average to 0 over its valid
    positions (every valid token counts once).
    """

    family = "advantage"
    invariants: ClassVar[frozenset[str]] = frozenset()

    def compute(self, **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError
