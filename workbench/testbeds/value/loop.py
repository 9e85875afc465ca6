"""The DQN training loop: epsilon-greedy steps of N batched environments into a uniform replay
buffer, one TD update of the Q-network every ``train_frequency`` environment steps, a target
network refreshed every ``target_network_frequency`` environment steps (CleanRL's ``dqn.py``
layout, with the family slots plugged in; the pieces are in ``workbench.testbeds.value.dqn``).

Per environment step (all N environments at once):

1. epsilon = ``epsilon_at(env steps so far)``, decaying over ``exploration_steps`` environment
   steps (default: ``exploration_fraction`` of the planned environment steps); act
   epsilon-greedily; store the N transitions (s, a, r, s', terminated);
2. updates: after e environment steps, floor((e - ``learning_starts``) / ``train_frequency``)
   updates have run (several per step when N exceeds ``train_frequency``); each:
   a. draw a replay batch of b transitions uniformly, b the batch-size slot's size (clamped
      to [1, ``buffer_size``]: the slot's ``n_samples`` is the buffer's capacity);
   b. y = ``td_target`` (double DQN with ``double_dqn``), computed once, before the step;
      with ``target`` ``n_step`` or ``retrace``, ``multi_step_target`` on the drawn
      transitions and the ``n_steps`` - 1 that followed each (``sample_sequences``; the
      behaviour probabilities stored at acting time, ``act_with_probs``);
   c. one optimizer step of the step-size slot on L = ``td_loss(Q(s, a), y)``
      (``families.minibatch_step``: gradients clipped to ``max_grad_norm`` if set); the loss
      is a fixed function of the parameters on the batch, so a line search may re-evaluate it;
   d. log the update's metrics; the batch-size slot answers the next b from the step's
      statistics (``loss`` = L, ``grad_sq``, ``batch_size`` = b, ``samples`` = transitions
      replayed so far);
3. every ``target_network_frequency`` environment steps after ``learning_starts`` (checked
   after each environment step), ``update_target`` with ``tau``.

Slots: ``step_size`` (the Q-network's optimizer) and ``batch_size`` (the replay batch size),
opened by ``families.open_update_slots``; DQN has no entropy or advantage slot. The logged
step is the update (``budget.steps`` counts updates); ``budget.samples`` counts environment
steps (``cost/env_steps``, as in the control testbed) and ``budget.wall_seconds`` the loop's
own time (logging excluded). A non-finite TD loss or parameter stops the run as diverged.
"""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field, model_validator

from workbench.common import seeds
from workbench.families import minibatch_step, open_update_slots
from workbench.testbeds.settings import Settings
from workbench.testbeds.value.dqn import (
    QNetwork,
    ReplayBuffer,
    act,
    act_with_probs,
    epsilon_at,
    multi_step_target,
    td_loss,
    td_target,
    update_target,
)

if TYPE_CHECKING:
    from workbench.common.budget import Budget, LogFn
    from workbench.testbeds.envs import BatchedEnv

RECENT_EPISODES = 100


class DQNSettings(Settings):
    """The loop's knobs; defaults are CleanRL's ``dqn.py`` (CartPole) where it has one."""

    num_envs: int = Field(1, ge=1, le=65_536, description="N environments stepped together")
    buffer_size: int = Field(10_000, ge=1, le=100_000_000, description="replay capacity")
    batch_size: int = Field(128, ge=1, le=1_000_000, description="replay batch size b: the "
                            "batch-size slot's base size")
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    learning_starts: int = Field(10_000, ge=0, description="environment steps (transitions) "
                                 "before the first update")
    train_frequency: int = Field(10, ge=1, description="environment steps per update")
    target_network_frequency: int = Field(500, ge=1, description="environment steps between "
                                          "target-network updates")
    tau: float = Field(1.0, gt=0.0, le=1.0, description="target update rate: 1 copies "
                       "(hard), below 1 Polyak averaging")
    start_e: float = Field(1.0, ge=0.0, le=1.0)
    end_e: float = Field(0.05, ge=0.0, le=1.0)
    exploration_fraction: float = Field(0.5, ge=0.0, le=1.0, description="fraction of the "
                                        "planned environment steps over which epsilon decays")
    exploration_steps: int | None = Field(None, ge=0, description="environment steps over "
                                          "which epsilon decays (None: exploration_fraction "
                                          "of the planned steps)")
    loss: Literal["mse", "huber"] = "mse"
    huber_delta: float = Field(1.0, gt=0.0)
    double_dqn: bool = False
    max_grad_norm: float | None = Field(None, gt=0.0)
    target: Literal["one_step", "n_step", "retrace"] = Field(
        "one_step", description="TD target: one_step (DQN's), n_step (uncorrected n-step "
        "return) or retrace (Retrace(lambda), pi greedy w.r.t. the target network)")
    n_steps: int = Field(3, ge=1, le=1000, description="steps of the n_step and retrace "
                         "targets")
    retrace_lambda: float = Field(1.0, ge=0.0, le=1.0, description="Retrace's lambda in "
                                  "c = lambda min(1, pi / mu)")

    @model_validator(mode="after")
    def _epsilon_decays(self):
        if self.end_e > self.start_e:
            raise ValueError(f"end_e ({self.end_e}) must be at most start_e ({self.start_e})")
        if self.target == "retrace" and self.double_dqn:
            raise ValueError("double_dqn is not defined for target: retrace (pi is the target "
                             "network's greedy policy)")
        return self


def planned_env_steps(settings: DQNSettings, budget: Budget) -> int:
    """The environment steps the budget allows: its sample limit, else those its updates
    take (learning_starts, then train_frequency per update)."""
    if budget.samples is not None:
        return budget.samples
    return settings.learning_starts + budget.steps * settings.train_frequency


def planned_updates(settings: DQNSettings, budget: Budget) -> int:
    """The updates the budget allows: the horizon step-size schedules use."""
    learning = planned_env_steps(settings, budget) - settings.learning_starts
    return max(1, min(budget.steps, learning // settings.train_frequency))


def train(env: BatchedEnv, q_net: QNetwork, methods: Mapping[str, Any], settings: DQNSettings,
          *, budget: Budget, seed: int, log: LogFn) -> dict[str, Any]:
    device, n = env.device, env.num_envs
    target = copy.deepcopy(q_net).requires_grad_(False)
    params = list(q_net.parameters())
    slots = open_update_slots(methods, params, updates=planned_updates(settings, budget),
                              per_update=1, batch=settings.batch_size,
                              samples=settings.buffer_size)
    optimizer, batch_slot = slots.optimizer, slots.batch
    batch_size = slots.first_batch or settings.batch_size
    duration = (settings.exploration_steps if settings.exploration_steps is not None
                else settings.exploration_fraction * planned_env_steps(settings, budget))
    buffer = ReplayBuffer(settings.buffer_size, env.obs_dim, device=device, dtype=env.dtype)
    action_draws = seeds.torch_generator(seed, "actions", device=device)
    replay_draws = seeds.torch_generator(seed, "replay", device=device)

    obs = env.reset(seed=seeds.int_seed(seed, "env"))
    env_steps, update, replayed, seconds, diverged = 0, 0, 0, 0.0, False
    since_target = 0  # env steps since the last target update (once learning started)
    ended: list[float] = []  # returns of the episodes ended since the last logged update
    lengths: list[float] = []
    recent: deque[float] = deque(maxlen=RECENT_EPISODES)
    metrics: dict[str, float] = {}
    started = time.perf_counter()
    while update < budget.steps and not diverged:
        # 1. act epsilon-greedily, store the transitions
        epsilon = epsilon_at(env_steps, start_e=settings.start_e, end_e=settings.end_e,
                             duration=duration)
        if settings.target == "one_step":
            actions = act(q_net, obs, epsilon, action_draws)
            step = env.step(actions)
            buffer.add(obs, actions, step.reward, step.final_obs, step.terminated)
        else:
            actions, probs = act_with_probs(q_net, obs, epsilon, action_draws)
            step = env.step(actions)
            buffer.add(obs, actions, step.reward, step.final_obs, step.terminated,
                       truncated=step.truncated, behaviour_probs=probs)
        obs = step.obs
        env_steps += n
        done = ~torch.isnan(step.episode_return)
        if bool(done.any()):
            ended.extend(step.episode_return[done].tolist())
            lengths.extend(step.episode_length[done].tolist())
            recent.extend(step.episode_return[done].tolist())
        learned = env_steps - settings.learning_starts  # env steps since learning started
        if learned < 0:
            if budget.spent(env_steps, seconds + time.perf_counter() - started):
                break
            continue
        # 2. updates: after e env steps, floor((e - learning_starts) / train_frequency) in all
        while update < min(budget.steps, learned // settings.train_frequency):
            stats = _update(q_net, target, optimizer, buffer, batch_size, settings,
                            replay_draws, params)
            update += 1
            replayed += batch_size
            seconds += time.perf_counter() - started
            metrics = {
                **stats, "train/epsilon": epsilon, "batch/size": float(batch_size),
                **batch_slot.diagnostics(),
                "cost/env_steps": float(env_steps), "cost/samples": float(env_steps),
                "cost/updates": float(update), "time/wall_seconds": seconds,
                "time/env_steps_per_second": env_steps / seconds if seconds > 0 else math.nan,
            }
            if ended:
                metrics.update({"train/return": sum(ended) / len(ended),
                                "train/episode_length": sum(lengths) / len(lengths),
                                "train/episodes": float(len(ended))})
                ended, lengths = [], []
            if recent:
                metrics["train/return_recent"] = sum(recent) / len(recent)
            log(update, metrics)
            started = time.perf_counter()
            if not (math.isfinite(stats["train/td_loss"])
                    and all(bool(torch.isfinite(p).all()) for p in params)):
                diverged = True
                break
            wanted = batch_slot.after_step(
                update, loss=stats["train/td_loss"], grad_sq=stats["train/grad_norm"] ** 2,
                batch_size=batch_size, samples=replayed)
            if wanted is not None:
                batch_size = wanted
        # 3. target network
        since_target += min(n, learned)
        if since_target >= settings.target_network_frequency:
            since_target %= settings.target_network_frequency
            update_target(target, q_net, settings.tau)
        if budget.spent(env_steps, seconds + time.perf_counter() - started):
            break
    return {**metrics, "steps": update, "diverged": diverged, "env_steps": env_steps,
            "device": str(device)}


def _update(q_net: QNetwork, target: QNetwork, optimizer: torch.optim.Optimizer,
            buffer: ReplayBuffer, batch_size: int, settings: DQNSettings,
            generator: torch.Generator, params: list[torch.Tensor]) -> dict[str, float]:
    """One TD update on a replay batch of ``batch_size`` (steps 2a-2c)."""
    online = q_net if settings.double_dqn else None
    if settings.target == "one_step":
        obs, actions, rewards, next_obs, terminated = buffer.sample(batch_size, generator)
        y = td_target(rewards, next_obs, terminated, gamma=settings.gamma, target=target,
                      online=online)
    else:  # the same draw, each transition with the n_steps - 1 that followed it
        batch = buffer.sample_sequences(batch_size, settings.n_steps, generator)
        obs, actions = batch["obs"][:, 0], batch["actions"][:, 0]
        y = multi_step_target(batch, kind=settings.target, gamma=settings.gamma,
                              target=target, online=online, lam=settings.retrace_lambda)

    def loss() -> tuple[torch.Tensor, dict[str, float]]:
        q = q_net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        value = td_loss(q, y, settings.loss, settings.huber_delta)
        return value, {"train/td_loss": float(value.detach()),
                       "train/q_mean": float(q.detach().mean())}

    return minibatch_step(optimizer, loss, params=params, max_grad_norm=settings.max_grad_norm)
