"""Dr. GRPO: GRPO's group-centred advantage without the division by the group std.

    A_i = s_i - mean_g(s)

for row i of group g with score s_i (its rewards summed over valid tokens), broadcast to the
row's valid tokens (0 at padding); returns = advantages. Liu et al. remove both of GRPO's
normalisations: the std here, and the per-sequence length in the loss, which is an aggregation
choice of the policy loss (``workbench.testbeds.shared.losses.aggregate`` mode
``seq-mean-token-sum-norm``: token sums over a constant, verl's Dr. GRPO recipe; TRL's
``loss_type="dr_grpo"`` also divides by the batch size).

``singleton`` (a group of one row): ``score`` (verl: mean 0, so A = s) or ``zero`` (OpenRLHF's
``dr_grpo`` and TRL: the mean is the score itself, A = 0). Equals ``grpo`` with
``norm_by_std=False``.

Reference: Liu et al., "Understanding R1-Zero-like training: a critical perspective" (2025);
implementation verl ``compute_grpo_outcome_advantage`` with ``norm_adv_by_std_in_grpo=False``.
Reference-checked: tests/test_rlvr_advantages.py compares it with a re-derivation of that
function on small inputs (equal-reward groups, a group of one, masked tokens, non-contiguous
groups).
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import (
    SINGLETON_HELP,
    Groups,
    broadcast,
    group_mean_baseline,
    sequence_scores,
)
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice
from workbench.registry import Reference, register


@register
class DrGRPO(AdvantageMethod):
    name = "dr_grpo"
    hyperparameters = {
        "singleton": Choice("score", ("score", "zero"), help=SINGLETON_HELP),
    }
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Liu et al., Understanding R1-Zero-like training: a critical perspective (Dr. GRPO)",
        2025,
        "github.com/volcengine/verl verl/trainer/ppo/core_algos.py "
        "compute_grpo_outcome_advantage (norm_adv_by_std_in_grpo=False)",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            groups = Groups(group_ids, scores.device)
            advantages = broadcast(scores - group_mean_baseline(scores, groups, self.hp.singleton),
                                   mask)
        return advantages, advantages.clone()
