"""An agent update's rollouts: ``play`` runs every row of an environment to the end of its
episode with the sampled (or greedy) policy and returns ``Episodes``, (B rows, T steps)
tensors; ``mc_values_of`` estimates the values of the states an advantage method names by
playing on from them (``continuation_returns``). The training loop (``loop``), the tree
samplers (``tree``) and ``workbench credit`` build on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from workbench.families import (
    AdvantageMethod,
    monte_carlo_values,
)
from workbench.testbeds.agent.environment import AgentEnv, EnvFactory, Instance
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.rubric import JudgeFactory
from workbench.testbeds.shared.advantage_batch import episode_batch

if TYPE_CHECKING:
    pass


@dataclass
class Episodes:
    """One update's rollouts, (B, T) tensors (T: the longest episode's length)."""

    obs: torch.Tensor  # (B, T, obs_dim)
    actions: torch.Tensor  # (B, T) long
    log_probs: torch.Tensor  # (B, T) at sampling
    rewards: torch.Tensor  # (B, T)
    mask: torch.Tensor  # (B, T) float: 1 where a step was played
    anchor_ids: torch.Tensor  # (B, T) long
    entropy: torch.Tensor  # (B, T) the policy's entropy at each step, in nats
    success: torch.Tensor  # (B,) bool
    lengths: torch.Tensor  # (B,) long
    terminated: torch.Tensor  # (B, T) bool: the goal reached at that step
    dones: torch.Tensor  # (B, T) bool: the episode ended at that step (goal or max_steps)
    states: torch.Tensor  # (B, T, S) the environment's state (get_state) before each step
    values: torch.Tensor | None = None  # (B, T + 1) value of each step's state, and after
    next_values: torch.Tensor | None = None  # (B, T) value of the state each step reached
    tree_ids: torch.Tensor | None = None  # (B,) long, tree sampling: each row's tree
    groups: torch.Tensor | None = None  # (B,) long, tree sampling: each row's instance (0..M-1)
    node_ids: torch.Tensor | None = None  # (B, T) long, tree sampling: each step's node
    rubric: torch.Tensor | None = None  # (B, T, C) the judge's annotations (rubric.py)
    rubric_weights: torch.Tensor | None = None  # (B, C) its items' weights

    def advantage_inputs(self, group_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every input ``episode_batch`` fills, as a dict."""
        batch = episode_batch(self, group_ids)
        return batch.inputs(batch.provided())


def play(env: AgentEnv, policy: Policy, generator: torch.Generator | None,
         values: bool = False, *, reset: bool = True,
         judge: JudgeFactory | None = None, limit: int | None = None) -> Episodes:
    """Every row of ``env`` from its start (without ``reset``: from its current state) to the
    end of its episode, or for at most ``limit`` steps (the rows still playing then are left
    in their state, not done); actions sampled from ``generator``'s stream, or greedy when it
    is None;
    with ``values``, the value head's estimates of each state and of the state each step
    reached; with a ``judge``, its rubric annotations of every step (``rubric.Judge``; from the
    start only: a judge remembers the episode so far)."""
    if reset:
        env.reset()
    elif judge is not None:
        raise ValueError("a rubric judge needs the whole episode: play from the start")
    judging = judge(env) if judge is not None else None
    marks: list[torch.Tensor] = []
    steps: list[tuple] = []
    success = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    with torch.no_grad():
        while not bool(env.done.all()) and (limit is None or len(steps) < limit):
            obs, anchors, state = env.observe(), env.anchor_keys(), env.get_state()
            dist = policy.distribution(obs)
            if generator is None:
                actions = dist.probs.argmax(dim=1)
            else:
                actions = torch.multinomial(dist.probs, 1, generator=generator).squeeze(1)
            moved = env.step(actions)
            if judging is not None:
                marks.append(judging.after(moved))
            success |= moved.terminated
            ended = moved.terminated | moved.truncated
            worth = ((policy.value(obs), policy.value(env.observe())) if values
                     else (obs.new_zeros(len(obs)),) * 2)
            steps.append((obs, actions, dist.log_prob(actions), moved.reward,
                          moved.active.float(), anchors, dist.entropy(), moved.terminated,
                          ended, state, *worth))
    (obs, actions, log_probs, rewards, mask, anchors, entropy, terminated, dones, states, now,
     after) = (torch.stack(x, dim=1) for x in zip(*steps, strict=True))
    episodes = Episodes(obs, actions, log_probs, rewards, mask, anchors, entropy, success,
                        mask.sum(dim=1).long(), terminated, dones, states)
    if values:
        episodes.values = torch.cat([now, after[:, -1:]], dim=1)
        episodes.next_values = after
    if judging is not None:
        episodes.rubric, episodes.rubric_weights = torch.stack(marks, dim=1), judging.weights()
    return episodes


def continuation_returns(env: AgentEnv, states: torch.Tensor, n: int, policy: Policy,
                         generator: torch.Generator) -> tuple[torch.Tensor, int]:
    """(K,) the mean return of ``n`` rollouts of ``policy`` from each of the K ``states``, and
    the environment steps they took; ``env`` has K * n rows, row k * n + j playing the
    instance of state k (it is restored there)."""
    env.set_state(states.repeat_interleave(n, dim=0))
    total = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
    steps = 0
    with torch.no_grad():
        while not bool(env.done.all()):
            probs = policy.distribution(env.observe()).probs
            moved = env.step(torch.multinomial(probs, 1, generator=generator).squeeze(1))
            total += moved.reward.double()
            steps += int(moved.active.sum())
    return total.view(-1, n).mean(dim=1), steps


def mc_values_of(method: AdvantageMethod, episodes: Episodes, groups: torch.Tensor,
                 instances: Sequence[Instance], instance_ids: Sequence[int], policy: Policy,
                 generator: torch.Generator, *, max_steps: int, device: torch.device,
                 make_env: EnvFactory) -> tuple[torch.Tensor, int]:
    """``mc_values`` for ``method`` on ``episodes`` and the environment steps they took: each
    state its ``value_request`` names (``families.monte_carlo_values``) restored from
    ``episodes.states`` and played on ``continuations`` times by ``policy``, actions from
    ``generator`` (``continuation_returns``). Row r plays ``instances[groups[r]]``, named
    ``instance_ids[groups[r]]``. The training loop's and ``workbench credit``'s."""
    group_of = groups.tolist()

    def estimate(rows: torch.Tensor, columns: torch.Tensor, n: int) -> tuple[torch.Tensor, int]:
        picked = [group_of[row] for row in rows.tolist() for _ in range(n)]
        branch = make_env([instances[i] for i in picked], max_steps, device,
                          instance_ids=[instance_ids[i] for i in picked])
        return continuation_returns(branch, episodes.states[rows, columns], n, policy,
                                    generator)

    return monte_carlo_values(method, mask=episodes.mask, old_log_probs=episodes.log_probs,
                              estimate=estimate)
