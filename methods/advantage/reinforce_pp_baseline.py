"""REINFORCE++-baseline: the group mean subtracted from each score, then whitened over the
batch.

    b_i = s_i - mean_g(s)          (s_i: rewards of row i summed over its valid tokens)
    A_t = (b_i - mean(b)) / sqrt(var(b) + 1e-8)     at every valid token t of row i

where b is first broadcast to the row's valid tokens and mean/var run over every valid token
of the batch (verl's ``masked_whiten``: each token counts once, so long rows weigh more; var
with the n/(n - 1) correction). Returns = advantages (as verl); 0 at padded positions.

Options, verl's defaults first: ``std`` ``unbiased`` (verl) or ``biased`` (OpenRLHF's
``reinforce_baseline``); ``singleton`` (a group of one row) ``score`` (verl: mean 0) or
``zero`` (the row's own score, as OpenRLHF's group mean gives).

Reference: Hu, "REINFORCE++: a simple and efficient approach for aligning large language
models" (2025); implementation verl ``verl/trainer/ppo/core_algos.py``
(``compute_reinforce_plus_plus_baseline_outcome_advantage``). Reference-checked:
tests/test_rlvr_advantages.py compares it with a re-derivation of that function on small inputs
(equal-reward groups, a group of one, masked tokens, non-contiguous groups).
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import (
    SINGLETON_HELP,
    STD_HELP,
    Groups,
    broadcast,
    group_mean_baseline,
    masked_whiten,
    sequence_scores,
)
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice
from workbench.registry import Reference, register


@register
class ReinforcePPBaseline(AdvantageMethod):
    name = "reinforce_pp_baseline"
    hyperparameters = {
        "std": Choice("unbiased", ("unbiased", "biased"), help=STD_HELP),
        "singleton": Choice("score", ("score", "zero"), help=SINGLETON_HELP),
    }
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Hu, REINFORCE++: a simple and efficient approach for aligning LLMs (baseline variant)",
        2025,
        "github.com/volcengine/verl verl/trainer/ppo/core_algos.py "
        "compute_reinforce_plus_plus_baseline_outcome_advantage",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            groups = Groups(group_ids, scores.device)
            centred = broadcast(scores - group_mean_baseline(scores, groups, self.hp.singleton),
                                mask)
            advantages = masked_whiten(centred, mask, unbiased=self.hp.std == "unbiased")
        return advantages, advantages.clone()
