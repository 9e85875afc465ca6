"""Clip-higher (DAPO): asymmetric PPO clipping, the ratio r = exp(logp - logp_old) clipped to
[1 - eps_low, 1 + eps_high] with eps_high > eps_low, so that low-probability tokens with a
positive advantage can grow further before the clip stops their gradient:

    L_t = max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high))

The hook returns ``clip_low = eps_low`` and ``clip_high = eps_high``; the loop applies them.
``coefficient`` is the optional constant entropy bonus ``entropy_coef`` (DAPO uses none: 0).

Reference: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2025),
eps_low = 0.2, eps_high = 0.28 (the defaults here); implementation: verl
``compute_policy_loss_vanilla`` with ``clip_ratio_low`` / ``clip_ratio_high``.

Metrics: ``clipped_low_frac`` / ``clipped_high_frac``, the fractions of valid tokens where the
lower / upper clip is active (A < 0 and r < 1 - eps_low; A > 0 and r > 1 + eps_high); their
sum is verl's ``pg_clipfrac``.

Fidelity: reference-checked. tests/test_rlvr_entropy.py re-derives verl's clipped policy loss
with clip_ratio_low/high and its pg_clipfrac over 20 seeded batches and compares them with
the loss built from this hook's bounds (to 1e-12) and with its metrics (to 1e-9).
"""

from __future__ import annotations

from workbench.families import EntropyMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register

from ._token_selection import fraction


@register
class ClipHigher(EntropyMethod):
    name = "clip_higher"
    hyperparameters = {
        "eps_low": Float(0.2, minimum=0.0, maximum=1.0,
                         help="lower clip: the ratio is kept above 1 - eps_low"),
        "eps_high": Float(0.28, low=0.2, high=0.4, minimum=0.0,
                          help="upper clip: the ratio is kept below 1 + eps_high"),
        "entropy_coef": Float(0.0, minimum=0.0, help="constant entropy bonus (DAPO: 0)"),
    }
    reference = Reference(
        "Yu et al., DAPO: An Open-Source LLM Reinforcement Learning System at Scale", 2025,
        "volcengine/verl verl/trainer/ppo/core_algos.py compute_policy_loss_vanilla "
        "(clip_ratio_low, clip_ratio_high)",
    )
    fidelity = "reference-checked"

    def coefficient(self, step, entropy):
        return self.hp.entropy_coef

    def coefficient_bounds(self):
        return (self.hp.entropy_coef, self.hp.entropy_coef)

    def policy_loss_hook(self, *, log_probs, old_log_probs, advantages, mask, **_):
        valid = mask != 0
        ratio = (log_probs.detach() - old_log_probs).exp()
        low = valid & (advantages < 0) & (ratio < 1.0 - self.hp.eps_low)
        high = valid & (advantages > 0) & (ratio > 1.0 + self.hp.eps_high)
        return {
            "clip_low": self.hp.eps_low,
            "clip_high": self.hp.eps_high,
            "metrics": {
                "clipped_low_frac": fraction(low.sum(), valid.sum()),
                "clipped_high_frac": fraction(high.sum(), valid.sum()),
            },
        }
