"""Sequence-level importance weights of off-policy rollouts, shared by the methods that read
them (``advantage/vcpo_baseline``) and the loops that measure them (the control loop's
``train/ess``, the step-size family's ``importance_ess``).

A sequence is an episode segment of a row: the row's steps cut after every ``dones`` step (the
rollout's start and end cut it too), so a row of an environment rollout holds one sequence per
episode it touches; a row of a single completion (no ``done`` before its end) is one sequence.
Sequence i's log-weight is

    log w_i = sum_{t in i} (target_log_probs_t - old_log_probs_t)   = log pi(y_i) / mu(y_i)

summed in log space. The normalised effective sample size of N weights is

    ESS_hat = (sum_i w_i)^2 / (N * sum_i w_i^2)  in (0, 1]

computed as exp(2 logsumexp(log w) - log N - logsumexp(2 log w)), so no weight is ever
exponentiated on its own (1 exactly when every weight is equal, 1/N when one dominates).
"""

from __future__ import annotations

import math

import torch


def sequence_ids(dones: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(B, T) long: the index of the sequence each step belongs to (row-major order: row 0's
    sequences first), and the number of sequences."""
    rows, horizon = dones.shape
    starts = torch.ones((rows, horizon), dtype=torch.bool, device=dones.device)
    starts[:, 1:] = dones[:, :-1] != 0
    ids = torch.cumsum(starts.flatten().long(), 0).view(rows, horizon) - 1
    return ids, int(starts.sum())


def sequence_sums(values: torch.Tensor, ids: torch.Tensor, count: int) -> torch.Tensor:
    """(count,): each sequence's sum of ``values`` (B, T) over its steps."""
    flat = values.flatten()
    return torch.zeros(count, dtype=flat.dtype, device=flat.device).index_add_(
        0, ids.flatten(), flat)


def sequence_log_weights(old_log_probs: torch.Tensor, target_log_probs: torch.Tensor,
                         dones: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log w (n,), the step-to-sequence ids (B, T)) of the module docstring."""
    ids, count = sequence_ids(dones)
    return sequence_sums(target_log_probs - old_log_probs, ids, count), ids


def normalised_ess(log_weights: torch.Tensor) -> float:
    """ESS_hat of the weights exp(``log_weights``) (the module docstring); 1.0 for none."""
    n = log_weights.numel()
    if n == 0:
        return 1.0
    log_w = log_weights.double()
    value = math.exp(float(2.0 * torch.logsumexp(log_w, 0) - math.log(n)
                           - torch.logsumexp(2.0 * log_w, 0)))
    return min(value, 1.0)  # rounding may put it a last bit above 1
