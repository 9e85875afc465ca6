"""The four slots of an RL training loop, opened in one call before its first update.

Both RL loops (control, RLVR) start the same way: build the step-size slot's optimizer for
``updates x per_update`` optimizer steps, start the entropy slot, start the batch-size slot on
the configured batch (its first answer may change the batch's shape), and ask the advantage
method which inputs it reads. ``open_rl_slots`` does that in this order, so a loop cannot get
it subtly different. A value-based loop (DQN), which has no entropy or advantage slot, opens
the other two with ``open_update_slots``, the same code.

On a seed axis (``open_rl_seed_slots``) the S seeds of a trial share one optimizer built on the
seed axis (the step-size family's contract) and one batch-size schedule (a vectorised batch
method's sizes never depend on a seed), while each seed has its own entropy method instance
(its coefficient and state are its own); the loop calls the advantage method once per seed
(once on all seeds' rows for a method that declares ``row_independent``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from workbench.families.advantage import AdvantageMethod
from workbench.families.batch_size import BatchSlot
from workbench.families.entropy import EntropySlot
from workbench.families.step_size import seed_axis_info


@dataclass
class RLSlots:
    optimizer: torch.optim.Optimizer
    entropy: EntropySlot
    batch: BatchSlot
    advantage: AdvantageMethod
    advantage_inputs: frozenset[str]  # what the advantage method reads, for its resolved values
    first_batch: int | None  # the batch slot's first size, or None: keep the configured one


def open_rl_slots(methods: Mapping[str, Any], parameters: Iterable[torch.nn.Parameter], *,
                  updates: int, per_update: int, batch: int, samples: int,
                  info: Mapping[str, Any] | None = None) -> RLSlots:
    """Open the slots for ``updates`` policy updates of ``per_update`` optimizer steps each, on
    a configured batch of ``batch`` samples; ``samples`` is the budget's sample cap and
    ``info`` what else the task tells the step-size method (e.g. ``return_upper_bound``)."""
    optimizer = _optimizer(methods, parameters, updates, per_update, info)
    entropy = EntropySlot(methods["entropy"], total_steps=updates)
    batch_slot, first_batch = _batch_slot(methods, batch, samples)
    advantage = methods["advantage"]
    return RLSlots(optimizer, entropy, batch_slot, advantage,
                   frozenset(advantage.requirements(advantage.params)), first_batch)


@dataclass
class UpdateSlots:
    optimizer: torch.optim.Optimizer
    batch: BatchSlot
    first_batch: int | None  # the batch slot's first size, or None: keep the configured one


def open_update_slots(methods: Mapping[str, Any], parameters: Iterable[torch.nn.Parameter], *,
                      updates: int, per_update: int, batch: int, samples: int,
                      info: Mapping[str, Any] | None = None) -> UpdateSlots:
    """``open_rl_slots`` for a loop with only the step-size and batch-size slots (a
    value-based learner: no policy entropy to regularise, no advantage to estimate): the
    optimizer and the batch slot, opened exactly as ``open_rl_slots`` opens them."""
    optimizer = _optimizer(methods, parameters, updates, per_update, info)
    batch_slot, first_batch = _batch_slot(methods, batch, samples)
    return UpdateSlots(optimizer, batch_slot, first_batch)


def _optimizer(methods: Mapping[str, Any], parameters: Iterable[torch.nn.Parameter],
               updates: int, per_update: int,
               info: Mapping[str, Any] | None) -> torch.optim.Optimizer:
    return methods["step_size"].build(list(parameters), {
        "total_steps": updates * per_update, "batches_per_epoch": per_update, **(info or {})})


def _batch_slot(methods: Mapping[str, Any], batch: int,
                samples: int) -> tuple[BatchSlot, int | None]:
    batch_slot = BatchSlot(methods.get("batch_size"), samples)
    return batch_slot, batch_slot.start(batch)


@dataclass
class RLSeedSlots:
    optimizer: torch.optim.Optimizer  # over the parameters stacked on the seed axis
    entropy: list[EntropySlot]  # one per seed
    batch: BatchSlot
    advantage: AdvantageMethod
    advantage_inputs: frozenset[str]
    first_batch: int | None


def open_rl_seed_slots(methods: Mapping[str, Any], parameters: Iterable[torch.Tensor], *,
                       seeds: int, updates: int, per_update: int, batch: int, samples: int,
                       info: Mapping[str, Any] | None = None,
                       on_axis: Mapping[str, Any] | None = None) -> RLSeedSlots:
    """``open_rl_slots`` for S = ``seeds`` seeds run as one computation: ``parameters`` carry
    a leading seed axis; the entropy method is copied for seeds 1..S-1 before it starts;
    ``on_axis`` the step-size inputs the task builds on the seed axis (``seed_axis_info``)."""
    run_info = {"total_steps": updates * per_update, "batches_per_epoch": per_update,
                **(info or {})}
    optimizer = methods["step_size"].build(list(parameters), seed_axis_info([run_info] * seeds,
                                                                        on_axis))
    method = methods["entropy"]
    entropy = [EntropySlot(m, total_steps=updates)
               for m in [method, *(copy.deepcopy(method) for _ in range(seeds - 1))]]
    batch_slot = BatchSlot(methods.get("batch_size"), samples)
    first_batch = batch_slot.start(batch)
    advantage = methods["advantage"]
    return RLSeedSlots(optimizer, entropy, batch_slot, advantage,
                       frozenset(advantage.requirements(advantage.params)), first_batch)
