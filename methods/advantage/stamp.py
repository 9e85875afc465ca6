"""STAMP-style first-exposure credit: the GRPO advantage of each episode's outcome,
redistributed over its steps in proportion to what each step first surfaced (sign- and
mean-preserving).

Rows are episodes of up to T steps; ``group_ids`` put an instance's G episodes in one group;
``rubric`` (B, T, C) holds a judge's annotation a_{i,t,c} in {-1, 0, 1} of step t for item c
(the agent testbed's programmatic judge, ``testbeds/agent/rubric.py``: +1 where a sub-goal is
met). With s_i the episode's score (its rewards summed over its valid steps) and K_i its valid
steps:

    A_i     = (s_i - mean_g(s)) / (std_g(s) + epsilon)       GRPO (verl's conventions)
    n_{i,t} = #{c : t is the first step of row i with a_{i,t,c} = +1}   first exposures
    c_{i,t} = n_{i,t} + floor
    A_{i,t} = A_i * ((1 - eta) + eta * K_i * c_{i,t} / sum_t' c_{i,t'})   (``_redistribute``)

so each A_{i,t} has the sign of A_i and they average to A_i over the episode's steps: the
trajectory's reward and the ranking of the group's trajectories are unchanged, only the share
of each step moves. An episode that surfaced nothing (or ``eta = 0``) keeps A_i at every step;
a failed episode's sub-goal steps get the larger share of its negative advantage, as in the
reference's symmetric modulation. Returns = advantages.

The analogue chosen here: STAMP credits the search action that first surfaced each document a
reference-based verifier judged to support the answer's evidence graph. The agent tasks have
no documents; the closest item the existing inputs give is a rubric sub-goal (a +1
annotation: key picked up, door passed, goal reached on key-door), credited only at the step
of its first +1 in the episode, so a sub-goal met again later (or an item the judge marks at
every step) earns nothing after the first time. Negative annotations (blocked moves, revisits)
carry no credit: STAMP counts supported evidence only. The environment reward enters only
through A_i (the outcome), as STAMP composes with an outcome-only base reward. Only a task with
a rubric judge gives ``rubric`` (key-door, not toolcalc).

Reference: STAMP, "provenance-based step credit for deep-search agents" (2026), as described in
the workbench literature catalogue (catalogue-001, card #69): first-exposure attribution and a
sign-preserving advantage modulation that redistributes the advantage across steps; its
formula is the catalogue's reconstruction ([R]), the same operator as DRACO's step 5 with c =
the supported citations first exposed at the step plus a small floor. Reconstructed: the floor
(0.1) and eta (0.5) are this workbench's defaults, not values from the paper; no reference code
was run. tests/test_redistribution_methods.py checks numbers worked by hand, eta = 0 against
grpo, and the sign and mean preservation.
"""

from __future__ import annotations

import torch

from methods.advantage._redistribute import redistribute
from methods.advantage.grpo import GRPO
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Float
from workbench.registry import Reference, register


def first_exposures(rubric: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """(B, T) the number of items whose first +1 annotation of the row is at each step (read
    only at valid steps)."""
    met = (rubric > 0) & ok[:, :, None]  # (B, T, C)
    before = torch.cumsum(met.to(torch.int64), dim=1) - met.to(torch.int64)
    return (met & (before == 0)).sum(dim=2)


@register
class STAMP(AdvantageMethod):
    name = "stamp"
    hyperparameters = {
        "eta": Float(0.5, low=0.0, high=1.0, minimum=0.0, maximum=1.0,
                     help="redistribution strength: 0 is GRPO on the outcome, 1 puts every "
                          "step's share in proportion to its first-exposure credit"),
        "floor": Float(0.1, low=0.01, high=1.0, log=True, minimum=0.0,
                       help="credit every valid step gets besides its first exposures"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the group std (verl 1e-6)"),
        "norm_by_std": Bool(True, help="divide by the group std (False: Dr. GRPO's centring)"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "rubric"})
    reference = Reference(
        "STAMP: provenance-based step credit for deep-search agents (STAMP-style "
        "reconstruction, catalogue-001 card #69)", 2026,
        "workbench literature catalogue (no code used)")
    fidelity = "reconstructed"

    def compute(self, *, rewards, mask, group_ids, rubric, **_):
        with torch.no_grad():
            ok = mask != 0
            dtype = rewards.dtype if rewards.is_floating_point() else torch.float64
            scores = torch.where(ok, rewards.to(dtype), torch.zeros((), dtype=dtype)).sum(dim=1)
            grpo = GRPO(epsilon=self.hp.epsilon, norm_by_std=self.hp.norm_by_std)
            episode = grpo.compute(rewards=scores[:, None],
                                   mask=torch.ones_like(scores[:, None]),
                                   group_ids=group_ids)[0][:, 0]
            credit = first_exposures(rubric, ok).to(dtype) + self.hp.floor
            advantages = redistribute(episode, credit, ok, self.hp.eta)
        return advantages, advantages.clone()
