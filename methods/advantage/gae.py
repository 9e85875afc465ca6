"""Generalized advantage estimation, GAE(gamma, lambda), for environment rollouts.

For each row (an environment) and step t = T - 1, ..., 0:

    delta_t = r_t + gamma * (1 - terminated_t) * next_values_t - values_t
    A_t     = delta_t + gamma * lambda * (1 - dones_t) * A_{t+1},    A_T = 0
    returns_t = A_t + values_t

``next_values_t`` is the value of the state actually reached after step t (the final
observation at a truncation), so a truncated episode bootstraps from it while a terminated
one does not; both cut the recursion. The last step of the rollout, when not done, is a cut
too: it bootstraps from ``next_values[:, T - 1]`` (= ``values[:, T]``). With a ``mask``, the
last valid step of a row is cut the same way and padded steps get advantage and return 0;
nothing at a padded step reaches a valid one. Advantage normalisation is the loop's option,
not done here.

Reference: Schulman, Moritz, Levine, Jordan & Abbeel, "High-dimensional continuous control
using generalized advantage estimation", ICLR 2016. Defaults gamma = 0.99, lambda = 0.95 (CleanRL
ppo.py, Stable-Baselines3 PPO). Truncation handling: Stable-Baselines3 ``collect_rollouts``
adds gamma * V(final observation) to the reward of a truncated step and then treats it as
done, which is the delta above; CleanRL ppo.py treats truncation as termination (pass
``terminated = dones`` for that convention).

Fidelity: reference-checked. tests/test_control_methods.py checks hand-derived values on short
rollouts with a termination, a truncation, the rollout cut and padding; compares with an
independent re-derivation of CleanRL ppo.py's loop (its dones flag the step *before* which an
episode ended, truncation counted as termination) to 1e-12 when no episode is truncated and
when ``terminated = dones``; with Stable-Baselines3's reward-bootstrap at truncations; and with
Spinning Up's per-episode ``VPGBuffer.finish_path``.
"""

from __future__ import annotations

import torch

from workbench.families import AdvantageMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register

from ._episodes import structure, zero_where_not


@register
class GAE(AdvantageMethod):
    name = "gae"
    hyperparameters = {
        "gamma": Float(0.99, minimum=0.0, maximum=1.0, help="discount factor"),
        "lam": Float(0.95, low=0.8, high=1.0, minimum=0.0, maximum=1.0,
                     help="GAE lambda: 0 is the TD error, 1 the Monte-Carlo advantage"),
    }
    requires = frozenset({"rewards", "values", "dones", "terminated", "next_values"})
    reference = Reference(
        "Schulman et al., High-dimensional continuous control using generalized advantage "
        "estimation", 2016,
        "vwxyzjn/cleanrl cleanrl/ppo.py; DLR-RM/stable-baselines3 RolloutBuffer "
        "(truncation bootstrap in OnPolicyAlgorithm.collect_rollouts)",
    )
    fidelity = "reference-checked"
    invariants = frozenset({"row_independent"})

    def compute(self, *, rewards, values, dones, terminated, next_values, mask=None, **_):
        flags = structure(rewards, dones, terminated, mask)
        bootstrap = zero_where_not(~flags.terminal, next_values)
        deltas = zero_where_not(flags.valid, rewards + self.hp.gamma * bootstrap - values[:, :-1])
        decay = self.hp.gamma * self.hp.lam
        carry = torch.zeros_like(rewards[:, 0])
        columns = []
        for t in reversed(range(rewards.shape[1])):
            carry = deltas[:, t] + decay * zero_where_not(flags.continues[:, t], carry)
            columns.append(carry)
        advantages = torch.stack(columns[::-1], dim=1)
        returns = zero_where_not(flags.valid, advantages + values[:, :-1])
        return advantages, returns
