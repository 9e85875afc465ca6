"""Tensor pieces shared by the outcome-reward advantage estimators (RLVR on language models).

Inputs follow ``workbench.families.AdvantageMethod``: ``rewards`` (B, T) token-level scores
(an outcome reward sits at the last valid token, zeros elsewhere), ``mask`` (B, T) with 1 at
valid response tokens, ``group_ids`` (B,) with one id per prompt (rows of a group need not be
contiguous). A row's *score* is its rewards summed over its valid tokens (verl's
``token_level_rewards.sum(-1)``, with padded positions left out so that padding cannot leak).

Group statistics are computed with index arithmetic (no Python loop over rows), in the dtype
and on the device of ``rewards``.
"""

from __future__ import annotations

import torch

SINGLETON_HELP = ("baseline of a group of one row: 'score' (verl: mean 0, std 1, so the "
                  "advantage is the score) or 'zero' (the row's own score: advantage 0, as "
                  "TRL/OpenRLHF compute it)")
STD_HELP = "'unbiased' (n - 1, torch.std: verl, TRL, OpenRLHF groups) or 'biased' (n)"


def valid(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The mask as 0/1 in the dtype and on the device of ``like``."""
    return (mask != 0).to(dtype=like.dtype, device=like.device)


def masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` with padded positions set to 0 (whatever they held, even NaN)."""
    return torch.where(mask != 0, values, torch.zeros((), dtype=values.dtype,
                                                      device=values.device))


def sequence_scores(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) score of each row: its rewards summed over its valid tokens."""
    return masked(rewards, mask).sum(dim=-1)


def broadcast(per_row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) -> (B, T): each row's value at its valid tokens, 0 at padded ones."""
    return per_row.unsqueeze(-1) * valid(mask, per_row)


class Groups:
    """The rows of each group: ``index`` (B,) maps a row to its group 0..G-1; ``sizes`` (G,)."""

    def __init__(self, group_ids: torch.Tensor, device: torch.device) -> None:
        _, index, sizes = torch.unique(group_ids.reshape(-1), return_inverse=True,
                                       return_counts=True)
        self.index = index.to(device)
        self.sizes = sizes.to(device)
        self.count = int(sizes.numel())

    def sum(self, per_row: torch.Tensor) -> torch.Tensor:
        """(G,) sum of ``per_row`` over each group's rows."""
        out = torch.zeros(self.count, dtype=per_row.dtype, device=per_row.device)
        return out.index_add(0, self.index, per_row)

    def row_size(self) -> torch.Tensor:
        """(B,) number of rows in each row's group."""
        return self.sizes[self.index]

    def mean(self, per_row: torch.Tensor) -> torch.Tensor:
        """(B,) mean of ``per_row`` over each row's group."""
        return (self.sum(per_row) / self.sizes.to(per_row.dtype))[self.index]

    def std(self, per_row: torch.Tensor, unbiased: bool) -> torch.Tensor:
        """(B,) standard deviation over each row's group (two-pass). A group of one has
        std 0 when ``biased`` and NaN when ``unbiased`` (as torch.std); callers decide."""
        centred = per_row - self.mean(per_row)
        sizes = self.sizes.to(per_row.dtype)
        dof = sizes - 1 if unbiased else sizes
        return (self.sum(centred * centred) / dof).sqrt()[self.index]

    def all_equal(self, per_row: torch.Tensor) -> torch.Tensor:
        """(B,) True for a row whose group's values are all equal (largest == smallest)."""
        empty = torch.zeros(self.count, dtype=per_row.dtype, device=per_row.device)
        largest = empty.scatter_reduce(0, self.index, per_row, "amax", include_self=False)
        smallest = empty.scatter_reduce(0, self.index, per_row, "amin", include_self=False)
        return (largest == smallest)[self.index]

    def singleton(self) -> torch.Tensor:
        """(B,) True for a row that is alone in its group."""
        return self.row_size() == 1


def group_mean_baseline(scores: torch.Tensor, groups: Groups, singleton: str) -> torch.Tensor:
    """(B,) the group mean of the scores; for a group of one 0 (``'score'``) or the score."""
    mean = groups.mean(scores)
    if singleton == "score":
        mean = torch.where(groups.singleton(), torch.zeros_like(mean), mean)
    return mean


def std_of(values: torch.Tensor, unbiased: bool) -> torch.Tensor:
    """Scalar standard deviation of a 1-D tensor; 1 for a single value (verl's group-of-one
    rule carried over to a batch of one)."""
    if values.numel() < 2:
        return torch.ones((), dtype=values.dtype, device=values.device)
    return values.std(correction=1 if unbiased else 0)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True,
                  scale: bool = True) -> torch.Tensor:
    """verl's ``masked_whiten`` over every valid token of the batch (each token counts once):

        mean = sum(v m) / (sum(m) + 1e-8)
        var  = sum((v - mean)^2 m) / (sum(m) + 1e-8) * n / (n - 1)   (n = sum(m); unbiased)
        out  = (v - mean) / sqrt(var + 1e-8)

    ``unbiased=False`` drops the n / (n - 1) factor (OpenRLHF's biased variance; OpenRLHF
    floors the variance at 1e-8 instead of adding it); ``scale=False`` only centres (OpenRLHF's
    ``no_std_norm``). With a single valid token verl raises; here the factor is then 1.
    Padded positions are 0 in the result.
    """
    m = valid(mask, values)
    v = masked(values, mask)
    count = m.sum()
    mean = (v * m).sum() / (count + 1e-8)
    centred = (v - mean) * m
    if not scale:
        return centred
    var = (centred * centred).sum() / (count + 1e-8)
    if unbiased:
        var = var * count / (count - 1).clamp(min=1)
    return centred * torch.rsqrt(var + 1e-8)
