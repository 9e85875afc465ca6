"""PAV-style progress advantage: each step's change in the estimated chance of success, added
to the episode's outcome advantage.

A row is one episode of L valid steps; V̂(s_t) estimates the return to go from the state step t
starts from (the chance of reaching the goal, on a 0/1-reward task), and V̂(s_L) = 0 after the
episode's last step (it has ended: goal or ``max_steps``). With undiscounted, deterministic
moves Q(s_t, a_t) = r_t + V(s_{t+1}), so the progress of step t is

    P_t = r_t + V̂(s_{t+1}) - V̂(s_t)                 (the advantage A(s_t, a_t) under the
                                                      policy whose values V̂ are)

and the advantage is

    A_t = O_i + alpha * P_t,

O_i the row's outcome advantage (``outcome``): ``rloo``, its score (rewards summed) minus the
mean score of the other rows of its group (a group of one: its score); ``score``, the score
alone; ``none``, 0 (progress alone). Returns = the reward to go, sum_{k >= t} r_k (the value
head's target under ``values = critic``).

``values``: ``mc`` (default), V̂(s_t) = ``mc_values`` column t, the mean return of
``continuations`` rollouts of the sampling policy from the restored state (every valid step's
state is requested, so a row of L steps costs L x continuations rollouts); ``critic``, the value
head's ``values`` column t.

Reference: Setlur et al., "Rewarding Progress: Scaling Automated Process Verifiers for LLM
Reasoning" (ICLR 2025), arXiv:2410.08146: the process reward of a step is its progress, the
change in the likelihood of success before and after it under a prover policy mu, A^mu(s_h, a_h)
= Q^mu(s_h, a_h) - V^mu(s_h), and online RL maximises the effective reward Q^pi(s_h, a_h) +
alpha A^mu(s_h, a_h). Differences: here the prover is the sampling policy itself (the values
are its own Monte Carlo estimates or its value head), not a distinct prover such as Best-of-K,
which the paper argues is what makes progress informative beyond the outcome; there is no
trained verifier (the values are estimated afresh for each batch); Q^pi is the episode's
outcome with an RLOO baseline; alpha = 1 is this workbench's default, not a value taken from
the paper.

Fidelity: reconstructed (from the paper's definitions; no reference code run).
tests/test_step_advantages.py checks hand-worked values.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import Groups, broadcast, masked, sequence_scores
from methods.advantage._steps import discounted_returns
from workbench.families import AdvantageMethod, ValueRequest
from workbench.hyperparams import Choice, Float, Int
from workbench.registry import Reference, register


def progress(rewards: torch.Tensor, ok: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """(B, T) P_t = r_t + V(s_{t+1}) - V(s_t) along each row's valid steps, V after the last
    valid step 0; 0 at padding. ``values`` (B, T + 1), column t the state step t starts from."""
    after = torch.zeros_like(values[:, :-1])
    after[:, :-1] = torch.where(ok[:, 1:], values[:, 1:-1], torch.zeros_like(after[:, :-1]))
    gain = masked(rewards, ok) + after - values[:, :-1]
    return torch.where(ok, gain, torch.zeros_like(gain))


@register
class PAV(AdvantageMethod):
    name = "pav"
    hyperparameters = {
        "alpha": Float(1.0, low=0.1, high=10.0, log=True, minimum=0.0,
                       help="weight of the progress term against the outcome advantage"),
        "outcome": Choice("rloo", ("rloo", "score", "none"),
                          help="the outcome term: score minus the other rows' mean, the "
                               "score, or none (progress alone)"),
        "values": Choice("mc", ("mc", "critic"),
                         help="V̂: Monte Carlo rollouts of the sampling policy (mc_values) or "
                              "the value head (values)"),
        "continuations": Int(4, minimum=1, maximum=1024,
                             help="mc: rollouts from each step's state for its value"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "mc_values", "values"})
    reference = Reference(
        "Setlur et al., Rewarding Progress: Scaling Automated Process Verifiers for LLM "
        "Reasoning (PAV)", 2025, "arXiv:2410.08146 (no code used)")
    fidelity = "reconstructed"

    @classmethod
    def requirements(cls, params):
        needs = {"rewards", "mask"}
        if params.get("outcome", "rloo") == "rloo":
            needs.add("group_ids")
        needs.add("values" if params.get("values", "mc") == "critic" else "mc_values")
        return frozenset(needs)

    def value_request(self, *, mask, old_log_probs):
        if self.hp.values != "mc":
            return None
        points = torch.zeros(mask.shape[0], mask.shape[1] + 1, dtype=torch.bool,
                             device=mask.device)
        points[:, :-1] = mask != 0  # every valid step's state
        return ValueRequest(points, int(self.hp.continuations))

    def compute(self, *, rewards, mask, group_ids=None, mc_values=None, values=None, **_):
        with torch.no_grad():
            ok = mask != 0
            estimates = (values if self.hp.values == "critic" else mc_values).to(rewards.dtype)
            gain = progress(rewards, ok, estimates)
            outcome = self.hp.outcome
            if outcome == "none":
                base = torch.zeros_like(gain)
            else:
                scores = sequence_scores(rewards, mask)
                if outcome == "rloo":
                    groups = Groups(group_ids, scores.device)
                    size = groups.row_size().to(scores.dtype)
                    others = (size * scores - groups.sum(scores)[groups.index]) \
                        / (size - 1).clamp(min=1)
                    scores = torch.where(groups.singleton(), scores, others)
                base = broadcast(scores, mask)
            advantages = base + self.hp.alpha * gain
            returns = discounted_returns(masked(rewards, ok), ok, 1.0)
        return advantages, returns
