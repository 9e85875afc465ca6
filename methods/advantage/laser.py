"""LASER: a length-based step reward (a bonus for correct answers within a target length),
then GRPO's group normalisation.

For row i of group g with score s_i (its rewards summed over valid tokens; the checker's
correctness reward C_i, 1 or 0, in the RLVR testbed) and L_i valid tokens:

    r_i = s_i + alpha * 1[s_i >= success_threshold  and  L_i <= target_length]
    A_i = (r_i - mean_g(r)) / (std_g(r) + epsilon)

broadcast to the row's valid tokens (0 at padding); returns = advantages. The bonus is a step
function of the length: a correct answer of at most L_T tokens earns alpha more than a longer
correct one, and a wrong answer earns none whatever its length. alpha = 0 is GRPO.

Conventions: the normalisation is ``grpo``'s with verl's defaults (LASER's training scripts
run verl's GRPO estimator) and its options: ``epsilon`` 1e-6, ``std`` unbiased or biased,
``singleton`` ``score`` (a group of one row: mean 0, std 1) or ``zero``. A row's length is its
number of valid tokens (in the RLVR testbed the response up to and including its end-of-sequence
token, as the reference's response attention mask counts it). ``target_length`` is in tokens
and belongs to the task: LASER's scripts use L_T = 2,048, 4,096 or 8,192 with responses of up
to 16,384 tokens. The default 5 suits ``rlvr-arith``'s default addition (2-3 digit operands):
its answers have at most 4 digits, plus the end token, and its responses are capped at the
longest solution + 2 = 6 tokens, so a correct answer misses the bonus only when trailing text
fills it to the cap. Other settings (a scratchpad, multiplication, countdown) need their own.

Left out: LASER-D, the dynamic and difficulty-aware variant, which gives each group the
target of its pass-rate bucket (at least 2/3 correct, at least 1/3, below 1/3) and re-chooses
each bucket's target every so many steps from the accuracies a monitoring set reaches under a
grid of lengths. Those targets are state kept across steps, estimated from a monitoring
set's rollouts that the advantage slot never sees: this family's pure function cannot hold
them. (Its bucket rule alone, with fixed targets per bucket, would be a different method.)

Reference: Liu et al., "Laser: learn to reason efficiently with adaptive length-based reward
shaping" (2025); the formula from the workbench literature catalogue (catalogue-000.md ¶58,
marked [K?]), which agrees with the released reward shaping (github.com/hkust-nlp/Laser
``verl/utils/reward_score/length_penalty.py``, ``compute_length_reward_larse``, read, not run:
a correct response's score gains ``length_reward_scalar``, 0.5 in its scripts, when its length
is at most the target). Reconstructed: tests/test_length_advantages.py checks numbers worked
by hand and alpha = 0 against ``grpo``; no test runs the released code.
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
    valid,
)
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice, Float, Int
from workbench.registry import Reference, register


@register
class LASER(AdvantageMethod):
    name = "laser"
    hyperparameters = {
        "alpha": Float(0.5, low=0.0, high=1.0, minimum=0.0,
                       help="bonus of a correct answer of at most target_length tokens"),
        "target_length": Int(5, minimum=0,
                             help="L_T in tokens; the task's scale (5: rlvr-arith's default "
                                  "addition, answers of up to 4 digits and the end token)"),
        "success_threshold": Float(1.0, help="a row is correct when its score is >= this"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the std (verl 1e-6)"),
        "std": Choice("unbiased", ("unbiased", "biased"), help=STD_HELP),
        "singleton": Choice("score", ("score", "zero"), help=SINGLETON_HELP),
    }
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Liu et al., Laser: learn to reason efficiently with adaptive length-based reward "
        "shaping (LASER)", 2025,
        "github.com/hkust-nlp/Laser verl/utils/reward_score/length_penalty.py "
        "compute_length_reward_larse (read, not run); workbench literature catalogue-000.md ¶58",
    )
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            lengths = valid(mask, scores).sum(dim=-1)
            groups = Groups(group_ids, scores.device)
            bonus = (scores >= self.hp.success_threshold) & (lengths <= self.hp.target_length)
            shaped = scores + self.hp.alpha * bonus.to(scores.dtype)
            centred = shaped - group_mean_baseline(shaped, groups, self.hp.singleton)
            std = groups.std(shaped, self.hp.std == "unbiased")
            std = torch.where(groups.singleton(), torch.ones_like(std), std)
            advantages = broadcast(centred / (std + self.hp.epsilon), mask)
        return advantages, advantages.clone()
