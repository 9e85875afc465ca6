"""Batched environments: classic control as torch tensors, anything else through Gymnasium.

    env = make("CartPole-v1", 4096, device="cuda", seed=0)
    obs = env.reset()
    step = env.step(actions)   # Step(obs, reward, terminated, truncated, final_obs, ...)

``ENV_IDS`` run natively in torch on CPU or CUDA (``cartpole`` and siblings, each
matching Gymnasium 1.x's reference step for step); any other Gymnasium id, or any id with
``backend="gymnasium"``, runs through ``gymnasium.vector.SyncVectorEnv`` on the CPU.
"""

from __future__ import annotations

from typing import Literal

import torch

from workbench.testbeds.envs.acrobot import Acrobot
from workbench.testbeds.envs.base import BatchedEnv, Step, TorchEnv
from workbench.testbeds.envs.cartpole import CartPole
from workbench.testbeds.envs.gym_vector import GymVectorEnv
from workbench.testbeds.envs.mountain_car import MountainCar
from workbench.testbeds.envs.pendulum import Pendulum

TORCH_ENVS: dict[str, type[TorchEnv]] = {
    cls.env_id: cls for cls in (CartPole, Acrobot, MountainCar, Pendulum)}
ENV_IDS = tuple(TORCH_ENVS)


def make(env_id: str, num_envs: int, *, device: str | torch.device = "cpu", seed: int = 0,
         dtype: torch.dtype = torch.float32, max_episode_steps: int | None = None,
         backend: Literal["torch", "gymnasium"] = "torch") -> BatchedEnv:
    """``num_envs`` environments of ``env_id``, reset with ``seed``.

    backend="torch" runs the ids in ``ENV_IDS`` as tensors on ``device`` and any other id
    through Gymnasium; backend="gymnasium" forces Gymnasium's ``SyncVectorEnv`` (CPU stepping,
    results moved to ``device``).
    """
    if backend not in ("torch", "gymnasium"):
        raise ValueError(f"backend must be 'torch' or 'gymnasium', got {backend!r}")
    if backend == "torch" and env_id in TORCH_ENVS:
        return TORCH_ENVS[env_id](num_envs, device=device, seed=seed, dtype=dtype,
                                  max_episode_steps=max_episode_steps)
    bound = None
    if env_id in TORCH_ENVS:  # the same upper bound as the torch-native environment
        bound = TORCH_ENVS[env_id](1, max_episode_steps=max_episode_steps).return_upper_bound
    return GymVectorEnv(env_id, num_envs, device=device, seed=seed, dtype=dtype,
                        max_episode_steps=max_episode_steps, return_upper_bound=bound)


__all__ = ["ENV_IDS", "TORCH_ENVS", "BatchedEnv", "GymVectorEnv", "Step", "TorchEnv", "make",
           "Acrobot", "CartPole", "MountainCar", "Pendulum"]
