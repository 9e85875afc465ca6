"""Any Gymnasium environment id behind the ``BatchedEnv`` interface (the slow, CPU path).

Wraps ``gymnasium.vector.SyncVectorEnv`` in same-step autoreset mode (``final_obs`` comes from
its infos), moves the results to torch on the requested device, one-hot encodes Discrete
observations and flattens Box ones, and keeps the episode returns and lengths itself.  As in
``TorchEnv``, ``truncated`` is False where ``terminated`` is True.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from workbench.common import seeds
from workbench.testbeds.envs.base import BatchedEnv, Step


class GymVectorEnv(BatchedEnv):
    """``num_envs`` copies of ``gymnasium.make(env_id)`` stepped by a ``SyncVectorEnv``.

    ``max_episode_steps`` is the registered time limit (or the one given; 0 if there is none).
    There is no common physical state, so ``get_state``/``set_state`` are not available.
    """

    def __init__(self, env_id: str, num_envs: int, *, device: str | torch.device = "cpu",
                 seed: int = 0, dtype: torch.dtype = torch.float32,
                 max_episode_steps: int | None = None,
                 return_upper_bound: float | None = None):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.env_id = env_id
        self.device = torch.device(device)
        self.dtype = dtype
        self._max_steps_override = max_episode_steps
        self._seeds = seeds.numpy_generator(seed, "env")  # for environments added by resize
        self._vector = SyncVectorEnv([self._maker() for _ in range(num_envs)],
                                     autoreset_mode=AutoresetMode.SAME_STEP)
        single = self._vector.envs[0]
        self.max_episode_steps = int(single.spec.max_episode_steps) if (
            single.spec is not None and single.spec.max_episode_steps) else 0
        self.return_upper_bound = return_upper_bound
        self._setup_spaces(single.observation_space, single.action_space)
        self.num_envs = num_envs
        self._return = np.zeros(num_envs)
        self._length = np.zeros(num_envs)
        self.reset(seed)

    def _maker(self) -> Callable[[], gym.Env]:
        kwargs = {}
        if self._max_steps_override is not None:
            kwargs["max_episode_steps"] = self._max_steps_override
        return lambda: gym.make(self.env_id, **kwargs)

    def _setup_spaces(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:
        if isinstance(observation_space, spaces.Discrete):
            self.obs_dim = int(observation_space.n)
        elif isinstance(observation_space, spaces.Box):
            self.obs_dim = int(np.prod(observation_space.shape))
        else:
            raise ValueError(f"{self.env_id}: observation space {observation_space} is neither "
                             "Discrete nor Box; wrap it (e.g. FlattenObservation) first")
        self._observation_space = observation_space
        self._action_space = action_space
        if isinstance(action_space, spaces.Discrete):
            self.discrete, self.n_actions = True, int(action_space.n)
        elif isinstance(action_space, spaces.Box):
            self.discrete, self.act_dim = False, int(np.prod(action_space.shape))
            kw = {"dtype": self.dtype, "device": self.device}
            self.action_low = torch.as_tensor(action_space.low.reshape(-1), **kw)
            self.action_high = torch.as_tensor(action_space.high.reshape(-1), **kw)
        else:
            raise ValueError(f"{self.env_id}: action space {action_space} is neither Discrete "
                             "nor Box")

    def _to_obs(self, observations: np.ndarray) -> torch.Tensor:
        space = self._observation_space
        if isinstance(space, spaces.Discrete):
            index = torch.as_tensor(np.asarray(observations) - space.start, dtype=torch.long)
            obs = torch.nn.functional.one_hot(index, self.obs_dim).to(self.dtype)
        else:
            obs = torch.as_tensor(np.asarray(observations).reshape(len(observations), -1),
                                  dtype=self.dtype)
        return obs.to(self.device)

    def _to_actions(self, actions: torch.Tensor) -> np.ndarray:
        array = actions.detach().cpu().numpy()
        if self.discrete:
            return array.reshape(self.num_envs).astype(np.int64) + self._action_space.start
        space = self._action_space
        return array.reshape(self.num_envs, *space.shape).astype(space.dtype)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        observations, _ = self._vector.reset(seed=seed)
        self._return[:] = 0.0
        self._length[:] = 0.0
        self._obs = self._to_obs(observations)
        return self._obs.clone()

    def step(self, actions: torch.Tensor) -> Step:
        observations, rewards, terminated, truncated, infos = self._vector.step(
            self._to_actions(actions))
        truncated = truncated & ~terminated
        done = terminated | truncated
        self._return += rewards
        self._length += 1
        episode_return = np.where(done, self._return, np.nan)
        episode_length = np.where(done, self._length, np.nan)
        self._return[done] = 0.0
        self._length[done] = 0.0
        obs = self._to_obs(observations)
        final_obs = obs.clone()
        if done.any():
            ended = np.flatnonzero(infos["_final_obs"])
            final_obs[torch.as_tensor(ended, device=self.device)] = self._to_obs(
                np.stack([infos["final_obs"][i] for i in ended]))
        self._obs = obs

        def tensor(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
            return torch.as_tensor(array, dtype=dtype).to(self.device)

        return Step(obs, tensor(rewards, self.dtype), tensor(terminated, torch.bool),
                    tensor(truncated, torch.bool), final_obs,
                    tensor(episode_return, self.dtype), tensor(episode_length, self.dtype))

    def resize(self, num_envs: int) -> torch.Tensor:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        keep = min(num_envs, self.num_envs)
        old = self._vector.envs
        for env in old[keep:]:
            env.close()
        kept = [lambda env=env: env for env in old[:keep]]
        self._vector = SyncVectorEnv(kept + [self._maker() for _ in range(num_envs - keep)],
                                     autoreset_mode=AutoresetMode.SAME_STEP)
        fresh = [env.reset(seed=int(self._seeds.integers(2**31)))[0]
                 for env in self._vector.envs[keep:]]
        obs = self._obs[:keep]
        if fresh:
            obs = torch.cat([obs, self._to_obs(np.stack(fresh))])
        self._return = np.concatenate([self._return[:keep], np.zeros(num_envs - keep)])
        self._length = np.concatenate([self._length[:keep], np.zeros(num_envs - keep)])
        self.num_envs = num_envs
        self._obs = obs
        return obs.clone()

    def get_state(self) -> torch.Tensor:
        raise NotImplementedError(f"{self.env_id} through Gymnasium has no common state tensor")

    def set_state(self, state: torch.Tensor, elapsed: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError(f"{self.env_id} through Gymnasium has no common state tensor")

    def close(self) -> None:
        self._vector.close()
