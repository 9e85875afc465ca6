"""The rollout / training mismatch: the sampler's log-probabilities against the trainer's.

The rollout backend samples with its own numerics (vLLM's kernels, bf16, KV cache) and records
log mu_t, the log-probability of each sampled token under the distribution it sampled from
(after temperature); the trainer recomputes log pi_old_t for the same tokens before the update.
Per token, the importance weight of the trainer's policy against the sampler's is

    w_t = exp(log pi_old_t - log mu_t)

``mismatch_metrics`` logs, over the step's response tokens: ``train/rollout_kl``, the k3
estimate of KL(mu || pi_old) on the sampled tokens, mean (w_t - 1) - log w_t
(``shared.losses.approx_kl``); ``train/rollout_is_mean`` and ``train/rollout_is_max`` of w_t;
with a cap C, ``train/rollout_is_capped_frac``, the fraction of tokens with w_t > C.

Truncated importance sampling (TIS; Yao et al. 2025, "Your efficient RL framework secretly
brings you off-policy RL training"): each token's policy-gradient term is multiplied by the
constant (no gradient) weight

    min(w_t, C)

after PPO's clipping and before aggregation, as verl's vanilla policy loss does with
``tis_imp_ratio_cap`` (off by default there, -1; its recipes use C = 2) and TRL's GRPO with
``vllm_importance_sampling_cap`` (default 2). Here ``tis_cap`` is None (off) by default.

With ``staleness`` = k > 0 (``staleness``) the sampler holds the policy of k updates before,
so mu is that stale policy's distribution: the same metrics then measure the staleness (with
the backends' numerics) and the same weights correct for it.
"""

from __future__ import annotations

import torch

from workbench.testbeds.shared.losses import TOKEN_LOG_RATIO_CLAMP, approx_kl


def importance_weights(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                       mask: torch.Tensor) -> torch.Tensor:
    """w_t = exp(log pi_old_t - log mu_t) (log-ratio clamped to +-20), 0 off the mask."""
    log_ratio = (old_log_probs - rollout_log_probs).clamp(-TOKEN_LOG_RATIO_CLAMP,
                                                         TOKEN_LOG_RATIO_CLAMP)
    return torch.exp(log_ratio) * mask


def tis_weights(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                mask: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weights min(w_t, cap), detached, 0 off the mask."""
    if not cap > 0:
        raise ValueError(f"tis_cap must be positive, got {cap}")
    weights = importance_weights(old_log_probs, rollout_log_probs, mask)
    return weights.clamp(max=cap).detach()


def mismatch_metrics(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                     mask: torch.Tensor, cap: float | None = None) -> dict[str, float]:
    """``train/rollout_kl``, ``train/rollout_is_mean``, ``train/rollout_is_max`` and, with a
    ``cap``, ``train/rollout_is_capped_frac`` over the tokens of ``mask``."""
    valid = mask.bool()
    weights = importance_weights(old_log_probs, rollout_log_probs, mask)[valid]
    if weights.numel() == 0:
        return {}
    metrics = {
        "train/rollout_kl": float(approx_kl(old_log_probs, rollout_log_probs, mask)),
        "train/rollout_is_mean": float(weights.mean()),
        "train/rollout_is_max": float(weights.max()),
    }
    if cap is not None:
        metrics["train/rollout_is_capped_frac"] = float((weights > cap).float().mean())
    return metrics
