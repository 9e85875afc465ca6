"""Pieces the step-level estimators share (gigpo, hgpo): discounted returns along each row's
valid steps, and normalisation within groups of steps or episodes."""

from __future__ import annotations

import torch


def discounted_returns(rewards: torch.Tensor, ok: torch.Tensor, gamma: float) -> torch.Tensor:
    """(B, T): sum over k >= t of gamma^(k - t) r_k along each row's valid steps (0 at
    padding); rewards already 0 at padding."""
    out = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = torch.where(ok[:, t], rewards[:, t] + gamma * running, running)
        out[:, t] = torch.where(ok[:, t], running, torch.zeros_like(running))
    return out


def group_normalise(x: torch.Tensor, x_keys: torch.Tensor, member_keys: torch.Tensor,
                    member_values: torch.Tensor, *, singleton_mean: float | None,
                    divide: bool, epsilon: float) -> torch.Tensor:
    """x minus the mean of the members sharing its key (rows of ``member_keys``), divided by
    their unbiased std plus ``epsilon`` when ``divide``. A key with one member has std 1 and
    mean ``singleton_mean`` (None: that member's value)."""
    dim = 0 if member_keys.dim() == 2 else None  # rows of (group, anchor) pairs
    found, inverse = torch.unique(torch.cat([member_keys, x_keys]), dim=dim,
                                  return_inverse=True)
    of_member, of_x = inverse[: len(member_keys)], inverse[len(member_keys):]
    count = torch.zeros(len(found), dtype=x.dtype, device=x.device).index_add_(
        0, of_member, torch.ones_like(member_values))
    total = torch.zeros_like(count).index_add_(0, of_member, member_values)
    mean = total / count.clamp(min=1)
    spread = torch.zeros_like(count).index_add_(0, of_member,
                                                (member_values - mean[of_member]) ** 2)
    std = torch.sqrt(spread / (count - 1).clamp(min=1))
    single = count == 1
    if singleton_mean is not None:
        mean = torch.where(single, torch.full_like(mean, singleton_mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    centred = x - mean[of_x]
    return centred / (std[of_x] + epsilon) if divide else centred


def episode_advantages(scores: torch.Tensor, ok: torch.Tensor, group_ids: torch.Tensor, *,
                       across_steps: bool, divide: bool, epsilon: float) -> torch.Tensor:
    """(B,) each episode's score normalised within its group, the group's statistics over
    its steps (each score once per valid step) or over its episodes; a group whose statistic
    has one value: mean 0, std 1 (GiGPO's Eq. 3 as verl-agent computes it)."""
    if across_steps:
        members = group_ids[:, None].expand_as(ok)[ok]
        values = scores[:, None].expand_as(ok)[ok]
    else:
        played = ok.any(dim=1)
        members, values = group_ids[played], scores[played]
    return group_normalise(scores, group_ids, members, values, singleton_mean=0.0,
                           divide=divide, epsilon=epsilon)
