"""Collect a rollout of T steps from N batched environments with the current policy.

Stored per step t (tensors of shape (T, N, ...)): the observation o_t, the action a_t, its
log-probability under the acting policy, the policy's entropy at o_t, V(o_t), the reward r_t,
``dones`` (the episode ended at t: terminated or truncated), ``terminated`` and ``next_values``:
V of the state actually reached after step t, which at a truncation is the value of the final
observation (the environment has already reset), so advantage estimators bootstrap from it
there and not from the reset state. ``last_value`` is V(o_T), the state after the rollout.

``advantage_batch`` fills the advantage family's ``AdvantageBatch`` from these in its (B = N, T)
layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from workbench.families import AdvantageBatch
from workbench.testbeds.control.policy import ActorCritic, SeedAxisActorCritic
from workbench.testbeds.envs import BatchedEnv
from workbench.testbeds.shared.advantage_batch import CONTROL_INPUTS, control_batch

#: the advantage-method inputs ``Rollout.advantage_batch`` fills (the task's ``provides``)
ADVANTAGE_INPUTS = CONTROL_INPUTS


@dataclass
class Rollout:
    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    terminated: torch.Tensor
    next_values: torch.Tensor
    last_value: torch.Tensor
    episode_returns: torch.Tensor  # returns of the episodes that ended in this rollout
    episode_lengths: torch.Tensor
    episode_envs: torch.Tensor | None = None  # the environment (column) of each
    # the learner's log-probabilities of the actions, where an older policy acted
    # (``policy_lag``); None: the learner acted, they are ``log_probs``
    target_log_probs: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.rewards.numel()

    def advantage_batch(self) -> AdvantageBatch:
        """The advantage family's inputs (``control_batch``): rows = environments, (N, T)."""
        target = self.log_probs if self.target_log_probs is None else self.target_log_probs
        return control_batch(self.rewards, self.values, self.last_value, self.dones,
                             self.terminated, self.next_values, self.log_probs, target)

    def as_advantage_inputs(self) -> dict[str, torch.Tensor]:
        """``advantage_batch()`` as a dict of every input it fills."""
        return self.advantage_batch().inputs(ADVANTAGE_INPUTS)

    def seed(self, s: int, n: int) -> Rollout:
        """Seed s's rollout on a seed axis of blocks of ``n`` environments: its columns and
        its episodes, in the order its own run collects them."""
        cols = slice(s * n, (s + 1) * n)
        ended = (self.episode_envs // n) == s
        return Rollout(
            obs=self.obs[:, cols], actions=self.actions[:, cols],
            log_probs=self.log_probs[:, cols], entropy=self.entropy[:, cols],
            values=self.values[:, cols], rewards=self.rewards[:, cols],
            dones=self.dones[:, cols], terminated=self.terminated[:, cols],
            next_values=self.next_values[:, cols], last_value=self.last_value[cols],
            episode_returns=self.episode_returns[ended],
            episode_lengths=self.episode_lengths[ended],
            target_log_probs=None if self.target_log_probs is None
            else self.target_log_probs[:, cols])

    def episode_stats(self) -> dict[str, float]:
        if self.episode_returns.numel() == 0:
            return {}
        return {"train/return": float(self.episode_returns.mean()),
                "train/episode_length": float(self.episode_lengths.mean()),
                "train/episodes": float(self.episode_returns.numel())}


@torch.no_grad()
def collect(env: BatchedEnv, agent: ActorCritic, obs: torch.Tensor, horizon: int,
            generator: torch.Generator | None = None, by_index: bool | None = None,
            behaviour: ActorCritic | None = None) -> tuple[Rollout, torch.Tensor]:
    """Run ``horizon`` steps from ``obs``, actions drawn with ``generator`` (None: torch's
    global RNG); returns the rollout and the observation after it. ``by_index``: see
    ``_collect``. ``behaviour``: the policy that acts (its log-probabilities and entropies
    are stored) where it is not ``agent``, whose critic still gives every value."""
    actor = agent if behaviour is None else behaviour
    return _collect(env, obs, horizon, lambda o: actor.sample(o, generator), agent.value,
                    lambda final, cut: agent.value(final[cut]), by_index)


@torch.no_grad()
def collect_seeds(env: BatchedEnv, agent: SeedAxisActorCritic, obs: torch.Tensor,
                  horizon: int, generators: list[torch.Generator],
                  live: list[bool], by_index: bool | None = None,
                  behaviour: SeedAxisActorCritic | None = None) -> tuple[Rollout, torch.Tensor]:
    """``collect`` for the S seeds of a trial at once: ``env`` holds S blocks of N
    environments (``TorchEnv``'s ``streams``), block s acts with seed s's network and draws
    with ``generators[s]``; the rollout has S * N columns (``Rollout.seed`` cuts seed s's).
    ``behaviour``: the seeds' networks that act, where they are not ``agent``'s (whose
    critics still give every value), as ``collect``'s."""
    seeds = agent.seeds
    actor = agent if behaviour is None else behaviour

    def by_seed(o: torch.Tensor) -> torch.Tensor:
        return o.view(seeds, o.shape[0] // seeds, -1)

    def act(o):
        return tuple(t.flatten(0, 1) for t in actor.sample(by_seed(o), generators, live))

    def value(o):
        return agent.value(by_seed(o)).flatten()

    # each row's value from its own seed's network: all rows, then the truncated ones
    return _collect(env, obs, horizon, act, value, lambda final, cut: value(final)[cut],
                    by_index)


def _collect(env: BatchedEnv, obs: torch.Tensor, horizon: int, act, value,
             final_value, by_index: bool | None = None) -> tuple[Rollout, torch.Tensor]:
    """The rollout of ``horizon`` steps: ``act(obs)`` gives (action, log-probability,
    entropy) per row, ``value(obs)`` V per row, ``final_value(final_obs, rows)`` V of the
    truncated rows' final observations.

    No step waits on the host: each step's episode statistics are kept whole (NaN where no
    episode ended) and the ended episodes are picked out once, after the last step.
    ``by_index`` (default: on the CPU) bootstraps a truncation from V of the truncated rows
    alone, found with ``nonzero`` (free on the CPU); otherwise (CUDA) V of every row's final
    observation is computed and selected with ``torch.where``, one more forward pass per
    step instead of two device-to-host synchronisations.
    """
    n, dtype, device = env.num_envs, obs.dtype, obs.device
    if by_index is None:
        by_index = device.type == "cpu"
    obs_buf = torch.empty((horizon, *obs.shape), dtype=dtype, device=device)
    act_buf = None
    floats = {k: torch.empty((horizon, n), dtype=dtype, device=device)
              for k in ("log_probs", "entropy", "values", "rewards", "next_values")}
    dones = torch.empty((horizon, n), dtype=torch.bool, device=device)
    terminated = torch.empty_like(dones)
    ep_stats = torch.empty((2, horizon, n), dtype=dtype, device=device)  # return, length
    truncated = None if by_index else torch.empty_like(dones)
    final_values = None if by_index else torch.empty((horizon, n), dtype=dtype, device=device)
    truncations = []
    for t in range(horizon):
        obs_buf[t] = obs
        action, log_prob, entropy = act(obs)
        if act_buf is None:
            act_buf = torch.empty((horizon, *action.shape), dtype=action.dtype, device=device)
        act_buf[t] = action
        floats["log_probs"][t] = log_prob
        floats["entropy"][t] = entropy
        floats["values"][t] = value(obs)
        step = env.step(action)
        floats["rewards"][t] = step.reward
        torch.logical_or(step.terminated, step.truncated, out=dones[t])
        terminated[t] = step.terminated
        ep_stats[0, t] = step.episode_return
        ep_stats[1, t] = step.episode_length
        # bootstrap a truncation from the final observation, not from the reset one
        if by_index:
            cut = step.truncated.nonzero().squeeze(-1)
            if cut.numel():
                truncations.append((t, cut, final_value(step.final_obs, cut)))
        else:
            truncated[t] = step.truncated
            final_values[t] = value(step.final_obs)
        obs = step.obs
    last_value = value(obs)
    next_values = floats["next_values"]
    next_values[:-1] = floats["values"][1:]
    next_values[-1] = last_value
    for t, cut, final in truncations:
        next_values[t, cut] = final
    if not by_index:
        torch.where(truncated, final_values, next_values, out=next_values)
    # the episodes that ended, in step order then environment order (one sync, here)
    steps, envs = dones.nonzero().unbind(1)
    episode_returns, episode_lengths = ep_stats[:, steps, envs]
    rollout = Rollout(
        obs=obs_buf, actions=act_buf, dones=dones, terminated=terminated, last_value=last_value,
        episode_returns=episode_returns, episode_lengths=episode_lengths, episode_envs=envs,
        **floats)
    return rollout, obs


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var[target - predicted] / Var[target] (NaN when the target is constant)."""
    var = float(target.var())
    return math.nan if var == 0 else 1.0 - float((target - predicted).var()) / var
