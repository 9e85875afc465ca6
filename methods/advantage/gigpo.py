"""GiGPO: group-in-group policy optimisation, an episode-level and a step-level group advantage.

Rows are episodes (B) of up to T steps; ``group_ids`` put the G episodes of one task instance in
one group; ``anchor_ids`` name each step's observed state, equal where two steps start from the
same state. With s_i the episode's reward summed over its valid steps and
R_{i,t} = sum_{k >= t} gamma^(k - t) r_{i,k} its discounted return from step t (Eq. 5):

    episode:  A^E_i = s_i - mean_g(s)                (mean_norm; / (std_g(s) + epsilon):
                                                      mean_std_norm)               (Eq. 3)
    step:     A^S_{i,t} = R_{i,t} - mean_a(R)        (the same normalisation over the
                                                      anchor group a: every valid step of
                                                      the instance group from that state)
                                                                                   (Eqs. 6-7)
    A_{i,t} = A^E_i + step_weight * A^S_{i,t}                                       (Eq. 8)

at valid steps (0 at padding); returns = advantages (as the reference). Conventions, each
verl-agent's (``gigpo/core_gigpo.py``):

- ``episode_stats = steps`` (verl-agent's ``compute_mean_std_cross_steps=True``, its default):
  the group's mean and std of s are over its *steps*, each episode's score counted once per
  valid step, so longer episodes weigh more; ``trajectories``: each episode once.
- A group whose statistic has one value: mean 0 and std 1 at the episode level (A^E = s), the
  value itself and std 1 at the step level (A^S = 0: a state seen once gets no step credit).
- Stds are unbiased (torch.std); ``epsilon`` is added to them.

Reference: Feng et al., "Group-in-Group Policy Optimization for LLM Agent Training" (2025),
arXiv:2505.10978; implementation verl-agent ``gigpo/core_gigpo.py``
(``compute_gigpo_outcome_advantage``, ``episode_norm_reward``, ``build_step_group``,
``step_norm_reward``, ``compute_step_discounted_returns``). Reference-checked:
tests/test_step_advantages.py compares it with numbers derived from that code (its functions
run on the same steps laid out as its batches are: one row per step) for both modes, both
episode statistics, a state seen once, equal returns within a group and a group of one episode.
Its similarity-based grouping of text observations is not reproduced: anchors are exact.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import masked
from methods.advantage._steps import discounted_returns, episode_advantages, group_normalise
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


@register
class GiGPO(AdvantageMethod):
    name = "gigpo"
    hyperparameters = {
        "gamma": Float(0.95, minimum=0.0, maximum=1.0,
                       help="discount of the step-level returns (verl-agent's default 0.95)"),
        "step_weight": Float(1.0, low=0.1, high=2.0, minimum=0.0,
                             help="weight of the step-level advantage (step_advantage_w)"),
        "mode": Choice("mean_norm", ("mean_norm", "mean_std_norm"),
                       help="subtract the group mean, or also divide by its std"),
        "episode_stats": Choice("steps", ("steps", "trajectories"),
                                help="episode mean/std over steps (verl-agent) or episodes"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to the std (mean_std_norm)"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "anchor_ids"})
    reference = Reference(
        "Feng et al., Group-in-Group Policy Optimization for LLM Agent Training (GiGPO)", 2025,
        "github.com/langfengQ/verl-agent gigpo/core_gigpo.py compute_gigpo_outcome_advantage",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, anchor_ids, **_):
        with torch.no_grad():
            ok = (mask != 0).to(rewards.device)
            r = masked(rewards, mask)
            divide = self.hp.mode == "mean_std_norm"
            episode = episode_advantages(r.sum(dim=1), ok, group_ids,
                                         across_steps=self.hp.episode_stats == "steps",
                                         divide=divide, epsilon=self.hp.epsilon)
            returns = discounted_returns(r, ok, self.hp.gamma)
            keys = torch.stack([group_ids[:, None].expand_as(ok)[ok], anchor_ids[ok]], dim=1)
            step = torch.zeros_like(returns)
            step[ok] = group_normalise(returns[ok], keys, keys, returns[ok],
                                       singleton_mean=None, divide=divide,
                                       epsilon=self.hp.epsilon)
            advantages = (episode[:, None] + self.hp.step_weight * step) * ok
        return advantages, advantages.clone()
