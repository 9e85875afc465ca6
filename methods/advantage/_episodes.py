"""Episode structure of environment rollouts, shared by the control advantage estimators.

Inputs follow ``workbench.families.AdvantageMethod``: B rows (environments) of T steps,
``dones`` (an episode ends at step t), ``terminated`` (it ends in a terminal state) and an
optional ``mask`` (1 at valid steps). A done that is not terminated is a truncation.

``structure`` answers, per step, whether the step is valid, whether the recursion of returns
carries on from step t + 1 into step t (``continues``: the episode does not end at t and step
t + 1 is a valid step of the same row) and whether the return at t is cut off without a
terminal state (``cut``: a truncation, the last step of the rollout, or the last valid step
before padding, when that step is not terminal). A cut step bootstraps from ``next_values``
where the estimator does; a terminal one never does.

Flags may be bool or 0/1 floats. Everything is computed with ``torch.where`` so that whatever
padded positions hold (even inf or NaN) never reaches a valid one.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Structure(NamedTuple):
    valid: torch.Tensor  # (B, T) bool
    continues: torch.Tensor  # (B, T) bool: A_t / G_t takes in A_{t+1} / G_{t+1}
    terminal: torch.Tensor  # (B, T) bool: the episode ends in a terminal state at t
    cut: torch.Tensor  # (B, T) bool: valid, not continued and not terminal


def structure(rewards: torch.Tensor, dones: torch.Tensor, terminated: torch.Tensor | None = None,
              mask: torch.Tensor | None = None) -> Structure:
    """The per-step flags of a rollout (see the module docstring). Without ``terminated``
    every episode end counts as terminal."""
    rows, horizon = rewards.shape
    device = rewards.device
    valid = (torch.ones((rows, horizon), dtype=torch.bool, device=device) if mask is None
             else (mask != 0).to(device))
    ends = (dones != 0).to(device)
    terminal = ends if terminated is None else (terminated != 0).to(device)
    ends = ends | terminal
    next_valid = torch.cat([valid[:, 1:], torch.zeros((rows, 1), dtype=torch.bool,
                                                      device=device)], dim=1)
    continues = valid & ~ends & next_valid
    cut = valid & ~continues & ~terminal
    return Structure(valid, continues, terminal, cut)


def zero_where_not(flags: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` where ``flags`` holds, 0 elsewhere (never multiplies, so inf/NaN stay out)."""
    return torch.where(flags, values, torch.zeros((), dtype=values.dtype, device=values.device))
