"""DDCA: Dynamic Decoupled Conditional Advantage (a correctness advantage plus a length
advantage computed among the correct answers only, scaled by the group's pass rate).

For row i of group g (n rows), with c_i = 1 when its score (rewards summed over valid tokens)
is at least ``success_threshold`` and 0 otherwise, L_i its number of valid tokens, C the
correct rows of g and p = |C| / n the group's pass rate:

    A_corr,i = (c_i - mean_g(c)) / (max(std_g(c), eps) + eps)
    z_i      = (L_i - mean_C(L)) / (max(std_C(L), eps) + eps)                  i in C
    A_len,i  = -(sigma(z_i) - mean_C(sigma(z)))     (length_score="sigmoid")   i in C
    A_len,i  = -z_i                                  (length_score="z")         i in C
    A_len,i  = 0                                                                i not in C
    A_i      = A_corr,i + lambda(p) * A_len,i,      lambda(p) = length_weight * p
                                                    (dynamic=False: length_weight, "DCA")

broadcast to the row's valid tokens (0 at padding); returns = advantages. Shorter correct
answers gain and longer ones lose, relative to the other correct answers of their group only
(wrong answers neither set nor receive the length baseline: the paper's "dilution of length
baseline"), and more so on easy prompts (p near 1) than on hard ones (the "difficulty-penalty
mismatch"). A_len sums to 0 over C; with |C| < 2 it is 0 (one correct answer has z = 0). A
group whose rows are all correct or all wrong has A_corr = 0, and a group of one row gets 0.
The score only decides correctness: a partial reward below the threshold (the RLVR testbed's
``format_reward``) counts as wrong, as in the reference, whose accuracy reward is 0/1.

Conventions, each an option with the released code's default: ``std`` ``biased`` (np.std,
the released code) or ``unbiased``; ``epsilon`` 1e-8 both floors each std and is added to it
(so an all-equal set divides 0 by 2 eps); sigma(z) is taken of z clipped to [-20, 20]; the
``length_score`` ``sigmoid`` (the released code's) or ``z`` (the workbench
literature catalogue's reading, -(L_i - mean_C L) / (std_C L + eps); the same ranking, not
squashed). A row is correct when its score is at least ``success_threshold`` (1, as in
``pass_at_k``; the released verl hook takes reward > 0.5: the same for 0/1 rewards).
``length_weight`` (the code's beta) defaults to the released experiment config's
0.2 (its comment cites the paper's Section 7.5 for 0.2-0.5); the catalogue guessed 0.5.

Sources: Peng et al., "Dynamic Decoupled Conditional Advantage" (2026): its abstract and the
workbench literature catalogue (catalogue-000.md, section "¶81", whose formula is marked [K?]:
a reading, not taken from the paper). The pass-rate scaling lambda(p) = lambda_0 * p is the
catalogue's reading, not confirmed from the paper's text (the paper was not read here); the
released code (github.com/alphadl/DDCA ``dca/advantage.py``, ``advantage_dca_grpo`` with
``use_dynamic=True``, read but not run) scales the length advantage by the same rho = |C| / n,
and its length term is the centred sigmoid of the z-score (the paper's Eq. 12-13, as the code's
comments number them), which is this file's default. Reconstructed:
tests/test_length_advantages.py checks numbers worked by hand from the formulas above and a
plain-loop re-derivation of them; no test runs the released code.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import STD_HELP, Groups, broadcast, sequence_scores, valid
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register

Z_CLIP = 20.0  # sigma is taken of z clipped to [-Z_CLIP, Z_CLIP] (the released code's bound)


def standardised(values: torch.Tensor, members: torch.Tensor, groups: Groups, unbiased: bool,
                 epsilon: float) -> torch.Tensor:
    """(B,) each row's value centred on the mean of its group's ``members`` (0/1 per row) and
    divided by (max(std, epsilon) + epsilon), the std over those members (n - 1 for
    ``unbiased``, at least 1). Rows outside the members get a value too; callers mask it."""
    count = groups.sum(members)
    mean = groups.sum(values * members) / count.clamp(min=1)
    centred = values - mean[groups.index]
    dof = (count - 1 if unbiased else count).clamp(min=1)
    std = (groups.sum(members * centred * centred) / dof).sqrt()
    return centred / (std.clamp(min=epsilon) + epsilon)[groups.index]


@register
class DDCA(AdvantageMethod):
    name = "ddca"
    hyperparameters = {
        "length_weight": Float(0.2, low=0.0, high=1.0, minimum=0.0,
                               help="lambda_0 (the released code's beta): weight of the "
                                    "length advantage at pass rate 1"),
        "dynamic": Bool(True, help="scale the length weight by the group's pass rate (DDCA); "
                                   "False: a constant weight (DCA)"),
        "length_score": Choice("sigmoid", ("sigmoid", "z"),
                               help="length advantage of a correct row: -(sigmoid(z) - its "
                                    "mean over the correct rows) (released code) or -z "
                                    "(catalogue)"),
        "std": Choice("biased", ("biased", "unbiased"), help=STD_HELP),
        "epsilon": Float(1e-8, minimum=1e-12, help="floor of each std and added to it"),
        "success_threshold": Float(1.0, help="a row is correct when its score is >= this"),
    }
    requires = frozenset({"rewards", "mask", "group_ids"})
    reference = Reference(
        "Peng et al., Dynamic Decoupled Conditional Advantage (DDCA)", 2026,
        "github.com/alphadl/DDCA dca/advantage.py advantage_dca_grpo (read, not run); "
        "workbench literature catalogue-000.md ¶81",
    )
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, group_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            lengths = valid(mask, scores).sum(dim=-1)
            groups = Groups(group_ids, scores.device)
            correct = (scores >= self.hp.success_threshold).to(scores.dtype)
            unbiased, epsilon = self.hp.std == "unbiased", self.hp.epsilon
            accuracy = standardised(correct, torch.ones_like(correct), groups, unbiased, epsilon)
            z = standardised(lengths, correct, groups, unbiased, epsilon)
            count = groups.sum(correct)
            if self.hp.length_score == "sigmoid":
                squashed = torch.sigmoid(z.clamp(-Z_CLIP, Z_CLIP))
                mean = groups.sum(squashed * correct) / count.clamp(min=1)
                length = -(squashed - mean[groups.index]) * correct
            else:
                length = -z * correct
            weight = torch.full_like(count, self.hp.length_weight)
            if self.hp.dynamic:
                weight = weight * count / groups.sizes.to(count.dtype)
            advantages = broadcast(accuracy + weight[groups.index] * length, mask)
        return advantages, advantages.clone()
