"""SAS: step-level advantage selection, GRPO advantages zeroed at confidence-selected steps.

Rows are episodes (or responses) of up to T steps with one action (token) each; ``group_ids``
put the G rollouts of one task in one group; ``old_log_probs`` hold the sampling policy's
log-probability of each step's action, the step's confidence (the reference's
``mask_strategy = mean``: a step's mean token log-probability, here its one action's). With
A_i the GRPO advantage of row i (verl's ``compute_grpo_outcome_advantage``), K_i its valid
steps ranked by confidence (ascending, ties in step order) and r = ``mask_steps_ratio``:

    correct rows (score == 1):  A_{i,t} = 0 at the ceil(K_i r) least confident steps
    other rows:                 A_{i,t} = 0 at the steps ranked ceil(K_i (1 - r)) and above
                                (the most confident ones)
    elsewhere                   A_{i,t} = A_i

``strategy`` applies the first rule (``correct_only``), the second (``wrong_only``) or both
(``both``, the reference's default). Returns = advantages. A row's score is its rewards summed
over its valid steps; "correct" is the reference's test, score equal to ``correct_score``
(1: reaching the goal on the key-door task).

``step_count``: the released code computes the counts as ``ceil(len(split_pos_list)+1 *
ratio)``, which by operator precedence is ceil(K - 1 + r), not ceil(K r): for 0 < r < 1 it
zeroes every step of a correct row and no step of a wrong one, so the ratio the paper
describes and tunes (0.3) has no effect. ``ratio`` (the default) counts as the paper
describes, ceil(K r) and ceil(K (1 - r)) in float64 as the code's Python floats;
``as_released`` reproduces the code as written.

Not reproduced: the reference's split of a response into steps at tokens containing a blank
line (and its answer tokens after ``</think>``, never zeroed): here a step is one position of
the rows; ``mask_strategy = std`` (a step's log-probability spread, undefined for one action)
and the ``random_mask`` ablation (not a pure function).

Reference: Wang, Yu, Wu, Liu, Sun, Bansal & Liu, "Stabilizing Efficient Reasoning with
Step-Level Advantage Selection" (2026), arXiv:2604.24003; implementation github.com/HanNight/SAS
``verl/verl/trainer/ppo/ray_trainer.py`` (the ``trainer.sas`` block in ``fit``; defaults from
``deepscaler_grpo_sas.sh``: both, ratio 0.3, mean, GRPO with 8 rollouts). Reference-checked:
tests/test_rubric_advantages.py compares it with numbers derived by running that block (and
verl's GRPO from the same repository) on the same episodes laid out as its token batches, as
released and with the counts parenthesised as the paper describes.
"""

from __future__ import annotations

import torch

from methods.advantage.grpo import GRPO
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register


@register
class SAS(AdvantageMethod):
    name = "sas"
    hyperparameters = {
        "mask_steps_ratio": Float(0.3, low=0.1, high=0.5, minimum=0.0, maximum=1.0,
                                  help="share of a row's steps whose advantage is zeroed "
                                       "(the reference's default 0.3)"),
        "strategy": Choice("both", ("both", "correct_only", "wrong_only"),
                           help="zero steps in correct rows, in wrong rows, or in both"),
        "step_count": Choice("ratio", ("ratio", "as_released"),
                             help="ceil(K * ratio) as the paper describes, or the released "
                                  "code's ceil(K - 1 + ratio)"),
        "correct_score": Float(1.0, help="a row is correct when its score equals this"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the group std (verl 1e-6)"),
        "norm_by_std": Bool(True, help="divide by the group std (verl's GRPO default)"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "old_log_probs"})
    reference = Reference(
        "Wang et al., Stabilizing Efficient Reasoning with Step-Level Advantage Selection "
        "(SAS)", 2026, "github.com/HanNight/SAS verl/verl/trainer/ppo/ray_trainer.py "
        "(trainer.sas)",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, old_log_probs, **_):
        with torch.no_grad():
            grpo = GRPO(epsilon=self.hp.epsilon, norm_by_std=self.hp.norm_by_std)
            advantages, _ = grpo.compute(rewards=rewards, mask=mask, group_ids=group_ids)
            ok = (mask != 0).to(advantages.device)
            scores = torch.where(ok, rewards, torch.zeros((), dtype=rewards.dtype)).sum(dim=1)
            correct = scores == self.hp.correct_score
            confidence = torch.where(ok, old_log_probs.to(torch.float64),
                                     torch.full((), torch.inf, dtype=torch.float64))
            order = torch.sort(confidence, dim=1, stable=True).indices
            rank = torch.empty_like(order).scatter_(
                1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
            steps = ok.sum(dim=1).to(torch.float64)
            ratio = self.hp.mask_steps_ratio
            if self.hp.step_count == "ratio":
                low, high = torch.ceil(steps * ratio), torch.ceil(steps * (1.0 - ratio))
            else:
                low, high = torch.ceil((steps - 1) + ratio), torch.ceil((steps - 1) + (1 - ratio))
            drop = torch.zeros_like(ok)
            if self.hp.strategy in ("both", "correct_only"):
                drop |= correct[:, None] & (rank < low[:, None])
            if self.hp.strategy in ("both", "wrong_only"):
                drop |= ~correct[:, None] & (rank >= high[:, None])
            advantages = torch.where(drop & ok, torch.zeros_like(advantages), advantages)
        return advantages, advantages.clone()
