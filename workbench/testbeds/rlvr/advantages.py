"""The RLVR loop's advantage batch (no transformers import: the task's ``provides`` reads
``ADVANTAGE_INPUTS`` when a spec is checked)."""

from __future__ import annotations

import torch

from workbench.families import AdvantageBatch

#: the advantage inputs ``advantage_batch`` fills (the task's ``provides``): values, dones,
#: terminated and next_values with a value head, reward_baselines where the method reads them
ADVANTAGE_INPUTS = AdvantageBatch.names("rewards", "mask", "group_ids", "values", "dones",
                                        "terminated", "next_values", "reward_baselines")


def advantage_batch(rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor,
                    values: torch.Tensor | None,
                    reward_baselines: torch.Tensor | None) -> AdvantageBatch:
    """B completions of T tokens: ``rewards``/``mask`` (B, T), ``group_ids`` (B,); with the
    value head's ``values`` (B, T + 1), each completion is one episode that terminates at its
    last valid token (``dones`` = ``terminated`` there, ``next_values`` = values[:, 1:])."""
    ends = None
    if values is not None:
        ends = torch.zeros_like(mask, dtype=torch.bool)
        lengths = mask.sum(1).long()
        rows = torch.arange(len(lengths), device=mask.device)
        ends[rows, (lengths - 1).clamp(min=0)] = lengths > 0
    return AdvantageBatch(
        rewards=rewards, mask=mask, group_ids=group_ids, values=values, dones=ends,
        terminated=ends, next_values=values[:, 1:] if values is not None else None,
        reward_baselines=reward_baselines)
