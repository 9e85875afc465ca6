"""The training loop of the control testbed: rollouts from batched environments, advantages,
entropy coefficient and policy updates (PPO or REINFORCE), one update per logged step.

Slots: ``advantage`` (computes A and R from the rollout), ``entropy`` (coefficient and loss
hook), ``step_size`` (the optimizer over the actor-critic's parameters; ``observe`` gets the
KL and the return), ``batch_size`` (samples per update, b = N * T: the loop changes T, the
rollout length, or N, the number of environments, as ``batch_axis`` says, holding the other
fixed; b is rounded to a multiple of the fixed one; PPO cuts b into as many minibatches as
the slot's ``minibatches`` says, by default ``ppo.minibatches``).

With ``policy_lag`` = k > 0 the rollout is collected by ``LaggedPolicy``, a frozen copy of
the network holding its parameters of k updates before (an asynchronous actor's stale
policy), while the current critic gives the values; the rollout's ``log_probs`` are the
behaviour's, so PPO's ratio is taken against them, and for an advantage method that reads
``target_log_probs`` (``vtrace``, ``vcpo_baseline``) or a step-size method that reads
``importance_ess`` (``vcpo_lr``) the current policy's log-probabilities of the taken actions
are computed after the rollout (``learner_log_probs``), and with them ``train/ess``, the
normalised ESS of the episode segments' importance weights (``rollout_ess``; 1 on-policy,
not logged under a lag no method reads). k = 0 runs the code of before.

Stops at whichever comes first: ``budget.steps`` updates, ``budget.samples`` environment steps,
``budget.wall_seconds``, or a non-finite loss or parameter (reported as diverged).

Why this loop is kept beside the seed axis (``seed_axis.train_seeds``), where the
optimisation testbeds' ``Task.run`` is their seed-axis loop with one seed
(``optimisation.seed_axis.train_one``; issue 34):

- the seed axis cannot take every configuration this loop takes: the Gymnasium backend and
  any environment outside ``envs.TORCH_ENVS`` (``Control.seed_axis_problem``), and the
  methods that declare ``vectorised = False`` (entropy ``kl_cov``, whose kink at
  log pi = log pi_old lets a last-bit difference set its gradient);
- one seed on the axis does not give this loop's numbers in float32, the default dtype: the
  axis's network (``SeedAxisActorCritic``, each layer a batched matrix product) rounds
  differently from ``ActorCritic``'s, from the first update on (PPO on CartPole, N = 4,
  seed 7: the policy loss 3e-5 relative apart at update 1, 1.3e-2 at update 8 as it nears
  zero; the same bits at N = 256 in that run, and 3.4e-13 apart in float64);
- it buys no time: one seed on the axis against this loop, 8 updates, T = 32, medians of 5,
  seven runs on the loaded 2-core CPU (``benchmarks/seed_axis.py --one-seed``): 0.92-1.13x
  the time at N = 4, 0.81-1.06x at N = 256, no gain beyond the noise.

One loop would need the axis of one to run this loop's own network and optimizer (as the
optimisation loop does with one seed) through ``policy_step_seeds``, the per-seed entropy
hooks and ``collect_seeds``, and a one-stream adapter for Gymnasium environments; not done.
The parity tests (``tests/test_control_seed_axis.py``, float64) hold the two loops together.
"""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field

from workbench.common import seeds
from workbench.families import BatchSlot, compute_advantages, open_rl_slots
from workbench.families.importance import normalised_ess, sequence_log_weights
from workbench.testbeds.control.policy import ActorCritic
from workbench.testbeds.control.ppo import PPOSettings, ppo_update
from workbench.testbeds.control.reinforce import reinforce_update
from workbench.testbeds.control.rollout import Rollout, collect, explained_variance
from workbench.testbeds.envs import BatchedEnv
from workbench.testbeds.settings import Settings
from workbench.testbeds.shared.batch_shape import reshape_batch

if TYPE_CHECKING:  # workbench.testbeds imports this module
    from workbench.common.budget import Budget, LogFn

RECENT_EPISODES = 100


class RolloutSettings(Settings):
    """The loop's own knobs: the algorithm and the batch b = N * T it collects."""

    algorithm: Literal["ppo", "reinforce"] = "ppo"
    num_envs: int = Field(8, ge=1, le=4_194_304)
    rollout_len: int = Field(128, ge=1, le=100_000, description="T: steps per environment "
                                                                "per update")
    batch_axis: Literal["rollout_len", "num_envs"] = Field(
        "rollout_len", description="what the batch_size slot changes")
    policy_lag: int = Field(
        0, ge=0, le=10_000, description="rollouts are collected by the policy as it was "
        "policy_lag updates ago (the initial one before that), as an asynchronous actor's "
        "would be; values still come from the current critic; 0: on-policy")


class LoopSettings(RolloutSettings):
    """Everything the loop reads: its own knobs and the update's, nested in ``ppo``."""

    ppo: PPOSettings = Field(default_factory=PPOSettings)


def train(env: BatchedEnv, agent: ActorCritic, methods: Mapping[str, Any],
          settings: LoopSettings, *, budget: Budget, seed: int, log: LogFn) -> dict[str, Any]:
    device = env.device
    num_envs, horizon = settings.num_envs, settings.rollout_len
    total_updates = budget.planned_steps(num_envs * horizon)
    ppo = settings.ppo
    per_update = ppo.epochs * ppo.minibatches if settings.algorithm == "ppo" else 1
    ess = [1.0]  # the current rollout's ESS_hat (importance_ess); 1 on-policy
    slots = open_rl_slots(methods, agent.parameters(), updates=total_updates,
                          per_update=per_update, batch=num_envs * horizon,
                          samples=budget.samples,
                          info={"return_upper_bound": env.return_upper_bound,
                                "importance_ess": lambda: ess[0]})
    optimizer, entropy_slot, batch_slot = slots.optimizer, slots.entropy, slots.batch
    advantage_method, advantage_inputs = slots.advantage, slots.advantage_inputs
    if slots.first_batch is not None:
        num_envs, horizon = _reshape(slots.first_batch, num_envs, horizon, settings.batch_axis)
    minibatch_order = seeds.torch_generator(seed, "minibatches")
    action_draws = seeds.torch_generator(seed, "actions", device=device)

    behaviour = LaggedPolicy(agent, settings.policy_lag) if settings.policy_lag else None
    learner_needed = reads_the_learner(methods, advantage_inputs)
    if num_envs != env.num_envs:
        env.resize(num_envs)
    obs = env.reset(seed=seeds.int_seed(seed, "env"))
    env_steps, seconds, diverged = 0, 0.0, False
    recent: deque[float] = deque(maxlen=RECENT_EPISODES)
    latest_return = math.nan
    update = 0
    metrics: dict[str, float] = {}
    while update < budget.steps:
        started = time.perf_counter()
        # 1. rollout
        if num_envs != env.num_envs:
            obs = env.resize(num_envs)
        if behaviour is None:
            rollout, obs = collect(env, agent, obs, horizon, action_draws)
        else:
            rollout, obs = collect(env, agent, obs, horizon, action_draws,
                                   behaviour=behaviour.step())
            if learner_needed:
                rollout.target_log_probs = learner_log_probs(agent, rollout)
            ess[0] = rollout_ess(rollout)
        env_steps += rollout.size
        episodes = rollout.episode_stats()
        if episodes:
            latest_return = episodes["train/return"]
            recent.extend(rollout.episode_returns.tolist())
        # 2. advantages, from the rollout in the method's (rows = environments, T) layout
        advantages, returns = (t.T for t in compute_advantages(
            advantage_method, rollout.advantage_batch(), advantage_inputs))
        # 3. entropy coefficient
        rollout_entropy = float(rollout.entropy.mean())
        entropy_coef = entropy_slot.coefficient(update, rollout_entropy)
        # 4. policy update
        cut = minibatch_settings(ppo, batch_slot, rollout.size)
        if settings.algorithm == "ppo":
            stats = ppo_update(agent, optimizer, rollout, advantages, returns, entropy_coef,
                               entropy_slot, cut, update, latest_return, minibatch_order)
        else:
            stats = reinforce_update(agent, optimizer, rollout, advantages, returns,
                                     entropy_coef, entropy_slot, ppo, update, latest_return)
        seconds += time.perf_counter() - started
        update += 1

        metrics = update_metrics(rollout, episodes, stats, advantages, returns,
                                 rollout_entropy=rollout_entropy, entropy_coef=entropy_coef,
                                 num_envs=num_envs, horizon=horizon, env_steps=env_steps,
                                 update=update, seconds=seconds, recent=recent,
                                 minibatches=cut.minibatches
                                 if settings.algorithm == "ppo" else None, ess=ess[0])
        log(update, metrics)
        if not (math.isfinite(stats.get("train/policy_loss", 0.0))
                and math.isfinite(stats.get("train/value_loss", 0.0))
                and bool(finite_per_seed(list(agent.parameters()), seeds=None))):
            diverged = True
            break
        if budget.spent(env_steps, seconds):
            break
        wanted = batch_slot.after_step(
            update, loss=stats.get("train/policy_loss", math.nan),
            grad_sq=stats.get("train/grad_norm", math.nan) ** 2, batch_size=rollout.size,
            samples=env_steps)
        if wanted is not None:
            num_envs, horizon = _reshape(wanted, num_envs, horizon, settings.batch_axis)
    return {**metrics, "steps": update, "diverged": diverged,
            "env_steps": env_steps, "device": str(device)}


class LaggedPolicy:
    """The behaviour policy of ``policy_lag`` = k: a frozen copy of ``agent`` loaded, at each
    ``step()`` (once per update, before the rollout), with ``agent``'s parameters as they were
    k updates before (the initial ones during the first k updates)."""

    def __init__(self, agent: ActorCritic, lag: int):
        self.agent = agent
        self.copy = copy.deepcopy(agent).requires_grad_(False)
        self.snapshots: deque[dict[str, torch.Tensor]] = deque(maxlen=lag + 1)

    def step(self) -> ActorCritic:
        """Record the current parameters; the copy with those of ``lag`` updates ago."""
        self.snapshots.append({k: v.detach().clone()
                               for k, v in self.agent.state_dict().items()})
        self.copy.load_state_dict(self.snapshots[0])
        return self.copy


def reads_the_learner(methods: Mapping[str, Any], advantage_inputs: frozenset[str]) -> bool:
    """Whether a method reads the learner's log-probabilities of a lagged rollout: an
    advantage method's ``target_log_probs`` or a step-size method's ``importance_ess``."""
    step_size = methods.get("step_size")
    return ("target_log_probs" in advantage_inputs
            or (step_size is not None
                and "importance_ess" in step_size.requirements(step_size.params)))


def rollout_ess(rollout: Rollout) -> float:
    """``train/ess``: the normalised ESS of the rollout's episode-segment importance weights
    (``workbench.families.importance``, rows = environments), learner against behaviour; NaN
    when the learner's log-probabilities were not evaluated (no method reads them)."""
    if rollout.target_log_probs is None:
        return math.nan
    log_w, _ = sequence_log_weights(rollout.log_probs.T, rollout.target_log_probs.T,
                                    rollout.dones.T)
    return normalised_ess(log_w)


@torch.no_grad()
def learner_log_probs(agent: ActorCritic, rollout: Rollout) -> torch.Tensor:
    """(T, N): the current policy's log-probabilities of the rollout's actions."""
    log_probs, _ = agent.evaluate(rollout.obs.flatten(0, 1), rollout.actions.flatten(0, 1))
    return log_probs.view(rollout.log_probs.shape)


def update_metrics(rollout: Rollout, episodes: Mapping[str, float], stats: Mapping[str, float],
                   advantages: torch.Tensor, returns: torch.Tensor, *, rollout_entropy: float,
                   entropy_coef: float, num_envs: int, horizon: int, env_steps: int,
                   update: int, seconds: float, recent: deque[float],
                   minibatches: int | None = None, ess: float = 1.0) -> dict[str, float]:
    """The metrics one update logs for one run (its own rollout, advantages and statistics):
    the same keys in the loop and on a seed axis, where ``seconds`` is the seed's share;
    ``batch/minibatches`` with PPO's ``minibatches``; ``train/ess`` where known (not NaN)."""
    metrics = {
        **episodes, **stats,
        "train/rollout_entropy": rollout_entropy,
        "train/explained_variance": explained_variance(rollout.values.flatten(),
                                                       returns.flatten()),
        "adv/mean": float(advantages.mean()), "adv/std": float(advantages.std()),
        "method/entropy_coef": entropy_coef,
        "batch/size": float(rollout.size), "batch/num_envs": float(num_envs),
        "batch/rollout_len": float(horizon),
        "cost/env_steps": float(env_steps), "cost/samples": float(env_steps),
        "cost/updates": float(update), "time/wall_seconds": seconds,
        "time/env_steps_per_second": env_steps / seconds if seconds > 0 else math.nan,
    }
    if recent:
        metrics["train/return_recent"] = sum(recent) / len(recent)
    if minibatches is not None:
        metrics["batch/minibatches"] = float(minibatches)
    if not math.isnan(ess):
        metrics["train/ess"] = ess
    return metrics


def minibatch_settings(ppo: PPOSettings, batch_slot: BatchSlot, batch: int) -> PPOSettings:
    """``ppo`` with the number of minibatches the batch-size slot gives a batch of ``batch``
    samples (``ppo`` itself when that is its own count)."""
    count = batch_slot.minibatches(batch, ppo.minibatches)
    return ppo if count == ppo.minibatches else ppo.model_copy(update={"minibatches": count})


def finite_per_seed(params: list[torch.Tensor], seeds: int | None) -> torch.Tensor:
    """Whether every parameter is finite: one bool, or (S,) on a seed axis of ``seeds``."""
    if seeds is None:
        return torch.stack([torch.isfinite(p).all() for p in params]).all()
    return torch.stack([torch.isfinite(p).flatten(1).all(1) for p in params], dim=1).all(1)


def _reshape(samples: int, num_envs: int, horizon: int, axis: str) -> tuple[int, int]:
    """(N, T) with N * T close to ``samples``, changing only ``axis``."""
    return reshape_batch(samples, num_envs, horizon, "rows" if axis == "num_envs" else "columns")
