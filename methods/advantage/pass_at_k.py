"""Pass@k training: the analytical group advantage of the pass@k reward.

In a group of n rows of which c are correct (score >= ``success_threshold``; scores are the
rewards summed over valid tokens), with k' = min(k, n):

    rho     = 1 - C(n - c, k') / C(n, k')          the group's pass@k' estimate
    sigma   = sqrt(rho (1 - rho))
    A_pos   = (1 - rho) / (sigma + epsilon)                                   correct rows
    A_neg   = (1 - rho - C(n - c - 1, k' - 1) / C(n - 1, k' - 1)) / (sigma + epsilon)   others

broadcast to the row's valid tokens (0 at padding); returns = advantages. This is the expected
pass@k advantage over all k-subsets of the group containing the row, normalised by the std of
the pass@k reward. k = 1 is GRPO with the biased std. A group that is all correct or all wrong
gets A = 0, and so does a group of one row.

Conventions: the reference counts a row as correct when its reward equals 1 and as wrong when
it equals 0, and passes any other reward through unchanged; here a row is correct when its
score is at least ``success_threshold`` (default 1), which is the same for 0/1 rewards. The
reference divides by zero when k > n; here k is lowered to the group size. ``epsilon`` is the
reference's 1e-6.

Reference: Chen et al., "Pass@k training for adaptively balancing exploration and exploitation
of large reasoning models" (2025); implementation github.com/RUCAIBox/Passk_Training
``code/passk_adv.py`` (``calc_adv``). Reference-checked: tests/test_rlvr_advantages.py compares
it with a re-derivation of that function (binomial coefficients from math.comb) for 0/1
rewards, k <= n, including all-correct, all-wrong and non-contiguous groups.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import Groups, broadcast, sequence_scores
from workbench.families import AdvantageMethod
from workbench.hyperparams import Float, Int
from workbench.registry import Reference, register


def _comb_ratio(top: torch.Tensor, bottom: torch.Tensor, k: torch.Tensor, limit: int):
    """C(top, k) / C(bottom, k) per group (k <= bottom, 0 when top < k), as the product of
    (top - j) / (bottom - j) over j < k; ``limit`` bounds k."""
    ratio = torch.ones_like(top)
    for j in range(limit):
        factor = (top - j).clamp(min=0) / (bottom - j).clamp(min=1)
        ratio = torch.where(k > j, ratio * factor, ratio)
    return ratio


@register
class PassAtK(AdvantageMethod):
    name = "pass_at_k"
    hyperparameters = {
        "k": Int(4, low=2, high=8, minimum=1, help="k of the pass@k reward (<= group size)"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the std of the pass@k reward"),
        "success_threshold": Float(1.0, help="a row is correct when its score is >= this"),
    }
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Chen et al., Pass@k training for adaptively balancing exploration and exploitation "
        "of large reasoning models", 2025,
        "github.com/RUCAIBox/Passk_Training code/passk_adv.py",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            groups = Groups(group_ids, scores.device)
            correct = (scores >= self.hp.success_threshold).to(scores.dtype)
            n = groups.sizes.to(scores.dtype)
            c = groups.sum(correct)
            k = n.clamp(max=self.hp.k)
            rho = 1 - _comb_ratio(n - c, n, k, self.hp.k)
            sigma = (rho * (1 - rho)).clamp(min=0).sqrt()
            positive = (1 - rho) / (sigma + self.hp.epsilon)
            negative = (1 - rho - _comb_ratio(n - c - 1, n - 1, k - 1, self.hp.k)) / (
                sigma + self.hp.epsilon)
            per_row = torch.where(correct > 0, positive[groups.index], negative[groups.index])
            advantages = broadcast(per_row, mask)
        return advantages, advantages.clone()
