"""RLOO: REINFORCE with a leave-one-out baseline.

For row i of a group g of n > 1 rows with score s_i (rewards summed over valid tokens):

    A_i = s_i - (1 / (n - 1)) sum_{j != i} s_j  =  n / (n - 1) * (s_i - mean_g(s))

broadcast to the row's valid tokens (0 at padding); returns = advantages. verl writes it as
s_i n/(n-1) - mean_g n/(n-1), OpenRLHF as s_i - (sum_g - s_i)/(n-1): the same number.

``singleton`` (a group of one row, no other sample to compare with): ``score`` (verl's
``rloo``: A = s) or ``zero`` (verl's ``rloo_vectorized``: A = 0; OpenRLHF requires n > 1).

Reference: Ahmadian et al., "Back to basics: revisiting REINFORCE style optimization for
learning from human feedback in LLMs" (2024), after Kool et al. (2019); implementation verl
``verl/trainer/ppo/core_algos.py`` (``compute_rloo_outcome_advantage``). Reference-checked:
tests/test_rlvr_advantages.py compares it with a re-derivation of that function on small inputs
(equal-reward groups, a group of one, masked tokens, non-contiguous groups).
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import Groups, broadcast, sequence_scores
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice
from workbench.registry import Reference, register


@register
class RLOO(AdvantageMethod):
    name = "rloo"
    hyperparameters = {
        "singleton": Choice("score", ("score", "zero"),
                            help="advantage of a group of one row: its score (verl rloo) or 0 "
                                 "(verl rloo_vectorized)"),
    }
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Ahmadian et al., Back to basics: revisiting REINFORCE style optimization (RLOO)", 2024,
        "github.com/volcengine/verl verl/trainer/ppo/core_algos.py "
        "compute_rloo_outcome_advantage",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            groups = Groups(group_ids, scores.device)
            size = groups.row_size().to(scores.dtype)
            others = (size * scores - groups.sum(scores)[groups.index]) / (size - 1).clamp(min=1)
            lone = scores if self.hp.singleton == "score" else torch.zeros_like(scores)
            per_row = torch.where(groups.singleton(), lone, others)
            advantages = broadcast(per_row, mask)
        return advantages, advantages.clone()
