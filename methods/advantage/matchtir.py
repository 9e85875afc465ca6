"""MatchTIR: turn rewards from a bipartite matching of a rollout's tool calls to a ground-truth
trace, and a dual-level advantage (trajectory + turn).

Rows are episodes of L valid steps, each step one tool call (``action_ids``); ``group_ids`` put
the G rollouts of one task instance in one group; ``reference_actions`` hold a ground-truth
trace of the row's task (g = 0 .. K - 1, -1 after its end). With S[p, g] the similarity of
predicted call p and ground-truth call g:

    S[p, g] = 1 where a_p equals the trace's call g, else 0

a matching pi of predicted to ground-truth calls (each used at most once) maximising the total
similarity gives the turn rewards

    r_p = S[p, pi(p)]                        (0 for a call left unmatched)

(``assignment = hard``: the Hungarian algorithm, ties broken towards pairs whose positions
p and g are closer). Then

    R_{i,p}     = sum_{k >= p} gamma^(k - p) r_{i,k}                (discounted future turn
                                                                     reward)
    A^turn_{i,p} = (R_{i,p} - mean_group(R)) / (std_group(R) + epsilon)
                                                                    (over every valid turn of
                                                                     the group; ``turn_norm
                                                                     = mean``: no division)
    A_{i,p}     = A^traj_i + turn_weight * A^turn_{i,p}

with A^traj the GRPO advantage of the outcome reward (the rewards summed over the row).
Returns = advantages. 0 at padding.

Reference: "MatchTIR: bipartite matching turn-level rewards for tool-integrated reasoning"
(2026), as the literature card summarises it (catalogue-001 #67): credit assignment as a
bipartite matching between predicted and ground-truth tool-call traces (hard: Hungarian; soft:
optimal transport), the similarity from tool-name match and argument F1, turn rewards from the
matched similarity (0 unmatched), and a dual-level advantage adding a group-normalised
discounted sum of future turn rewards to the trajectory advantage. Reconstructed: the
normalisation over the group's turns, gamma = 0.9, the tie-break, the weight 1. Substitutions:
on the tool-use puzzle an action is one tool with its parameter fixed by the instance, so name
match and argument F1 collapse to one test, equal ids; the ground-truth trace is the
environment's planner's one shortest solution (another shortest solution matches it only in
part). Not reproduced: the soft (optimal-transport) assignment.

Fidelity: reconstructed (no reference code read or run). tests/test_step_potential_methods.py
checks hand-worked values.
"""

from __future__ import annotations

import numpy as np
import torch

from methods.advantage._outcome import masked
from methods.advantage._steps import discounted_returns, group_normalise
from methods.advantage.grpo import GRPO
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register

TIE_BREAK = 1e-6  # per position of distance; far below one matched call


def matched_rewards(calls: np.ndarray, trace: np.ndarray) -> np.ndarray:
    """(L,) r_p: 1 where predicted call p is matched to an equal call of ``trace`` by a
    maximum matching (ties towards nearby positions), else 0."""
    from scipy.optimize import linear_sum_assignment  # only when the method runs

    out = np.zeros(len(calls))
    if len(calls) == 0 or len(trace) == 0:
        return out
    similarity = (calls[:, None] == trace[None, :]).astype(np.float64)
    gap = np.abs(np.arange(len(calls))[:, None] - np.arange(len(trace))[None, :])
    rows, cols = linear_sum_assignment(similarity - TIE_BREAK * gap, maximize=True)
    out[rows] = similarity[rows, cols]
    return out


@register
class MatchTIR(AdvantageMethod):
    name = "matchtir"
    hyperparameters = {
        "gamma": Float(0.9, minimum=0.0, maximum=1.0,
                       help="discount of the future turn rewards"),
        "turn_weight": Float(1.0, low=0.1, high=2.0, minimum=0.0,
                             help="weight of the turn-level advantage"),
        "turn_norm": Choice("mean_std", ("mean_std", "mean"),
                            help="turn advantage: group mean removed, divided by the std or "
                                 "not"),
        "assignment": Choice("hard", ("hard",), help="Hungarian matching (soft: not "
                                                     "reproduced)"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the stds"),
        "norm_by_std": Bool(True, help="GRPO's division of the trajectory advantage"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "action_ids", "reference_actions"})
    reference = Reference(
        "MatchTIR: bipartite matching turn-level rewards for tool-integrated reasoning", 2026,
        "literature card catalogue-001 #67 (no code used)")
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, group_ids, action_ids, reference_actions, **_):
        with torch.no_grad():
            grpo = GRPO(epsilon=self.hp.epsilon, norm_by_std=self.hp.norm_by_std)
            trajectory, _ = grpo.compute(rewards=rewards, mask=mask, group_ids=group_ids)
            ok = (mask != 0).to(trajectory.device)
            calls = action_ids.detach().cpu().numpy()
            traces = reference_actions.detach().cpu().numpy()
            valid = ok.cpu().numpy()
            turn = np.zeros(ok.shape)
            for row in range(ok.shape[0]):
                played = calls[row][valid[row]]
                trace = traces[row][traces[row] >= 0]
                turn[row, valid[row]] = matched_rewards(played, trace)
            r = masked(torch.as_tensor(turn, dtype=trajectory.dtype, device=ok.device), ok)
            future = discounted_returns(r, ok, self.hp.gamma)
            keys = group_ids.to(ok.device)[:, None].expand_as(ok)[ok]
            step = torch.zeros_like(future)
            step[ok] = group_normalise(future[ok], keys, keys, future[ok], singleton_mean=None,
                                       divide=self.hp.turn_norm == "mean_std",
                                       epsilon=self.hp.epsilon)
            advantages = torch.where(ok, trajectory + self.hp.turn_weight * step,
                                     torch.zeros_like(trajectory))
        return advantages, advantages.clone()
