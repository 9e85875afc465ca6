"""Policy-loss pieces for RL on language models: loss aggregation, the PPO-clip loss with token-,
sequence-level (GSPO) or prefix-level (PNPO) ratios, and the KL estimators. Pure functions on
(B, T) tensors, with ``mask`` 1 at valid response tokens. Conventions follow verl
(``verl/trainer/ppo/core_algos.py``: ``agg_loss``, ``compute_policy_loss_vanilla``,
``compute_policy_loss_gspo``, ``kl_penalty``); where TRL (``GRPOTrainer``) or OpenRLHF
(``PolicyLoss``, ``compute_approx_kl``) differ, an argument selects, with verl's default.
tests/test_rl_losses.py checks each against re-derivations of verl's functions.

Leading axes: given (..., B, T) tensors, every reduction is over the last two axes, one result
per leading index (the control loop's seed axis: each seed's loss over its own batch).
"""

from __future__ import annotations

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                "seq-mean-token-sum-norm")
RATIO_LEVELS = ("token", "sequence", "prefix")
KL_KINDS = ("k1", "k2", "k3")
TOKEN_LOG_RATIO_CLAMP = 20.0  # verl and OpenRLHF clamp log(pi / pi_old) to [-20, 20]
SEQUENCE_LOG_RATIO_MAX = 10.0  # verl's GSPO clamps the log of the sequence ratio at 10
#                                (the prefix level clamps its geometric mean's log the same way)


def _weights(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.to(dtype=like.dtype, device=like.device)


def _total(x: torch.Tensor) -> torch.Tensor:
    """The sum over the (B, T) axes: a scalar, or one per leading index."""
    return x.sum() if x.dim() <= 2 else x.sum(dim=(-2, -1))


def _masked_sum(values: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """sum(values * mask) with padded positions zeroed first (NaN there cannot leak)."""
    weights = _weights(mask, values)
    kept = torch.where(weights != 0, values, torch.zeros((), dtype=values.dtype,
                                                         device=values.device))
    return _total(kept * weights) if dim is None else (kept * weights).sum(dim=dim)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """verl's masked_mean: sum(values * mask) / (sum(mask) + 1e-8)."""
    return _masked_sum(values, mask) / (_total(_weights(mask, values)) + 1e-8)


def aggregate(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean",
              constant: float | None = None) -> torch.Tensor:
    """Reduce a (B, T) per-token loss to a scalar (verl's ``agg_loss``; l = loss, m = mask):

    - ``token-mean`` (verl's default; TRL ``bnpo``/``dapo``): sum_it l m / sum_it m -- every
      token of the batch weighs the same (0 when no token is valid; verl gives NaN);
    - ``seq-mean-token-mean`` (GRPO paper; TRL ``grpo``; verl's GSPO):
      mean over rows with a valid token of (sum_t l m / (sum_t m + 1e-8)) -- every sequence
      weighs the same (TRL also counts fully masked rows, as 0);
    - ``seq-mean-token-sum``: mean over rows with a valid token of sum_t l m;
    - ``seq-mean-token-sum-norm`` (Dr. GRPO): sum_it l m / ``constant``, the constant defaulting
      to T (verl's ``loss_scale_factor``; set it to the maximum response length so the scale does
      not depend on the batch). verl does not divide by the number of rows; TRL's
      ``loss_type="dr_grpo"`` divides by B * max_completion_length: pass constant = B * T.
    """
    if mode == "token-mean":
        return _masked_sum(loss_mat, mask) / _total(_weights(mask, loss_mat)).clamp(min=1)
    if mode == "seq-mean-token-sum-norm":
        return _masked_sum(loss_mat, mask) / (loss_mat.shape[-1] if constant is None
                                              else constant)
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; allowed: {', '.join(AGGREGATIONS)}")
    per_row = _masked_sum(loss_mat, mask, dim=-1)
    tokens = _weights(mask, loss_mat).sum(dim=-1)
    if mode == "seq-mean-token-mean":
        per_row = per_row / (tokens + 1e-8)
    rows = (tokens > 0).to(loss_mat.dtype)
    return (per_row * rows).sum(dim=-1) / rows.sum(dim=-1).clamp(min=1)


def _bound(value, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


def approx_kl(log_probs: torch.Tensor, old_log_probs: torch.Tensor,
              mask: torch.Tensor) -> torch.Tensor:
    """``train/approx_kl``: the k3 estimate of KL(pi_old || pi) on the sampled tokens (Schulman
    2020; CleanRL's ``approx_kl``), a token mean over ``mask``:

        mean_t (r_t - 1) - log r_t,   log r_t = clamp(log pi_t - log pi_old_t, -20, 20)

    It is >= 0 at every token (so a KL-adaptive step size never sees a negative KL). The clamp
    is verl's on the log-ratio; verl's own ``actor/ppo_kl`` is the k1 mean of -log r_t instead.
    """
    log_ratio = (log_probs - old_log_probs).clamp(-TOKEN_LOG_RATIO_CLAMP, TOKEN_LOG_RATIO_CLAMP)
    return _masked_mean(torch.expm1(log_ratio) - log_ratio, mask)


def clip_fractions(ratio: torch.Tensor, advantages: torch.Tensor, low, high,
                   mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """``train/clip_frac_low``, ``_high`` and their sum ``train/clip_frac``: the token fractions
    (over ``mask``) where the PPO clip binds, i.e. takes the gradient away:

        low:  r < low  and A < 0;   high:  r > high  and A > 0

    (``low`` = 1 - clip_low, ``high`` = 1 + clip_high; their sum is verl's ``pg_clipfrac``).
    """
    below = (ratio < low) & (advantages < 0)
    above = (ratio > high) & (advantages > 0)
    return {"clip_frac_low": _masked_mean(below.to(ratio.dtype), mask),
            "clip_frac_high": _masked_mean(above.to(ratio.dtype), mask),
            "clip_frac": _masked_mean((below | above).to(ratio.dtype), mask)}


def prefix_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """PNPO's prefix geometric-mean ratio of (..., B, T) per-token log-ratios log r_t:
    w_t = exp(min(c_t / n_t, 10)), c_t = sum_{k<=t} m_k clamp(log r_k, -20, 20) and
    n_t = max(1, sum_{k<=t} m_k) (m: the mask; positions before a row's first valid token get
    1, masked positions the last valid prefix's value; the aggregation drops both)."""
    weights = _weights(mask, log_ratio)
    clamped = log_ratio.clamp(-TOKEN_LOG_RATIO_CLAMP, TOKEN_LOG_RATIO_CLAMP)
    kept = torch.where(weights != 0, clamped, torch.zeros((), dtype=log_ratio.dtype,
                                                          device=log_ratio.device))
    total = torch.cumsum(kept * weights, dim=-1)
    count = torch.cumsum(weights, dim=-1).clamp(min=1)
    return torch.exp((total / count).clamp(max=SEQUENCE_LOG_RATIO_MAX))


def ppo_clip_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor,
                  advantages: torch.Tensor, mask: torch.Tensor, clip_low=0.2, clip_high=0.2,
                  dual_clip: float | None = None, ratio_level: str = "token",
                  agg: str | None = None, constant: float | None = None,
                  weight: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate policy loss and its metrics.

    Per token, with r the importance ratio and A the advantage:

        l = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))
        l = min(l, -A c)  where A < 0          (dual clip, Ye et al. 2020, when ``dual_clip`` c)

    then ``aggregate(l * weight, mask, agg, constant)``: ``weight`` (a (B, T) tensor, default
    1) scales each token's term without taking it out of the aggregation's count (verl's
    clip-cov ``corr``); to take tokens out, pass a smaller ``mask``. ``clip_low``/``clip_high``
    are numbers or tensors broadcastable to (B, T) (an entropy method's ``policy_loss_hook``
    may set them; clip-higher is clip_high > clip_low, DAPO). ``dual_clip`` defaults to None
    (off; OpenRLHF's and TRL's default); verl's vanilla loss always applies it with
    c = ``clip_ratio_c`` = 3.

    ``ratio_level``:

    - ``token`` (PPO; verl ``vanilla``): r_t = exp(clamp(log pi_t - log pi_old_t, -20, 20));
    - ``sequence`` (GSPO, Zheng et al. 2025): s_i = exp(mean over the row's valid tokens of
      log pi_t - log pi_old_t), used at every token through verl's GSPO-token form
      r_t = sg[s_i] * pi_t / sg[pi_t] (sg: stop-gradient; its log clamped at 10): the value is
      s_i and the gradient flows through each token's log pi_t, so with a sequence-constant
      advantage it equals differentiating s_i itself (TRL's form);
    - ``prefix`` (PNPO, Prefix-Normalized Policy Optimization; catalogue #71, reconstructed
      from the abstract's definition): the geometric mean of the ratios along each causal
      prefix, w_t = exp((1/t) sum_{k<=t} log r_k), t counted from 1 at the row's first valid
      token and only valid tokens (``mask``) entering the sum and the count. Each token
      keeps its own ratio w_t in the clipped surrogate min(w_t A, clip(w_t) A), and w_t is
      differentiated directly, so token t's loss sends gradient w_t / t (where unclipped) to
      every log pi_k of its prefix. Clamps (our choice; the abstract gives none): each
      log r_k to [-20, 20] as at the token level, and the prefix mean's log at 10 from above
      as verl's GSPO does its sequence mean (a mean of clamped logs lies in [-20, 20]).
      Off-policy only: with pi = pi_old (one epoch, one minibatch) w_t = 1 at every token, as
      r_t is, so the loss's value equals the token level's under the same aggregation.

    ``agg`` defaults to ``token-mean`` for token and prefix ratios (verl's default; a prefix
    ratio differs per token, as a token ratio does, and the abstract's surrogate sums over the
    tokens; our choice, the abstract does not say how PNPO normalises) and to
    ``seq-mean-token-mean`` for sequence ratios (verl's GSPO always uses it; TRL recommends it).

    Metrics (floats; token means over the mask): ``clip_frac_low``, ``clip_frac_high`` and
    ``clip_frac`` (``clip_fractions``), ``dual_clip_frac`` (verl's ``pg_clipfrac_lower``: the
    dual clip binds), ``approx_kl`` (``approx_kl``: k3, on the per-token log-ratios at either
    ratio level) and ``ratio_mean``.
    """
    if ratio_level not in RATIO_LEVELS:
        raise ValueError(f"unknown ratio_level {ratio_level!r}; allowed: "
                         f"{', '.join(RATIO_LEVELS)}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip!r}")
    if agg is None:
        agg = "seq-mean-token-mean" if ratio_level == "sequence" else "token-mean"
    log_ratio = log_probs - old_log_probs
    if ratio_level == "token":
        ratio = torch.exp(log_ratio.clamp(-TOKEN_LOG_RATIO_CLAMP, TOKEN_LOG_RATIO_CLAMP))
    elif ratio_level == "prefix":
        ratio = prefix_ratio(log_ratio, mask)
    else:
        tokens = _weights(mask, log_ratio).sum(dim=-1).clamp(min=1)
        sequence = _masked_sum(log_ratio, mask, dim=-1) / tokens
        log_token = log_probs - log_probs.detach() + sequence.detach().unsqueeze(-1)
        ratio = torch.exp(log_token.clamp(max=SEQUENCE_LOG_RATIO_MAX))
    low, high = 1 - _bound(clip_low, ratio), 1 + _bound(clip_high, ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.minimum(torch.maximum(ratio, low), high)
    loss = torch.maximum(unclipped, clipped)
    negative = advantages < 0
    dual_binds = torch.zeros_like(negative)
    if dual_clip is not None:
        floor = -advantages * dual_clip
        dual_binds = negative & (loss > floor)
        loss = torch.where(negative, torch.minimum(loss, floor), loss)
    with torch.no_grad():
        metrics = {
            **clip_fractions(ratio, advantages, low, high, mask),
            "dual_clip_frac": _masked_mean(dual_binds.to(ratio.dtype), mask),
            "approx_kl": approx_kl(log_probs, old_log_probs, mask),
            "ratio_mean": _masked_mean(ratio, mask),
        }
        values = torch.stack(list(metrics.values())).tolist()  # one device-to-host copy
    if weight is not None:
        loss = loss * weight
    return aggregate(loss, mask, agg, constant), dict(zip(metrics, values, strict=True))


def kl_penalty(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, kind: str = "k3",
               clamp: float | None = 10.0) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from the sampled tokens' log-probabilities
    (Schulman 2020, "Approximating KL divergence"), with d = log pi - log pi_ref:

    - ``k1``: d (unbiased, can be negative; verl ``kl``/``k1``);
    - ``k2``: d^2 / 2 (verl ``mse``/``k2``);
    - ``k3``: exp(-d) - 1 + d (unbiased, >= 0; verl ``low_var_kl``/``k3``, TRL's GRPO KL).

    ``clamp`` applies to ``k3`` only, as verl does: -d is clamped to [-20, 20] before exp and
    the result to [-clamp, clamp] (verl: 10); None leaves k3 unclamped (TRL). OpenRLHF clamps
    all three kinds to [-10, 10] (not exposed: it changes k1/k2 only beyond |value| 10).
    """
    diff = log_probs - ref_log_probs
    if kind == "k1":
        return diff
    if kind == "k2":
        return 0.5 * diff.square()
    if kind != "k3":
        raise ValueError(f"unknown KL kind {kind!r}; allowed: {', '.join(KL_KINDS)}")
    if clamp is None:
        return torch.exp(-diff) - 1 + diff
    reverse = (-diff).clamp(-TOKEN_LOG_RATIO_CLAMP, TOKEN_LOG_RATIO_CLAMP)
    return (torch.exp(reverse) - reverse - 1).clamp(-clamp, clamp)
