"""The control loop on a seed axis: the S seeds of a trial as one computation.

Each seed keeps what it has in ``loop.train``: its own N environments (a block of the
S * N-row environment, reset from its own stream), its own network (``SeedAxisActorCritic``:
parameters stacked on a leading seed axis, every layer a batched matrix product), its own
action and minibatch streams, advantages computed on its own rollout (the advantage method
called once per seed, so every normalisation is the seed's own; once on all rows for a method
that declares ``row_independent``), its own entropy method
instance, its own gradient clipping (the norm over its own parameters), its own counters and
stopping, and with ``policy_lag`` = k its own lagged copy (``LaggedSeedPolicy``: the
seed's parameters of k updates before act, its current critic gives the values, the learner's
log-probabilities and ``train/ess`` are each seed's own). The loss of each seed is the
sequential loop's formula (``ppo.minibatch_loss``, ``reinforce.reinforce_loss``) on that
seed's rows of one batched forward pass; the S losses
are summed for one backward pass (a seed's loss reaches only its own parameters) and one
optimizer built on the seed axis steps all seeds. A seed whose loss stops being finite stops
(its parameters are frozen, its environments step with action 0, its metrics end) while the
others go on. The batch-size slot takes only schedules (``vectorised`` batch methods).

``time/wall_seconds`` is each seed's share of the batch's time (the batch's time / S), so
``time/env_steps_per_second`` is the throughput of all S seeds together.
Each optimizer step is ``families.policy_step_seeds`` (the sequential loops' ``policy_step``
on the seed axis; this module supplies only the S losses): step-size methods that ``observe``
RL statistics (``rl_stats``) get each seed's own after every optimizer step (a (S,) tensor
each; the step-size family's seed-axis contract).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from workbench.common import seeds as seed_streams
from workbench.families import (
    EntropySlot,
    LossAdjustment,
    adjust_per_seed,
    compute_advantages,
    mean_over_steps,
    minibatch_epochs,
    open_rl_seed_slots,
    policy_step_seeds,
)
from workbench.testbeds.control.loop import (
    RECENT_EPISODES,
    LoopSettings,
    _reshape,
    finite_per_seed,
    minibatch_settings,
    reads_the_learner,
    rollout_ess,
    update_metrics,
)
from workbench.testbeds.control.policy import SeedAxisActorCritic
from workbench.testbeds.control.ppo import PPOSettings, autocast, minibatch_loss, standardise
from workbench.testbeds.control.reinforce import reinforce_loss
from workbench.testbeds.control.rollout import Rollout, collect_seeds
from workbench.testbeds.envs import TorchEnv
from workbench.testbeds.shared.losses import approx_kl

if TYPE_CHECKING:
    from workbench.common.budget import Budget, SeedsLogFn


class LaggedSeedPolicy:
    """``loop.LaggedPolicy`` on a seed axis: a frozen copy of the S seeds' networks loaded, at
    each ``step()`` (once per update, before the rollout), with each seed's parameters as
    they were ``lag`` updates before (the initial ones during the first ``lag`` updates)."""

    def __init__(self, agent: SeedAxisActorCritic, lag: int):
        self.agent = agent
        self.copy = agent.frozen_copy()
        self.snapshots: deque[list[torch.Tensor]] = deque(maxlen=lag + 1)

    def step(self) -> SeedAxisActorCritic:
        """Record the current parameters; the copy with those of ``lag`` updates ago."""
        self.snapshots.append(self.agent.snapshot())
        self.copy.load(self.snapshots[0])
        return self.copy


@torch.no_grad()
def learner_log_probs_seeds(agent: SeedAxisActorCritic, rollout: Rollout) -> torch.Tensor:
    """(T, S * N): ``loop.learner_log_probs`` of each seed's columns under its own network,
    in one batched forward pass."""
    horizon, columns = rollout.log_probs.shape
    seeds = agent.seeds
    n = columns // seeds

    def by_seed(t: torch.Tensor) -> torch.Tensor:  # (T, S * N, ...) -> (S, T * N, ...)
        return t.reshape(horizon, seeds, n, *t.shape[2:]).transpose(0, 1).flatten(1, 2)

    log_probs, _ = agent.evaluate(by_seed(rollout.obs), by_seed(rollout.actions))
    return log_probs.reshape(seeds, horizon, n).transpose(0, 1).reshape(horizon, columns)


def train_seeds(env: TorchEnv, agent: SeedAxisActorCritic, methods: Mapping[str, Any],
                settings: LoopSettings, *, budget: Budget, seeds: Sequence[int],
                log: SeedsLogFn) -> list[dict[str, Any]]:
    """``loop.train`` for seeds ``seeds`` at once (``env.streams`` = S blocks, seed s's
    block and network s); each seed's final metrics."""
    n_seeds, device = len(seeds), env.device
    ess = torch.ones(n_seeds, dtype=torch.float64)  # each seed's ESS_hat: 1 on-policy
    num_envs, horizon = settings.num_envs, settings.rollout_len
    total_updates = budget.planned_steps(num_envs * horizon)
    ppo = settings.ppo
    per_update = ppo.epochs * ppo.minibatches if settings.algorithm == "ppo" else 1
    slots = open_rl_seed_slots(methods, agent.parameters, seeds=n_seeds, updates=total_updates,
                               per_update=per_update, batch=num_envs * horizon,
                               samples=budget.samples,
                               info={"return_upper_bound": env.return_upper_bound},
                               on_axis={"importance_ess": lambda: ess})
    optimizer, entropy_slots, batch_slot = slots.optimizer, slots.entropy, slots.batch
    if slots.first_batch is not None:
        num_envs, horizon = _reshape(slots.first_batch, num_envs, horizon, settings.batch_axis)
    minibatch_orders = [seed_streams.torch_generator(s, "minibatches") for s in seeds]
    action_draws = [seed_streams.torch_generator(s, "actions", device=device) for s in seeds]

    behaviour = LaggedSeedPolicy(agent, settings.policy_lag) if settings.policy_lag else None
    learner_needed = reads_the_learner(methods, slots.advantage_inputs)
    if num_envs * n_seeds != env.num_envs:
        env.resize(num_envs * n_seeds)
    obs = env.reset(seed=[seed_streams.int_seed(s, "env") for s in seeds])
    live = [True] * n_seeds
    env_steps, seconds = 0, 0.0
    recent: list[deque[float]] = [deque(maxlen=RECENT_EPISODES) for _ in seeds]
    latest_return = [math.nan] * n_seeds
    finals: list[dict[str, Any] | None] = [None] * n_seeds
    update = 0
    while update < budget.steps:
        started = time.perf_counter()
        if num_envs * n_seeds != env.num_envs:
            obs = env.resize(num_envs * n_seeds)
        agent.freeze(torch.tensor(live, device=device))
        if behaviour is None:
            rollout, obs = collect_seeds(env, agent, obs, horizon, action_draws, live)
        else:
            rollout, obs = collect_seeds(env, agent, obs, horizon, action_draws, live,
                                         behaviour=behaviour.step())
            if learner_needed:
                rollout.target_log_probs = learner_log_probs_seeds(agent, rollout)
        env_steps += rollout.size // n_seeds
        own = [rollout.seed(s, num_envs) for s in range(n_seeds)]
        seed_ess = [1.0 if behaviour is None else rollout_ess(r) if alive else 1.0
                    for r, alive in zip(own, live, strict=True)]
        ess.copy_(torch.tensor(seed_ess, dtype=torch.float64).nan_to_num(1.0))
        episodes = [r.episode_stats() for r in own]
        for s, r in enumerate(own):
            if live[s] and episodes[s]:
                latest_return[s] = episodes[s]["train/return"]
                recent[s].extend(r.episode_returns.tolist())
        advantages, returns = _advantages(slots.advantage, slots.advantage_inputs, rollout,
                                          own, live)
        rollout_entropy = [float(r.entropy.mean()) for r in own]
        coefs = [entropy_slots[s].coefficient(update, rollout_entropy[s]) if live[s] else 0.0
                 for s in range(n_seeds)]
        cut = minibatch_settings(ppo, batch_slot, own[0].size)
        update_args = (agent, optimizer, own, advantages, returns, coefs, entropy_slots, cut,
                       live, update, latest_return)
        if settings.algorithm == "ppo":
            stats = ppo_update_seeds(*update_args, minibatch_orders)
        else:
            stats = reinforce_update_seeds(*update_args)
        seconds += time.perf_counter() - started
        update += 1

        share = seconds / n_seeds
        shown: list[dict[str, float] | None] = [None] * n_seeds
        for s in range(n_seeds):
            if not live[s]:
                continue
            shown[s] = update_metrics(
                own[s], episodes[s], stats[s], advantages[s], returns[s],
                rollout_entropy=rollout_entropy[s], entropy_coef=coefs[s], num_envs=num_envs,
                horizon=horizon, env_steps=env_steps, update=update, seconds=share,
                recent=recent[s],
                minibatches=cut.minibatches if settings.algorithm == "ppo" else None,
                ess=seed_ess[s])
        log(update, shown)
        spent = budget.spent(env_steps, share)
        finite = finite_per_seed(agent.parameters, seeds=n_seeds).tolist()
        for s, metrics in enumerate(shown):
            if metrics is None:
                continue
            diverged = not (math.isfinite(metrics.get("train/policy_loss", 0.0))
                            and math.isfinite(metrics.get("train/value_loss", 0.0))
                            and finite[s])
            if diverged or spent or update == budget.steps:
                finals[s] = {**metrics, "steps": update, "diverged": diverged,
                             "env_steps": env_steps, "device": str(device)}
                live[s] = False
        if not any(live):
            break
        first = shown[live.index(True)]
        wanted = batch_slot.after_step(  # a schedule: its sizes never read a seed's statistics
            update, loss=first.get("train/policy_loss", math.nan),
            grad_sq=first.get("train/grad_norm", math.nan) ** 2,
            batch_size=own[0].size, samples=env_steps)
        if wanted is not None:
            num_envs, horizon = _reshape(wanted, num_envs, horizon, settings.batch_axis)
    return finals


def _advantages(method, wanted: frozenset[str], rollout: Rollout, own: list[Rollout],
                live: list[bool]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each live seed's (A, R) in its rollout's (T, N) layout (zeros for a stopped seed): one
    call on the S * N rows of all seeds for a method that declares ``row_independent``, else
    one call per seed on its own rows."""
    if "row_independent" in method.invariants:
        # (T, S * N) each
        folded = [t.T for t in compute_advantages(method, rollout.advantage_batch(), wanted)]
        n = own[0].rewards.shape[1]
        pairs = [[t[:, s * n:(s + 1) * n] if alive else torch.zeros_like(t[:, :n])
                  for t in folded] for s, alive in enumerate(live)]
        return [a for a, _ in pairs], [r for _, r in pairs]
    advantages, returns = [], []
    for r, alive in zip(own, live, strict=True):
        if alive:
            a, ret = (t.T for t in compute_advantages(method, r.advantage_batch(), wanted))
        else:
            a = ret = torch.zeros_like(r.rewards)
        advantages.append(a)
        returns.append(ret)
    return advantages, returns


def _by_seed(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Each seed's (T, N, ...) tensor flattened to its T * N rows, stacked: (S, T * N, ...)."""
    return torch.stack([t.flatten(0, 1) for t in tensors])


def _asked(live: list[bool], active: torch.Tensor | None) -> list[bool]:
    """The seeds whose loss an evaluation asks for: live ones, and of those only the ones
    in a line search's ``active`` mask (a stateful entropy hook, e.g. one that draws tokens at
    random, is called exactly as often as in the seed's own run)."""
    if active is None:
        return live
    return [alive and asked for alive, asked in zip(live, active.tolist(), strict=True)]


def _adjusted(slots: list[EntropySlot], live: list[bool], log_probs: torch.Tensor,
              old_log_probs: torch.Tensor, adv: torch.Tensor, entropy: torch.Tensor,
              clip: float) -> tuple[LossAdjustment, list[dict[str, float]]]:
    """Each seed's entropy hook on its (M, 1) rows, stacked (``adjust_per_seed``)."""
    row = (*log_probs.shape, 1)
    return adjust_per_seed(slots, live, log_probs=log_probs.view(row),
                           old_log_probs=old_log_probs.view(row), advantages=adv.view(row),
                           mask=torch.ones_like(adv).view(row), entropy=entropy.view(row),
                           clip=clip)


def _per_seed(parts: dict[str, list[float]],
              hook_metrics: list[dict[str, float]]) -> list[dict[str, float]]:
    """The loss's metrics (S values each) and the hooks' as one dict per seed."""
    return [{**{k: v[s] for k, v in parts.items()}, **hook_metrics[s]}
            for s in range(len(hook_metrics))]


def ppo_update_seeds(agent: SeedAxisActorCritic, optimizer: torch.optim.Optimizer,
                     own: list[Rollout], advantages: list[torch.Tensor],
                     returns: list[torch.Tensor], coefs: list[float],
                     entropy_slots: list[EntropySlot], settings: PPOSettings, live: list[bool],
                     update: int, episodic_returns: list[float],
                     generators: list[torch.Generator]) -> list[dict[str, float]]:
    """``ppo.ppo_update`` for every seed: seed s's minibatches drawn with ``generators[s]``,
    its advantages standardised over its own batch or minibatch; each seed's metrics."""
    n_seeds = len(own)
    obs, actions = _by_seed([r.obs for r in own]), _by_seed([r.actions for r in own])
    old_log_probs, old_values = _by_seed([r.log_probs for r in own]), _by_seed(
        [r.values for r in own])
    adv, ret = _by_seed(advantages), _by_seed(returns)
    if settings.advantage_norm == "batch":
        adv = torch.stack([standardise(a) for a in adv])
    seed_rows = torch.arange(n_seeds, device=adv.device)[:, None]
    coef = torch.tensor(coefs, dtype=adv.dtype, device=adv.device)
    alive = torch.tensor(live, device=adv.device)
    per_step: list[list[dict[str, float]]] = [[] for _ in range(n_seeds)]
    orders = [minibatch_epochs(adv.shape[1], epochs=settings.epochs,
                               minibatches=settings.minibatches, generator=g,
                               device=adv.device) for g in generators]
    for picks in zip(*orders, strict=True):
        idx = torch.stack(picks)
        mb_adv = adv[seed_rows, idx]
        if settings.advantage_norm == "minibatch" and idx.shape[1] > 1:
            mb_adv = torch.stack([standardise(a) for a in mb_adv])
        mb = [t[seed_rows, idx] for t in (obs, actions, old_log_probs, old_values, ret)]

        def loss(active: torch.Tensor | None, mb=mb, mb_adv=mb_adv):
            mb_obs, mb_actions, mb_old_lp, mb_old_v, mb_ret = mb
            with autocast(settings.precision, mb_obs.device):
                log_probs, entropy = agent.evaluate(mb_obs, mb_actions)
                adjusted, hook_metrics = _adjusted(entropy_slots, _asked(live, active),
                                                   log_probs, mb_old_lp, mb_adv, entropy,
                                                   settings.clip)
                value, parts = minibatch_loss(log_probs, entropy, agent.value(mb_obs),
                                              mb_old_lp, mb_old_v, mb_adv, mb_ret, coef,
                                              adjusted, settings)
                value = torch.where(alive, value, torch.zeros_like(value))
            return value, _per_seed(parts, hook_metrics)

        stats = policy_step_seeds(optimizer, loss, params=agent.parameters,
                                  max_grad_norm=settings.max_grad_norm, seeds=n_seeds,
                                  update=update, episodic_returns=episodic_returns)
        for s in range(n_seeds):
            if live[s]:
                per_step[s].append(stats[s])
    return [mean_over_steps(steps) if steps else {} for steps in per_step]


def reinforce_update_seeds(agent: SeedAxisActorCritic, optimizer: torch.optim.Optimizer,
                           own: list[Rollout], advantages: list[torch.Tensor],
                           returns: list[torch.Tensor], coefs: list[float],
                           entropy_slots: list[EntropySlot], settings: PPOSettings,
                           live: list[bool], update: int,
                           episodic_returns: list[float]) -> list[dict[str, float]]:
    """``reinforce.reinforce_update`` for every seed; each seed's metrics."""
    n_seeds = len(own)
    obs, actions = _by_seed([r.obs for r in own]), _by_seed([r.actions for r in own])
    old_log_probs = _by_seed([r.log_probs for r in own])
    adv, ret = _by_seed(advantages), _by_seed(returns)
    if settings.advantage_norm != "none":
        adv = torch.stack([standardise(a) for a in adv])
    coef = torch.tensor(coefs, dtype=adv.dtype, device=adv.device)
    alive = torch.tensor(live, device=adv.device)

    def loss(active: torch.Tensor | None):
        with autocast(settings.precision, obs.device):
            log_probs, entropy = agent.evaluate(obs, actions)
            adjusted, hook_metrics = _adjusted(entropy_slots, _asked(live, active), log_probs,
                                               old_log_probs, adv, entropy, settings.clip)
            value, parts = reinforce_loss(log_probs, entropy, agent.value(obs), adv, ret, coef,
                                          adjusted, settings)
            value = torch.where(alive, value, torch.zeros_like(value))
        return value, _per_seed(parts, hook_metrics)

    def kl_moved(stats: list[dict[str, float]]) -> None:
        with torch.no_grad():  # one step from the sampling policy: measure the KL it moved
            log_probs = agent.evaluate(obs, actions)[0]
            for s in range(n_seeds):
                if live[s]:
                    stats[s]["train/approx_kl"] = float(approx_kl(
                        log_probs[s], old_log_probs[s], torch.ones_like(log_probs[s])))

    return policy_step_seeds(optimizer, loss, params=agent.parameters,
                             max_grad_norm=settings.max_grad_norm, seeds=n_seeds, update=update,
                             episodic_returns=episodic_returns, after_step=kl_moved)
