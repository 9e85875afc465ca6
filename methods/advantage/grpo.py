"""GRPO: group-normalised outcome advantage.

For row i of group g with score s_i (its rewards summed over valid tokens):

    A_i = (s_i - mean_g(s)) / (std_g(s) + epsilon)       (norm_by_std, scale="group")
    A_i = s_i - mean_g(s)                                 (norm_by_std=False: Dr. GRPO)

broadcast to every valid token of the row (0 at padding); returns = advantages (as verl).

Conventions, each an option with verl's default (``compute_grpo_outcome_advantage``):

- ``epsilon`` added to the std: verl 1e-6; TRL 1e-4; OpenRLHF's ``group_norm`` 1e-9.
- ``std``: ``unbiased`` (torch.std, n - 1: verl, TRL, OpenRLHF) or ``biased`` (n).
- ``scale``: ``group`` (the group's std: verl, TRL's default) or ``batch`` (TRL's
  ``scale_rewards="batch"``: the std of all scores in the batch, mean still per group).
- ``norm_by_std``: verl's ``norm_adv_by_std_in_grpo`` (False: Liu et al.'s Dr. GRPO).
- ``singleton`` (a group of one row): ``score`` (verl: mean 0, std 1, so A = s / (1 + eps))
  or ``zero`` (TRL/OpenRLHF: the group mean is the score itself, so A = 0).

A group whose scores are all equal gets A = 0 on every row. No ``zero_mean_per_group``
invariant is declared: A averages to 0 over a group's *rows*, not over its valid tokens when
rows differ in length.

Reference: Shao et al., "DeepSeekMath: pushing the limits of mathematical reasoning in open
language models" (2024); implementation verl ``verl/trainer/ppo/core_algos.py``
(``compute_grpo_outcome_advantage``), TRL ``GRPOTrainer`` for ``scale="batch"`` and the
``zero`` singleton rule. Reference-checked: tests/test_rlvr_advantages.py compares it with a
loop-by-loop re-derivation of verl's function (and of TRL's batch scaling) on small inputs with
equal-reward groups, a group of one, masked tokens and non-contiguous groups.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import (
    SINGLETON_HELP,
    STD_HELP,
    Groups,
    broadcast,
    group_mean_baseline,
    sequence_scores,
    std_of,
)
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register


@register
class GRPO(AdvantageMethod):
    name = "grpo"
    hyperparameters = {
        "epsilon": Float(1e-6, minimum=0.0, help="added to the std (verl 1e-6, TRL 1e-4)"),
        "norm_by_std": Bool(True, help="divide by the std (False: Dr. GRPO)"),
        "std": Choice("unbiased", ("unbiased", "biased"), help=STD_HELP),
        "scale": Choice("group", ("group", "batch"),
                        help="std of the group (verl) or of the whole batch (TRL 'batch')"),
        "singleton": Choice("score", ("score", "zero"), help=SINGLETON_HELP),
    }
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Shao et al., DeepSeekMath (GRPO)", 2024,
        "github.com/volcengine/verl verl/trainer/ppo/core_algos.py "
        "compute_grpo_outcome_advantage; TRL GRPOTrainer (scale_rewards)",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            groups = Groups(group_ids, scores.device)
            centred = scores - group_mean_baseline(scores, groups, self.hp.singleton)
            if self.hp.norm_by_std:
                unbiased = self.hp.std == "unbiased"
                if self.hp.scale == "group":
                    std = groups.std(scores, unbiased)
                    std = torch.where(groups.singleton(), torch.ones_like(std), std)
                else:
                    std = std_of(scores, unbiased)
                centred = centred / (std + self.hp.epsilon)
            advantages = broadcast(centred, mask)
        return advantages, advantages.clone()
