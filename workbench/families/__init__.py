"""The four method families, one module each (DESIGN.md, "Method interface"): the base class a
method implements, the caller side the training loops use, the names of the inputs a method
may ``require`` (each module's ``REQUIRABLE``, with meanings) and the contract checks.

    step_size   StepSizeMethod; step_size_taken, observe_rl_stats, minibatch_epochs
    batch_size  BatchSizeMethod; BatchSlot (start, clamp, advance)
    entropy     EntropyMethod; EntropySlot (coefficient; hook -> LossAdjustment)
    advantage   AdvantageMethod (a pure function), AdvantageBatch (its inputs);
                compute_advantages (its caller side: one call)
    rl_slots    open_rl_slots: an RL loop's four slots opened in one call, in one order;
                open_update_slots: the step-size and batch-size slots alone (DQN)
    rl_update   policy_step: one policy-gradient optimizer step on a minibatch's loss;
                minibatch_step: the same without the rl_stats (DQN's TD loss)
    checks      check(cls), check_all(family): the contracts run on methods

A method's ``requires`` names what the task must provide (``Task.provides``, names from
``REQUIRABLE``); incompatible pairs are refused when a sweep spec is checked.
"""

from workbench.families import advantage, batch_size, entropy, step_size
from workbench.families._checks import ContractViolation, configurations
from workbench.families.advantage import (
    TREE_SAMPLERS,
    AdvantageBatch,
    AdvantageMethod,
    ValueRequest,
    compute_advantages,
    monte_carlo_values,
)
from workbench.families.batch_size import UNLIMITED_SAMPLES, BatchSizeMethod, BatchSlot
from workbench.families.checks import check, check_all
from workbench.families.entropy import (
    EntropyMethod,
    EntropySlot,
    LossAdjustment,
    adjust_per_seed,
)
from workbench.families.rl_slots import (
    RLSeedSlots,
    RLSlots,
    UpdateSlots,
    open_rl_seed_slots,
    open_rl_slots,
    open_update_slots,
)
from workbench.families.rl_update import (
    clip_gradients,
    clip_per_seed,
    minibatch_step,
    policy_step,
    policy_step_seeds,
)
from workbench.families.step_size import (
    StepSizeMethod,
    mean_over_steps,
    minibatch_epochs,
    observe_rl_stats,
    seed_axis_info,
    step_size_taken,
    step_sizes_taken,
)

#: Every name a method of some family may ``require``: the union of the families' own
#: ``REQUIRABLE`` (a task's ``provides`` is a subset; tests/test_tasks.py checks it).
REQUIRABLE: frozenset[str] = frozenset().union(
    *(module.REQUIRABLE for module in (step_size, batch_size, entropy, advantage)))

__all__ = [
    "REQUIRABLE", "TREE_SAMPLERS", "UNLIMITED_SAMPLES", "AdvantageBatch", "AdvantageMethod",
    "BatchSizeMethod",
    "BatchSlot", "ContractViolation", "EntropyMethod", "EntropySlot", "LossAdjustment",
    "RLSeedSlots", "RLSlots", "StepSizeMethod", "UpdateSlots", "ValueRequest",
    "compute_advantages", "monte_carlo_values",
    "open_rl_seed_slots", "open_rl_slots", "open_update_slots", "minibatch_step",
    "adjust_per_seed", "advantage", "batch_size", "check", "check_all", "clip_gradients",
    "clip_per_seed", "configurations", "entropy", "policy_step", "policy_step_seeds",
    "mean_over_steps", "minibatch_epochs", "observe_rl_stats", "seed_axis_info", "step_size",
    "step_size_taken", "step_sizes_taken",
]
