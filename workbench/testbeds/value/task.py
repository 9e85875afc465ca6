"""The value-based testbed's task: DQN on CartPole-v1 (``dqn-cartpole``), run on the batched
torch environment the control testbed runs too (``workbench.testbeds.envs``).

Slots: ``step_size`` (the Q-network's optimizer) and ``batch_size`` (the replay batch size of
every update). There is no ``entropy`` slot (the behaviour policy is epsilon-greedy, with no
entropy to regularise) and no ``advantage`` slot (the TD target replaces advantages): a spec
that names either is refused with the task's slots. The defaults are CleanRL's ``dqn.py`` for
CartPole (``DQNSettings``), except the step-size method's own default learning rate
(``adam``: 1e-3; CleanRL 2.5e-4).
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import Field

from workbench.common import seeds as seed_streams
from workbench.testbeds.base import Task, TaskParams, cpu_threads
from workbench.testbeds.envs import TORCH_ENVS, make
from workbench.testbeds.value.dqn import QNetwork
from workbench.testbeds.value.loop import DQNSettings, train


class DQNParams(TaskParams, DQNSettings):
    """Flat keys: the loop's knobs (``DQNSettings``) and the task's own."""

    hidden: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        [120, 84], min_length=1, max_length=8,
                              description="widths of the Q-network's ReLU hidden layers")
    dtype: Literal["float32", "float64"] = "float32"
    cpu_threads: int | None = Field(
        1, ge=1, le=1024, description="torch threads on the CPU during the run (None: torch's "
        "default); small networks run fastest on one")


class DQNCartPole(Task):
    name = "dqn-cartpole"
    description = "DQN (replay buffer, target network, epsilon-greedy) on CartPole-v1 (batched)"
    slots = ("step_size", "batch_size")
    default_methods = {"step_size": "adam", "batch_size": "constant"}
    provides = frozenset({"closure"})
    Params = DQNParams
    metrics = {"train/return": "maximize", "train/return_recent": "maximize",
               "train/episode_length": "maximize", "train/td_loss": "minimize",
               "train/q_mean": "maximize", "train/grad_norm": "minimize",
               "method/step_size": "maximize", "time/env_steps_per_second": "maximize"}
    default_objective = "train/return_recent"
    env_id = "CartPole-v1"

    @classmethod
    def metric_bounds(cls, params):
        """A CartPole-v1 return lies in [0, 500]: +1 per step survived, at most 500 steps (the
        environment's ``return_upper_bound``), so no interval leaves that range."""
        bounds = (0.0, TORCH_ENVS[cls.env_id](1).return_upper_bound)
        return {"train/return": bounds, "train/return_recent": bounds}

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            dtype = getattr(torch, params.dtype)
            env = make(self.env_id, params.num_envs, device=device,
                       seed=seed_streams.int_seed(seed, "env"), dtype=dtype)
            # PyTorch's default initialisation draws from the global RNG: seed it in fork_rng
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed_streams.int_seed(seed, "init"))
                q_net = QNetwork(env.obs_dim, env.n_actions, tuple(params.hidden))
            q_net = q_net.to(device=device, dtype=dtype)
            return train(env, q_net, methods, DQNSettings.from_flat(params), budget=budget,
                         seed=seed, log=log)
