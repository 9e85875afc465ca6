"""Control testbeds: policy gradients (PPO or REINFORCE) on batched classic-control
environments, with all four family slots (``workbench.testbeds.control.loop``).

Tasks ``cartpole``, ``acrobot``, ``mountain-car`` and ``pendulum`` run the torch-batched
environments of ``envs`` (CPU or CUDA); ``control`` takes any Gymnasium id in
``env`` (the four above run batched, others through Gymnasium's vector API on the CPU).
The defaults are CleanRL's PPO settings for CartPole except N = 8 environments (CleanRL: 4),
which halves the wall time per sample at equal sample efficiency on this testbed.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator

from workbench.common import seeds as seed_streams
from workbench.testbeds.base import Task, TaskParams, cpu_threads
from workbench.testbeds.control.loop import LoopSettings, RolloutSettings, train
from workbench.testbeds.control.policy import ActorCritic, SeedAxisActorCritic
from workbench.testbeds.control.ppo import PPOSettings
from workbench.testbeds.control.rollout import ADVANTAGE_INPUTS
from workbench.testbeds.control.seed_axis import train_seeds
from workbench.testbeds.envs import TORCH_ENVS, make


class ControlParams(TaskParams, RolloutSettings, PPOSettings):
    """Flat keys: the loop's knobs (``RolloutSettings``, ``PPOSettings``) and the task's own."""

    env: str = Field("CartPole-v1", description="Gymnasium environment id")
    hidden: int = Field(64, ge=1, le=4096)
    layers: int = Field(2, ge=1, le=8)
    backend: Literal["torch", "gymnasium"] = Field(
        "torch", description="gymnasium: Gymnasium's SyncVectorEnv on the CPU (slow path)")
    dtype: Literal["float32", "float64"] = "float32"
    cpu_threads: int | None = Field(
        1, ge=1, le=1024, description="torch threads on the CPU during the run (None: torch's "
        "default); small networks run fastest on one, and sweeps run one process per worker")

    @model_validator(mode="after")
    def _bf16_needs_float32(self):
        if self.precision == "bf16" and self.dtype != "float32":
            raise ValueError("precision bf16 autocasts float32 tensors; with dtype float64 it "
                             "would change nothing: use dtype float32")
        return self


NONNEGATIVE_REWARDS = frozenset({"CartPole-v0", "CartPole-v1"})


class Control(Task):
    name = "control"
    description = ("PPO / REINFORCE on any Gymnasium environment id (classic control runs as "
                   "batched torch tensors)")
    slots = ("step_size", "batch_size", "entropy", "advantage")
    default_methods = {"step_size": "adam_schedule", "batch_size": "constant",
                       "entropy": "constant", "advantage": "gae"}
    provides = frozenset({"closure", "rl_stats", "importance_ess"}) | ADVANTAGE_INPUTS
    Params = ControlParams
    metrics = {"train/return": "maximize", "train/return_recent": "maximize",
               "train/episode_length": "maximize", "train/entropy": "maximize",
               "train/value_loss": "minimize", "train/policy_loss": "minimize",
               "train/approx_kl": "minimize", "train/clip_frac": "minimize",
               "train/explained_variance": "maximize", "train/clip_frac_low": "minimize",
               "train/clip_frac_high": "minimize", "train/grad_norm": "minimize",
               "adv/mean": "minimize", "adv/std": "minimize",
               "method/step_size": "maximize", "method/entropy_coef": "minimize",
               "time/env_steps_per_second": "maximize"}
    default_objective = "train/return"
    default_env = "CartPole-v1"

    @classmethod
    def metric_bounds(cls, params):
        """A return lies between the fewest and the most an episode can collect, where the
        environment knows them: >= 0 where every reward is (CartPole: +1 per step survived),
        <= its ``return_upper_bound`` (CartPole-v1: 500 steps; Pendulum, Acrobot: 0)."""
        low = 0.0 if params.env in NONNEGATIVE_REWARDS else None
        high = (TORCH_ENVS[params.env](1).return_upper_bound if params.env in TORCH_ENVS
                else None)
        if low is None and high is None:
            return {}
        return {"train/return": (low, high), "train/return_recent": (low, high)}

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            dtype = getattr(torch, params.dtype)
            env = make(params.env, params.num_envs, device=device,
                       seed=seed_streams.int_seed(seed, "env"), dtype=dtype, backend=params.backend)
            agent = _agent(params, env, seed, device, dtype)
            settings = LoopSettings.from_flat(params)
            return train(env, agent, methods, settings, budget=budget, seed=seed, log=log)

    @classmethod
    def seed_axis_problem(cls, params: ControlParams) -> str | None:
        if params.backend != "torch" or params.env not in TORCH_ENVS:
            return (f"environment {params.env} with backend {params.backend} steps through "
                    "Gymnasium, one seed at a time")
        return None

    def run_seeds(self, params, methods, *, seeds, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            dtype = getattr(torch, params.dtype)
            env = TORCH_ENVS[params.env](
                params.num_envs * len(seeds), device=device, dtype=dtype, streams=len(seeds),
                seed=[seed_streams.int_seed(s, "env") for s in seeds])
            agent = SeedAxisActorCritic([_agent(params, env, s, device, dtype) for s in seeds])
            settings = LoopSettings.from_flat(params)
            return train_seeds(env, agent, methods, settings, budget=budget, seeds=seeds,
                               log=log)


def _agent(params: ControlParams, env, seed: int, device, dtype) -> ActorCritic:
    """The actor-critic of ``seed``'s run, initialised from its ``init`` stream."""
    # PyTorch's default initialisation draws from the global RNG: seed it inside fork_rng
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_streams.int_seed(seed, "init"))
        agent = ActorCritic(env.obs_dim, n_actions=env.n_actions if env.discrete else None,
                            act_dim=None if env.discrete else env.act_dim,
                            hidden=params.hidden, layers=params.layers)
    return agent.to(device=device, dtype=dtype)


def _fixed_env(env_id: str, task_name: str, text: str) -> type[Control]:
    class Params(ControlParams):
        env: Literal[env_id] = env_id  # type: ignore[valid-type]

    Params.__name__ = f"{task_name.title().replace('-', '')}Params"
    return type(task_name.title().replace("-", ""), (Control,), {
        "name": task_name, "description": text, "Params": Params, "default_env": env_id,
        "provides": Control.provides | {"return_upper_bound"}})


CartPole = _fixed_env("CartPole-v1", "cartpole", "PPO / REINFORCE on CartPole-v1 (batched)")
Acrobot = _fixed_env("Acrobot-v1", "acrobot", "PPO / REINFORCE on Acrobot-v1 (batched)")
MountainCar = _fixed_env("MountainCar-v0", "mountain-car",
                         "PPO / REINFORCE on MountainCar-v0 (batched)")
Pendulum = _fixed_env("Pendulum-v1", "pendulum",
                      "PPO / REINFORCE on Pendulum-v1, continuous torque (batched)")
CONTROL_TASKS = (Control, CartPole, Acrobot, MountainCar, Pendulum)
