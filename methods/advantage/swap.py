"""SWAP-style step-wise adaptive length penalty: GRPO's outcome advantage minus a penalty for
an episode's excess length, spread over its steps with the least importance taking most.

Rows are episodes of up to T steps; ``group_ids`` put an instance's G episodes in one group.
With s_i the episode's score (rewards summed over its valid steps), L_i its valid steps, a row
"correct" when s_i equals ``correct_score`` (1: the goal reached) and I_{i,k} the importance
of step k (below):

    A_i      = (s_i - mean_g(s)) / (std_g(s) + epsilon)      GRPO (verl's conventions)
    L_ref_g  = the fewest steps of a correct row of the group
    E_i      = max(0, L_i - L_ref_g)                          the excess length (0 in a group
                                                              with no correct row; with
                                                              ``penalize = correct``, the
                                                              default, 0 for rows not correct)
    P_{i,k}  = beta * E_i * softmax_k(-I_{i,k} / tau)         over the row's valid steps
    A_{i,k}  = A_i - P_{i,k}                                  outcome + process advantage

so a row's penalties sum to beta * E_i (a step is one environment step, the card's len_k = 1;
their mean is beta times the row's excess steps per step) and fall mostly on the steps of
lowest importance (tau -> infinity spreads them evenly). Returns = the reward to go, sum_{k' >=
k} r_{k'} (the value head's target under ``values = critic``).

Importance: SWAP scores a reasoning step by the on-policy log-probability improvement of the
correct answer, log pi(y* | prefix up to k) - log pi(y* | prefix before k). The agent tasks
have no answer to teacher-force; the analogue the inputs give is the step's change in the
estimated chance of reaching the goal under the sampling policy, PAV's progress (``pav``):

    I_{i,k} = r_{i,k} + V^(s_{k+1}) - V^(s_k)                 (V^ after the last step: 0)

with V^ from ``mc_values`` (``values = mc``, default: ``continuations`` rollouts of the
sampling policy from every valid step's state, counted in cost/env_steps) or the value head
(``values = critic``). It is a difference of probabilities, not of log-probabilities; tau's
default 0.1 is set for that scale.

Reference: Li et al., "SWAP: Step-wise Adaptive Penalization" (2026), as described in the
workbench literature catalogue (catalogue-000, paragraph 12: the abstract's mechanism and a
reconstructed implementation, [K?]: importance from the answer's log-probability improvement,
E against the shortest correct length of the group, P_k proportional to E * softmax(-I_k /
tau) * len_k, A_t = A_outcome + A_process). The exact allocation rule is not in the card:
beta (0.5), tau (0.1), penalising correct rows only, and the importance signal above are this
workbench's choices. No reference code was run. tests/test_redistribution_methods.py checks
numbers worked by hand.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import Groups
from methods.advantage._steps import discounted_returns
from methods.advantage.grpo import GRPO
from methods.advantage.pav import progress
from workbench.families import AdvantageMethod, ValueRequest
from workbench.hyperparams import Bool, Choice, Float, Int
from workbench.registry import Reference, register


@register
class SWAP(AdvantageMethod):
    name = "swap"
    hyperparameters = {
        "beta": Float(0.5, low=0.05, high=2.0, log=True, minimum=0.0,
                      help="penalty per excess step (a row's penalties sum to beta * E)"),
        "tau": Float(0.1, minimum=1e-6,
                     help="temperature of the softmax over -importance that spreads it"),
        "penalize": Choice("correct", ("correct", "all"),
                           help="rows whose excess length is penalised: correct ones, or all"),
        "values": Choice("mc", ("mc", "critic"),
                         help="V^ for the importance: Monte Carlo rollouts (mc_values) or the "
                              "value head (values)"),
        "continuations": Int(4, minimum=1, maximum=1024,
                             help="mc: rollouts from each step's state for its value"),
        "correct_score": Float(1.0, help="a row is correct when its score equals this"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the group std (verl 1e-6)"),
        "norm_by_std": Bool(True, help="divide by the group std (False: Dr. GRPO's centring)"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "mc_values", "values"})
    reference = Reference(
        "Li et al., SWAP: Step-wise Adaptive Penalization (SWAP-style reconstruction, "
        "catalogue-000 paragraph 12)", 2026, "workbench literature catalogue (no code used)")
    fidelity = "reconstructed"

    @classmethod
    def requirements(cls, params):
        values = "values" if params.get("values", "mc") == "critic" else "mc_values"
        return frozenset({"rewards", "mask", "group_ids", values})

    def value_request(self, *, mask, old_log_probs):
        if self.hp.values != "mc":
            return None
        points = torch.zeros(mask.shape[0], mask.shape[1] + 1, dtype=torch.bool,
                             device=mask.device)
        points[:, :-1] = mask != 0  # every valid step's state
        return ValueRequest(points, int(self.hp.continuations))

    def compute(self, *, rewards, mask, group_ids, mc_values=None, values=None, **_):
        with torch.no_grad():
            ok = mask != 0
            dtype = rewards.dtype if rewards.is_floating_point() else torch.float64
            zero = torch.zeros((), dtype=dtype, device=rewards.device)
            r = torch.where(ok, rewards.to(dtype), zero)
            scores = r.sum(dim=1)
            grpo = GRPO(epsilon=self.hp.epsilon, norm_by_std=self.hp.norm_by_std)
            episode = grpo.compute(rewards=scores[:, None],
                                   mask=torch.ones_like(scores[:, None]),
                                   group_ids=group_ids)[0][:, 0]
            lengths = ok.sum(dim=1).to(dtype)
            correct = scores == self.hp.correct_score
            groups = Groups(group_ids, scores.device)
            big = torch.full_like(lengths, torch.inf)
            shortest = torch.full((groups.count,), torch.inf, dtype=dtype,
                                  device=scores.device)
            shortest = shortest.scatter_reduce(0, groups.index,
                                               torch.where(correct, lengths, big), "amin")
            reference = shortest[groups.index]
            excess = torch.where(torch.isfinite(reference),
                                 (lengths - reference).clamp(min=0.0), torch.zeros_like(lengths))
            if self.hp.penalize == "correct":
                excess = torch.where(correct, excess, torch.zeros_like(excess))
            estimates = (values if self.hp.values == "critic" else mc_values).to(dtype)
            importance = progress(r, ok, estimates)
            logits = torch.where(ok, -importance / self.hp.tau,
                                 torch.full((), -torch.inf, dtype=dtype))
            logits = torch.where(ok.any(dim=1, keepdim=True), logits, torch.zeros_like(logits))
            spread = torch.where(ok, torch.softmax(logits, dim=1), zero)
            penalty = self.hp.beta * excess[:, None] * spread
            advantages = torch.where(ok, episode[:, None] - penalty, zero)
            returns = discounted_returns(r, ok, 1.0)
        return advantages, returns
