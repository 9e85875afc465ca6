"""The four slots of an RL training loop, opened in one call before its first update.

Both RL loops (control, RLVR) start the same way: build the step-size slot's optimizer for
``updates x per_update`` optimizer steps, start the entropy slot, start the batch-size slot on
the configured batch (its first answer may change the batch's shape), and ask the advantage
method which inputs it reads. ``open_rl_slots`` does that in this order, so a loop cannot get
it subtly different.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from workbench.families.advantage import AdvantageMethod
from workbench.families.batch_size import BatchSlot
from workbench.families.entropy import EntropySlot


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
    optimizer = methods["step_size"].build(list(parameters), {
        "total_steps": updates * per_update, "batches_per_epoch": per_update, **(info or {})})
    entropy = EntropySlot(methods["entropy"], total_steps=updates)
    batch_slot = BatchSlot(methods.get("batch_size"), samples)
    first_batch = batch_slot.start(batch)
    advantage = methods["advantage"]
    return RLSlots(optimizer, entropy, batch_slot, advantage,
                   frozenset(advantage.requirements(advantage.params)), first_batch)
