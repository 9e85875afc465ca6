"""How each RL testbed fills the advantage family's ``AdvantageBatch``, one builder per layout,
each beside the set of inputs it fills (the testbed's ``provides`` derives from it):

    control_batch      control rollouts: (T, N) tensors of N environments -> B = N rows
    episode_batch      agent episodes (``agent.episodes.Episodes``) and language-model turns
                       (``agent_lm.turns.Turns``): (B episodes, T steps or turns)
    completion_batch   RLVR completions: (B completions, T tokens)

Adding an advantage input for every testbed touches ``families/advantage.py`` (the field, its
meaning and its contract input) and this module (each builder fills it)."""

from __future__ import annotations

from typing import Protocol

import torch

from workbench.families import AdvantageBatch

#: the inputs ``control_batch`` fills
CONTROL_INPUTS = AdvantageBatch.names("rewards", "values", "dones", "terminated",
                                      "next_values", "mask", "old_log_probs",
                                      "target_log_probs")


def control_batch(rewards: torch.Tensor, values: torch.Tensor, last_value: torch.Tensor,
                  dones: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor,
                  log_probs: torch.Tensor, target_log_probs: torch.Tensor) -> AdvantageBatch:
    """From a rollout's (T, N) tensors and ``last_value`` (N,) = V(o_T): rows = environments,
    (N, T), values (N, T + 1) = [V(o_0), ..., V(o_T)], every step valid; ``log_probs`` the
    acting (behaviour) policy's, ``target_log_probs`` the learner's (the same tensor when the
    learner acted)."""
    return AdvantageBatch(
        rewards=rewards.T, values=torch.cat([values, last_value[None]], dim=0).T,
        dones=dones.T, terminated=terminated.T, next_values=next_values.T,
        mask=torch.ones_like(rewards.T), old_log_probs=log_probs.T,
        target_log_probs=target_log_probs.T)


#: the inputs ``episode_batch`` fills from every batch of episodes (values and next_values
#: only where a value head estimated them); with a rubric judge's annotations, rubric and
#: rubric_weights too
EPISODE_INPUTS = AdvantageBatch.names("rewards", "mask", "group_ids", "anchor_ids", "dones",
                                      "terminated", "values", "next_values", "old_log_probs",
                                      "tree_ids", "node_ids")


class Played(Protocol):
    """The (B, T) fields ``episode_batch`` reads, which ``agent.episodes.Episodes`` and
    ``agent_lm.turns.Turns`` share (each documents them)."""

    rewards: torch.Tensor
    mask: torch.Tensor
    anchor_ids: torch.Tensor
    dones: torch.Tensor
    terminated: torch.Tensor
    log_probs: torch.Tensor | None
    values: torch.Tensor | None
    next_values: torch.Tensor | None
    tree_ids: torch.Tensor | None
    node_ids: torch.Tensor | None


def episode_batch(played: Played, group_ids: torch.Tensor) -> AdvantageBatch:
    """A (B episodes, T steps) batch's inputs, of the agent network loop or the language-model
    turn loop (T = turns): ``old_log_probs`` = each step's sampling log-probability;
    independent rollouts (no ``tree_ids``) are trees of one leaf each, node_ids = row * T + t;
    ``rubric``/``rubric_weights`` where ``played`` has them."""
    rows, steps = played.mask.shape
    if played.tree_ids is None:
        device = played.mask.device
        trees = torch.arange(rows, device=device)
        nodes = torch.arange(rows * steps, device=device).view(rows, steps)
    else:
        trees, nodes = played.tree_ids, played.node_ids
    return AdvantageBatch(
        rewards=played.rewards, mask=played.mask, group_ids=group_ids,
        anchor_ids=played.anchor_ids, dones=played.dones, terminated=played.terminated,
        old_log_probs=played.log_probs, values=played.values,
        next_values=played.next_values if played.values is not None else None,
        tree_ids=trees, node_ids=nodes, rubric=getattr(played, "rubric", None),
        rubric_weights=getattr(played, "rubric_weights", None))


#: the inputs ``completion_batch`` fills: values, dones, terminated and next_values with a
#: value head, reward_baselines where the loop computed them, old_log_probs and
#: target_log_probs where it passes them (the RLVR loop: always)
COMPLETION_INPUTS = AdvantageBatch.names("rewards", "mask", "group_ids", "values", "dones",
                                         "terminated", "next_values", "reward_baselines",
                                         "old_log_probs", "target_log_probs")


def completion_batch(rewards: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor,
                     values: torch.Tensor | None,
                     reward_baselines: torch.Tensor | None,
                     old_log_probs: torch.Tensor | None = None,
                     target_log_probs: torch.Tensor | None = None) -> AdvantageBatch:
    """B completions of T tokens: ``rewards``/``mask`` (B, T), ``group_ids`` (B,); with the
    value head's ``values`` (B, T + 1), each completion is one episode that terminates at its
    last valid token (``dones`` = ``terminated`` there, ``next_values`` = values[:, 1:]);
    ``old_log_probs`` (B, T) the sampling policy's, ``target_log_probs`` the learner's (the
    same tensor when the learner sampled)."""
    ends = None
    if values is not None:
        ends = torch.zeros_like(mask, dtype=torch.bool)
        lengths = mask.sum(1).long()
        rows = torch.arange(len(lengths), device=mask.device)
        ends[rows, (lengths - 1).clamp(min=0)] = lengths > 0
    return AdvantageBatch(
        rewards=rewards, mask=mask, group_ids=group_ids, values=values, dones=ends,
        terminated=ends, next_values=values[:, 1:] if values is not None else None,
        reward_baselines=reward_baselines, old_log_probs=old_log_probs,
        target_log_probs=target_log_probs)
