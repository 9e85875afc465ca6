"""Clip-Cov: take a few random high-covariance tokens out of the policy gradient.

Over the valid tokens of the batch, with m(x) = sum_valid(x) / (n_valid + 1e-8) (verl's masked
mean, on detached log-probabilities),

    cov_t = (A_t - m(A)) * (logp_t - m(logp))

Candidates are the valid tokens with clip_cov_lb < cov_t < clip_cov_ub that the PPO clip is not
already clipping (-A_t clip(r_t, 1 - clip_low, 1 + clip_high) > -A_t r_t excludes a token).
n_clip = max(floor(clip_cov_ratio * n_valid), 1) of them, drawn uniformly without replacement
(a random permutation of the candidates in row-major order, first n_clip), get ``loss_weight``
0: their policy-gradient term is zeroed, while the loss aggregation still counts them, as
verl's does (``agg_loss`` over the full response mask, whatever ``loss_agg``). The hook also
returns ``clip_low`` / ``clip_high`` so that the loop clips with the bounds the exclusion used.
``coefficient`` is 0 (no entropy bonus).

Reference: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models" (2025); implementation: verl ``core_algos.compute_policy_loss_clip_cov`` (volcengine/verl
b178a3c). Defaults are verl's: clip_cov_ratio 2e-4, bounds (1, 5), clip ratio 0.2 on both sides
(the paper's recipe sets clip_ratio_low = clip_ratio_high = 1, which nearly disables the PPO
clip; set clip_low = clip_high = 1 to follow it).

Conventions: the random draw uses a ``torch.Generator`` seeded with ``seed`` at ``start`` (or
at the first call without one) and advanced by every call, so a run is reproducible (verl uses
the global RNG). A ``loss_mask`` instead would take the dropped tokens out of the count too:
under ``seq-mean-token-mean`` that rescales each row by n / (n - d) and turns the gradient.

Metrics: ``cov_clipped_frac`` (dropped tokens / valid tokens, verl's pg_clipfrac),
``cov_candidate_frac`` (candidates / valid tokens).

Fidelity: reference-checked. tests/test_rlvr_entropy.py re-derives verl's selection and its
clipped loss for 20 successive seeded batches, using the same permutation stream, and compares
the masks exactly and the losses to 1e-12, under token-mean and seq-mean-token-mean.
"""

from __future__ import annotations

import torch

from workbench.families import EntropyMethod
from workbench.hyperparams import Float, Int
from workbench.registry import Reference, register

from ._token_selection import fraction, masked_mean


@register
class ClipCov(EntropyMethod):
    name = "clip_cov"
    hyperparameters = {
        "clip_cov_ratio": Float(2e-4, low=1e-4, high=5e-2, log=True, minimum=1e-9, maximum=1.0,
                                help="fraction of valid tokens dropped (at least one)"),
        "clip_cov_lb": Float(1.0, help="candidates have covariance above this"),
        "clip_cov_ub": Float(5.0, help="candidates have covariance below this"),
        "clip_low": Float(0.2, minimum=0.0, maximum=1.0,
                          help="PPO clip: the ratio is kept above 1 - clip_low"),
        "clip_high": Float(0.2, minimum=0.0,
                           help="PPO clip: the ratio is kept below 1 + clip_high"),
        "seed": Int(0, minimum=0, help="seed of the random choice among the candidates"),
    }
    reference = Reference(
        "Cui et al., The Entropy Mechanism of Reinforcement Learning for Reasoning Language "
        "Models", 2025,
        "volcengine/verl verl/trainer/ppo/core_algos.py compute_policy_loss_clip_cov",
    )
    fidelity = "reference-checked"

    def start(self, info):
        self._generator = torch.Generator().manual_seed(self.hp.seed)

    def coefficient(self, step, entropy):
        return 0.0

    def coefficient_bounds(self):
        return (0.0, 0.0)

    def policy_loss_hook(self, *, log_probs, old_log_probs, advantages, mask, **_):
        if getattr(self, "_generator", None) is None:
            self.start({})
        with torch.no_grad():
            valid = mask != 0
            log_probs = log_probs.detach()
            ratio = (log_probs - old_log_probs).exp()
            clipped = -advantages * ratio.clamp(1.0 - self.hp.clip_low, 1.0 + self.hp.clip_high)
            already_clipped = clipped > -advantages * ratio
            cov = ((advantages - masked_mean(advantages, valid))
                   * (log_probs - masked_mean(log_probs, valid)))
            candidates = (valid & ~already_clipped & (cov > self.hp.clip_cov_lb)
                          & (cov < self.hp.clip_cov_ub)).reshape(-1).nonzero().squeeze(1)
            n_valid = valid.sum()
            n_clip = max(int(self.hp.clip_cov_ratio * int(n_valid)), 1)
            dropped = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
            if candidates.numel() > 0:
                order = torch.randperm(candidates.numel(), generator=self._generator)
                dropped[candidates[order[:n_clip].to(candidates.device)]] = True
            dropped = dropped.view(mask.shape)
            loss_weight = (valid & ~dropped).to(log_probs.dtype)
        return {
            "clip_low": self.hp.clip_low,
            "clip_high": self.hp.clip_high,
            "loss_weight": loss_weight,
            "metrics": {
                "cov_clipped_frac": fraction(dropped.sum(), n_valid),
                "cov_candidate_frac": fraction(candidates.numel(), n_valid),
            },
        }
