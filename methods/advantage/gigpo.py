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
            scores = r.sum(dim=1)
            if self.hp.episode_stats == "steps":  # each episode once per valid step
                members = group_ids[:, None].expand_as(ok)[ok]
                values = scores[:, None].expand_as(ok)[ok]
            else:  # each episode (with a valid step) once
                played = ok.any(dim=1)
                members, values = group_ids[played], scores[played]
            episode = self._normalise(scores, group_ids, members, values, singleton_mean=0.0)
            returns = discounted_returns(r, ok, self.hp.gamma)
            keys = torch.stack([group_ids[:, None].expand_as(ok)[ok], anchor_ids[ok]], dim=1)
            step = torch.zeros_like(returns)
            step[ok] = self._normalise(returns[ok], keys, keys, returns[ok],
                                       singleton_mean=None)
            advantages = (episode[:, None] + self.hp.step_weight * step) * ok
        return advantages, advantages.clone()

    def _normalise(self, x, x_keys, member_keys, member_values, singleton_mean):
        """x minus the mean of the members that share its key (divided by their unbiased std
        plus epsilon in ``mean_std_norm``). A key with one member has std 1 and mean
        ``singleton_mean`` (None: that member's value)."""
        dim = 0 if member_keys.dim() == 2 else None  # rows of (group, anchor) pairs
        found, inverse = torch.unique(torch.cat([member_keys, x_keys]), dim=dim,
                                      return_inverse=True)
        of_member, of_x = inverse[: len(member_keys)], inverse[len(member_keys):]
        count = torch.zeros(len(found), dtype=x.dtype, device=x.device).index_add_(
            0, of_member, torch.ones_like(member_values))
        total = torch.zeros_like(count).index_add_(0, of_member, member_values)
        mean = total / count.clamp(min=1)
        spread = torch.zeros_like(count).index_add_(
            0, of_member, (member_values - mean[of_member]) ** 2)
        std = torch.sqrt(spread / (count - 1).clamp(min=1))
        single = count == 1
        if singleton_mean is not None:
            mean = torch.where(single, torch.full_like(mean, singleton_mean), mean)
        std = torch.where(single, torch.ones_like(std), std)
        centred = x - mean[of_x]
        if self.hp.mode == "mean_std_norm":
            centred = centred / (std[of_x] + self.hp.epsilon)
        return centred


def discounted_returns(rewards: torch.Tensor, ok: torch.Tensor, gamma: float) -> torch.Tensor:
    """(B, T): sum over k >= t of gamma^(k - t) r_k along each row's valid steps (0 at
    padding); rewards already 0 at padding."""
    out = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = torch.where(ok[:, t], rewards[:, t] + gamma * running, running)
        out[:, t] = torch.where(ok[:, t], running, torch.zeros_like(running))
    return out
