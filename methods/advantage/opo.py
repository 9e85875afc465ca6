"""OPO: on-policy RL with the optimal reward baseline (length-weighted group mean).

    b_g = sum_{j in g} |y_j| s_j / sum_{j in g} |y_j|,     A_i = s_i - b_g

for row i of group g with score s_i (rewards summed over valid tokens) and |y_i| valid tokens,
broadcast to the row's valid tokens (0 at padding); returns = advantages. Under exact
on-policy training with a sequence-level reward this baseline minimises the gradient variance
(Hao et al.). A group of one row gets b = 0 (verl), so A = s.

Because every valid token counts once in b_g, the advantages of a group of two or more rows
average to 0 over its valid tokens (tests/test_rlvr_advantages.py checks it); the
``zero_mean_per_group`` invariant is not declared because a group of one keeps A = s.

Reference: Hao et al., "On-policy RL with optimal reward baseline" (2025); implementation verl
``verl/trainer/ppo/core_algos.py`` (``compute_opo_outcome_advantage``). Reference-checked:
tests/test_rlvr_advantages.py compares it with a re-derivation of that function on small inputs
(equal-reward groups, a group of one, masked tokens, non-contiguous groups).
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import Groups, broadcast, sequence_scores, valid
from workbench.families import AdvantageMethod
from workbench.registry import Reference, register


@register
class OPO(AdvantageMethod):
    name = "opo"
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Hao et al., On-policy RL with optimal reward baseline (OPO)", 2025,
        "github.com/volcengine/verl verl/trainer/ppo/core_algos.py "
        "compute_opo_outcome_advantage",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            lengths = valid(mask, scores).sum(dim=-1)
            groups = Groups(group_ids, scores.device)
            total = groups.sum(lengths)
            weighted = groups.sum(lengths * scores)
            baseline = torch.where(total > 0, weighted / total.clamp(min=1), 0.0)[groups.index]
            baseline = torch.where(groups.singleton(), torch.zeros_like(baseline), baseline)
            advantages = broadcast(scores - baseline, mask)
        return advantages, advantages.clone()
