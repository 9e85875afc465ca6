"""ReMax: REINFORCE with the reward of the greedy answer as baseline.

    G_t = sum_{t' >= t} r_{t'} m_{t'}      (reverse cumulative sum over valid tokens)
    A_t = G_t - b_i                        at every valid token t of row i

with b_i = ``reward_baselines[i]``, the score of the greedy (argmax) answer to row i's prompt,
which the loop generates and scores. Returns are G; both are 0 at padded positions (verl leaves
G at a padded token inside a row nonzero; valid positions are the same). No discount.

Reference: Li et al., "ReMax: a simple, effective, and efficient reinforcement learning method
for aligning large language models" (2023); implementation verl
``verl/trainer/ppo/core_algos.py`` (``compute_remax_outcome_advantage``). Reference-checked:
tests/test_rlvr_advantages.py compares it with a re-derivation of that function (token rewards,
masked tokens).
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import masked, valid
from workbench.families import AdvantageMethod
from workbench.registry import Reference, register


@register
class ReMax(AdvantageMethod):
    name = "remax"
    requires = frozenset({"rewards", "mask", "reward_baselines"})
    reference = Reference(
        "Li et al., ReMax: a simple, effective, and efficient RL method for aligning LLMs", 2023,
        "github.com/volcengine/verl verl/trainer/ppo/core_algos.py "
        "compute_remax_outcome_advantage",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, reward_baselines, **_):
        with torch.no_grad():
            m = valid(mask, rewards)
            returns = masked(rewards, mask).flip(-1).cumsum(-1).flip(-1) * m
            baselines = reward_baselines.to(dtype=rewards.dtype, device=rewards.device)
            advantages = returns - baselines.unsqueeze(-1) * m
        return advantages, returns
