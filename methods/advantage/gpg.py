"""GPG: group policy gradient, the group-centred score with a batch correction factor.

    A_i = alpha * (s_i - mean_g(s)) / f_norm

for row i of group g with score s_i (rewards summed over valid tokens), broadcast to the
row's valid tokens (0 at padding); returns = advantages. A group of one row has mean 0 (verl).
GPG pairs it with a plain policy-gradient loss, -A log pi (verl's ``loss_mode: gpg``), which
has the gradient of ``workbench.testbeds.shared.losses.ppo_clip_loss`` at ratio 1 (one epoch
on-policy).

``alpha`` rescales the batch for the rows that carry no gradient:

- ``nonzero_scores`` (verl, the default): alpha = B / max(#rows with a nonzero score, 1) --
  with 0/1 rewards, B over the number of correct answers;
- ``valid_rows``: alpha = B / max(B - M, 1), M the rows of groups (of two or more rows) whose
  scores are all equal, whose centred advantage is 0 -- the paper's alpha = B / (B - M) as its
  text describes it (reconstructed: no reference code for it was available);
- ``one``: alpha = 1.

``f_norm`` is verl's constant divisor (1 in the paper's main setting).

Reference: Chu et al., "GPG: a simple and strong reinforcement learning baseline for model
reasoning" (2025); implementation verl ``verl/trainer/ppo/core_algos.py``
(``compute_gpg_outcome_advantage``). Reference-checked for ``alpha="nonzero_scores"`` and
``one``: tests/test_rlvr_advantages.py compares them with a re-derivation of that function
(equal-reward groups, a group of one, zero scores, masked tokens, non-contiguous groups).
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import Groups, broadcast, group_mean_baseline, sequence_scores
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


@register
class GPG(AdvantageMethod):
    name = "gpg"
    hyperparameters = {
        "alpha": Choice("nonzero_scores", ("nonzero_scores", "valid_rows", "one"),
                        help="batch factor: B / #nonzero scores (verl), B / (B - M) with M "
                             "the rows of all-equal groups (paper), or 1"),
        "f_norm": Float(1.0, minimum=1e-12, help="constant divisor of the advantage"),
    }
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Chu et al., GPG: a simple and strong reinforcement learning baseline for model "
        "reasoning", 2025,
        "github.com/volcengine/verl verl/trainer/ppo/core_algos.py "
        "compute_gpg_outcome_advantage",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            groups = Groups(group_ids, scores.device)
            centred = scores - group_mean_baseline(scores, groups, "score")
            advantages = broadcast(self._alpha(scores, groups) * centred / self.hp.f_norm, mask)
        return advantages, advantages.clone()

    def _alpha(self, scores: torch.Tensor, groups: Groups) -> torch.Tensor:
        rows = scores.new_tensor(float(scores.numel()))
        if self.hp.alpha == "one":
            return torch.ones_like(rows)
        if self.hp.alpha == "nonzero_scores":
            return rows / (scores != 0).sum().clamp(min=1)
        stuck = groups.all_equal(scores) & ~groups.singleton()
        return rows / (rows - stuck.sum()).clamp(min=1)
