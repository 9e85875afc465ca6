"""The sign- and mean-preserving redistribution of a per-episode advantage over its steps, the
primitive the credit-over-steps estimators share (rubric_redistribution with the rubric items'
credit, stamp with first-exposure counts). StepOPSD's clipped multiplicative shaping
(step_opsd) keeps the sign but not the mean, so it does not use it.

For row i with advantage A_i, K_i valid steps and nonnegative credit c_{i,t} at its steps:

    A_{i,t} = A_i * ((1 - eta) + eta * K_i * c_{i,t} / sum_t' c_{i,t'})

so every weight is >= 0 (the sign of A_i is kept, for eta in [0, 1]) and the weights average
to 1 over the row's valid steps (their mean is A_i). A row whose credit sums to 0 keeps A_i at
every valid step; eta = 0 gives A_i everywhere. Padded positions are 0.
"""

from __future__ import annotations

import torch


def redistribute(per_row: torch.Tensor, credit: torch.Tensor, ok: torch.Tensor,
                 eta: float) -> torch.Tensor:
    """(B,) advantages spread over (B, T) steps by ``credit`` (>= 0; read only where ``ok``)."""
    zero = torch.zeros((), dtype=per_row.dtype, device=per_row.device)
    credit = torch.where(ok, credit.to(per_row.dtype), zero)
    total = credit.sum(dim=1, keepdim=True)
    steps = ok.sum(dim=1, keepdim=True).to(per_row.dtype)
    share = torch.where(total > 0, steps * credit / torch.where(total > 0, total, 1.0),
                        torch.ones_like(credit))
    weights = (1.0 - eta) + eta * share
    return torch.where(ok, per_row[:, None] * weights, zero)
