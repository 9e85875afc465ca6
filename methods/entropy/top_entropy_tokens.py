"""Policy gradient on the high-entropy minority tokens only ("forking tokens").

Over the n valid tokens of the batch, the k = max(1, int(rho * n + 0.9999)) tokens (ceil, up
to a 1e-4 tolerance against rounding noise, as the reference writes it) with the largest
per-token entropy H_t (ties: the earlier token in row-major order) get ``loss_mask`` 1, all
others 0: only they contribute to the policy-gradient term. The reference aggregates the
policy loss over mask * loss_mask (the token-mean divides by k), as
workbench.testbeds.control.ppo does.
``coefficient`` is 0 (no entropy bonus).

Reference: Wang et al., "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
Reinforcement Learning for LLM Reasoning" (2025), rho = 0.2 (the default here); implementation:
Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR ``core_algos.get_global_entropy_top_mask`` (verl
fork, per micro-batch, the mask applied as agg_loss(pg_losses, response_mask * top_mask)).

Metrics: ``top_entropy_selected_frac`` (k / n), ``top_entropy_threshold`` (smallest selected
entropy; 0 when no token is valid).

Fidelity: reference-checked. tests/test_rlvr_entropy.py re-derives the reference's mask for
20 seeded batches of several sizes and four rho and compares it exactly.
"""

from __future__ import annotations

import torch

from workbench.families import EntropyMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register

from ._token_selection import fraction, top_k_positions


@register
class TopEntropyTokens(EntropyMethod):
    name = "top_entropy_tokens"
    hyperparameters = {
        "rho": Float(0.2, low=0.05, high=0.8, minimum=0.0, maximum=1.0,
                     help="fraction of valid tokens (highest entropy) that get a gradient"),
    }
    reference = Reference(
        "Wang et al., Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective "
        "Reinforcement Learning for LLM Reasoning", 2025,
        "Shenzhi-Wang/Beyond-the-80-20-Rule-RLVR verl/trainer/ppo/core_algos.py "
        "get_global_entropy_top_mask",
    )
    fidelity = "reference-checked"

    def coefficient(self, step, entropy):
        return 0.0

    def coefficient_bounds(self):
        return (0.0, 0.0)

    def policy_loss_hook(self, *, mask, entropy, **_):
        with torch.no_grad():
            valid = mask != 0
            n_valid = int(valid.sum())
            selected = torch.zeros_like(valid)
            if n_valid > 0:
                k = max(1, int(n_valid * self.hp.rho + 0.9999))
                selected = top_k_positions(entropy.detach(), valid, k)
            threshold = float(entropy[selected].min()) if n_valid > 0 else 0.0
        return {
            "loss_mask": selected.to(entropy.dtype),
            "metrics": {
                "top_entropy_selected_frac": fraction(selected.sum(), n_valid),
                "top_entropy_threshold": threshold,
            },
        }
