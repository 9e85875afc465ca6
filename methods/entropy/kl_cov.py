"""KL-Cov: a KL penalty on the tokens whose log-probability covaries most with the advantage.

Over the n valid tokens of the batch (plain means over them, detached log-probabilities),

    cov_t = (A_t - mean(A)) * (logp_t - mean(logp))

the k = max(floor(kl_cov_ratio * n), 1) tokens with the largest cov_t (ties: the earlier token
in row-major order) get the penalty kl_coef * |logp_t - logp_old_t| added to their policy loss:

    L_t = -A_t r_t + [t selected] * kl_coef * |logp_t - logp_old_t|

The hook returns the penalty aggregated like the policy loss as ``extra_loss`` (it keeps the
graph through ``log_probs``; only the selected tokens get a gradient): verl adds it per token
before ``agg_loss``, which is linear in the per-token loss, so
agg(L) = agg(-A r) + agg(penalty) and ``loss_agg_mode`` must name the loop's aggregation
(token-mean divides by the number of valid tokens, as verl does). verl's KL-Cov surrogate is
unclipped; with ``clip_surrogate`` False (the default) the hook returns ``clip_low`` = 1 and
``clip_high`` = the largest finite number of the log-probabilities' dtype, i.e. the bounds
[0, max float] that never bind (the contract requires finite values); True keeps the loop's
PPO clip. A loop that adds a dual clip would still apply it (verl's KL-Cov has none).
``coefficient`` is 0 (no entropy bonus).

Reference: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models" (2025); implementation: verl ``core_algos.compute_policy_loss_kl_cov`` (volcengine/verl
b178a3c). Defaults: kl_cov_ratio 2e-3 and kl_coef 1, the paper's Qwen2.5-7B recipe
(k_percent = 0.2 %, ppo_kl_coef = 1; verl's config defaults are 2e-4 and 0.1).

Not on a seed axis (``vectorised = False``; ``execution: auto`` runs its studies seed by
seed): at the first minibatch of each update logp_t = logp_old_t up to rounding, and the
gradient of |logp_t - logp_old_t| there is the sign of a last-bit difference. A batched
computation rounds differently from a single one, so its runs would part from the sequential
ones after a few updates (found by the control seed-axis parity test), which the seed axis's
contract does not allow.

Metrics: ``kl_cov_selected_frac`` (penalised tokens / valid tokens), ``kl_cov_abs_kl`` (mean
|logp - logp_old| over the penalised tokens).

Fidelity: reference-checked. tests/test_rlvr_entropy.py re-derives verl's KL-Cov loss for 20
seeded batches and each aggregation and compares loss and gradient with the unclipped
surrogate plus this hook's extra_loss, to 1e-12.
"""

from __future__ import annotations

import torch

from workbench.families import EntropyMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register

from ._token_selection import AGGREGATIONS, aggregate, fraction, top_k_positions


@register
class KLCov(EntropyMethod):
    name = "kl_cov"
    hyperparameters = {
        "kl_cov_ratio": Float(2e-3, low=2e-4, high=5e-2, log=True, minimum=1e-9, maximum=1.0,
                              help="fraction of valid tokens penalised (at least one)"),
        "kl_coef": Float(1.0, minimum=0.0, help="weight of |logp - logp_old| on them"),
        "loss_agg_mode": Choice("token-mean", AGGREGATIONS,
                                help="the loop's loss aggregation (verl's agg_loss modes)"),
        "clip_surrogate": Bool(False, help="keep the loop's PPO clip (verl's KL-Cov: no clip)"),
    }
    reference = Reference(
        "Cui et al., The Entropy Mechanism of Reinforcement Learning for Reasoning Language "
        "Models", 2025,
        "volcengine/verl verl/trainer/ppo/core_algos.py compute_policy_loss_kl_cov",
    )
    fidelity = "reference-checked"

    @classmethod
    def inert(cls, params, task_params):
        """With one optimizer step per batch (epochs 1, minibatches 1) that step is on-policy:
        logp_t = logp_old_t, the penalty |logp_t - logp_old_t| is 0 and so is its gradient
        (up to the sign of a last-bit difference), so KL-Cov would be no entropy method."""
        steps = getattr(task_params, "epochs", None), getattr(task_params, "minibatches", None)
        if steps == (1, 1):
            return ("with epochs: 1 and minibatches: 1 each update's only step is on-policy "
                    "(logp = logp_old), so its penalty |logp - logp_old| is zero and it changes "
                    "nothing; set task.params.epochs or minibatches above 1")
        return None
    vectorised = False  # |logp - logp_old| at 0: see the module's docstring

    def coefficient(self, step, entropy):
        return 0.0

    def coefficient_bounds(self):
        return (0.0, 0.0)

    def policy_loss_hook(self, *, log_probs, old_log_probs, advantages, mask, **_):
        valid = mask != 0
        with torch.no_grad():
            n_valid = int(valid.sum())
            selected = torch.zeros_like(valid)
            if n_valid > 0:
                adv, logp = advantages.detach()[valid], log_probs.detach()[valid]
                cov_valid = (adv - adv.mean()) * (logp - logp.mean())
                cov = cov_valid.new_zeros(valid.shape)
                cov[valid] = cov_valid
                k = max(int(n_valid * self.hp.kl_cov_ratio), 1)
                selected = top_k_positions(cov, valid, k)
        abs_kl = (log_probs - old_log_probs).abs()
        penalty = torch.where(selected, self.hp.kl_coef * abs_kl, torch.zeros_like(abs_kl))
        out = {
            "extra_loss": aggregate(penalty, valid, self.hp.loss_agg_mode),
            "metrics": {
                "kl_cov_selected_frac": fraction(selected.sum(), n_valid),
                "kl_cov_abs_kl": fraction(abs_kl.detach()[selected].sum(), selected.sum()),
            },
        }
        if not self.hp.clip_surrogate:
            out["clip_low"] = 1.0
            out["clip_high"] = float(torch.finfo(log_probs.dtype).max)
        return out
