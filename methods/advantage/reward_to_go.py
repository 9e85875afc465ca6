"""Monte-Carlo discounted reward-to-go (REINFORCE), with or without a value baseline.

For each row (an environment) and step t = T - 1, ..., 0:

    G_t = r_t + gamma * (1 - dones_t) * G_{t+1}
              + gamma * [episode cut at t without a terminal state] * next_values_t,  G_T = 0
    advantages = G_t - values_t   (baseline "value")   or   G_t   (baseline "none")
    returns    = G_t

An episode is cut without a terminal state at a truncation (``dones`` and not
``terminated``), at the last step of the rollout when it is not done, and, with a ``mask``,
at the last valid step of a row when it is not done; with ``bootstrap`` (default) the return
there takes gamma times ``next_values_t``, the value of the state reached (the final
observation at a truncation; ``values[:, T]`` at the rollout's end). ``bootstrap = False``
counts those cut-off futures as 0, the textbook REINFORCE estimate (and then needs neither
``terminated`` nor ``next_values``). A terminated episode never bootstraps. Padded steps get
advantage and return 0; nothing at a padded step reaches a valid one. Advantage
normalisation is the loop's option, not done here.

Reference: Williams, "Simple statistical gradient-following algorithms for connectionist
reinforcement learning", Machine Learning 1992 (REINFORCE, with a baseline); the bootstrap at
time-outs and epoch cuts follows Spinning Up's VPG (``VPGBuffer.finish_path(last_val)``, with
last_val = V(s_T) unless the state is terminal). gamma = 0.99 as there.

Fidelity: reference-checked. tests/test_control_methods.py checks hand-derived values on short
rollouts (termination, truncation, rollout cut, padding), compares with an independent
re-derivation of Spinning Up's per-episode ``finish_path`` rewards-to-go to 1e-12, and checks
that with the value baseline it equals GAE(lambda = 1).
"""

from __future__ import annotations

import torch

from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register

from ._episodes import structure, zero_where_not


@register
class RewardToGo(AdvantageMethod):
    name = "reward_to_go"
    hyperparameters = {
        "gamma": Float(0.99, minimum=0.0, maximum=1.0, help="discount factor"),
        "bootstrap": Bool(True, help="bootstrap from next_values at truncations and at the "
                                     "rollout's end (False: count the cut-off future as 0)"),
        "baseline": Choice("value", ("value", "none"),
                           help="'value': A = G - V(s_t); 'none': A = G"),
    }
    requires = frozenset({"rewards", "dones", "terminated", "next_values", "values"})
    reference = Reference(
        "Williams, Simple statistical gradient-following algorithms for connectionist "
        "reinforcement learning", 1992,
        "openai/spinningup spinup/algos/pytorch/vpg/vpg.py (VPGBuffer.finish_path)",
    )
    fidelity = "reference-checked"
    invariants = frozenset({"row_independent"})

    @classmethod
    def requirements(cls, params):
        needs = {"rewards", "dones"}
        if params["bootstrap"]:
            needs |= {"terminated", "next_values"}
        if params["baseline"] == "value":
            needs.add("values")
        return frozenset(needs)

    def compute(self, *, rewards, dones, terminated=None, next_values=None, values=None,
                mask=None, **_):
        bootstrap = self.hp.bootstrap
        flags = structure(rewards, dones, terminated if bootstrap else None, mask)
        tails = (self.hp.gamma * zero_where_not(flags.cut, next_values) if bootstrap
                 else torch.zeros_like(rewards))
        heads = zero_where_not(flags.valid, rewards + tails)
        carry = torch.zeros_like(rewards[:, 0])
        columns = []
        for t in reversed(range(rewards.shape[1])):
            carry = heads[:, t] + self.hp.gamma * zero_where_not(flags.continues[:, t], carry)
            columns.append(carry)
        returns = torch.stack(columns[::-1], dim=1)
        if self.hp.baseline == "none":
            return returns.clone(), returns
        advantages = zero_where_not(flags.valid, returns - values[:, :-1])
        return advantages, returns
