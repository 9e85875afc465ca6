"""Helpers shared by the RLVR entropy methods (clip_cov, kl_cov, top_entropy_tokens).

``masked_mean`` and ``aggregate`` follow verl's ``verl_F.masked_mean`` and
``core_algos.agg_loss`` (single process: the token count is the batch's own);
``top_k_positions`` picks the k valid positions with the largest scores, ties going to the
earlier position in row-major order so that the choice is deterministic.
"""

from __future__ import annotations

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                "seq-mean-token-sum-norm")


def masked_mean(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """sum(values over valid) / (count + 1e-8), as verl's masked_mean."""
    weight = valid.to(values.dtype)
    return (values * weight).sum() / (weight.sum() + 1e-8)


def aggregate(loss_mat: torch.Tensor, valid: torch.Tensor, mode: str) -> torch.Tensor:
    """verl's agg_loss of a (B, T) per-token loss over the valid positions.

    token-mean: sum / number of valid tokens; seq-mean-token-mean: mean over non-empty rows of
    each row's sum / (its count + 1e-8); seq-mean-token-sum: mean over non-empty rows of each
    row's sum; seq-mean-token-sum-norm: sum / T (verl's default loss_scale_factor). An empty
    batch gives 0 (verl would divide by zero).
    """
    summed = torch.where(valid, loss_mat, torch.zeros((), dtype=loss_mat.dtype,
                                                      device=loss_mat.device))
    counts = valid.sum(dim=-1).to(loss_mat.dtype)
    if mode == "token-mean":
        return summed.sum() / counts.sum().clamp_min(1.0)
    if mode == "seq-mean-token-sum-norm":
        return summed.sum() / loss_mat.shape[-1]
    rows = summed.sum(dim=-1)
    if mode == "seq-mean-token-mean":
        rows = rows / (counts + 1e-8)
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss aggregation {mode!r}; allowed: {', '.join(AGGREGATIONS)}")
    nonempty = (counts > 0).to(loss_mat.dtype)
    return (rows * nonempty).sum() / nonempty.sum().clamp_min(1.0)


def top_k_positions(scores: torch.Tensor, valid: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the ``k`` valid positions with the largest ``scores``; ties go to the
    earlier position in row-major order."""
    positions = valid.reshape(-1).nonzero().squeeze(1)
    order = torch.sort(scores.reshape(-1)[positions], descending=True, stable=True).indices
    chosen = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    chosen[positions[order[:k]]] = True
    return chosen.view(scores.shape)


def fraction(count: torch.Tensor, total: torch.Tensor) -> float:
    """count / total as a float, 0 when total is 0."""
    return float(count) / max(float(total), 1.0)
