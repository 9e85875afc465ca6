"""The batched-environment interface and the shared bookkeeping of the torch-native ones.

``BatchedEnv`` is what the policy-gradient loops see: ``reset``, ``step`` on N environments at
once, same-step autoreset (where an episode ends, ``Step.obs`` is already the next episode's
first observation and ``Step.final_obs`` the ended episode's last one), and the episode's return
and length where one ended. ``TorchEnv`` implements the bookkeeping (time limit, autoreset,
episode statistics, seeding, resize) once; each environment adds its dynamics, its observation
and its reset distribution.

Conventions that differ from Gymnasium's ``TimeLimit`` wrapper: ``truncated`` is False where
``terminated`` is True (Gymnasium sets both when the last allowed step also terminates), so a
learner bootstraps exactly where ``truncated`` is set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch


@dataclass
class Step:
    """What ``BatchedEnv.step`` returns; all tensors on ``env.device``, new at every step."""

    obs: torch.Tensor  # (N, obs_dim) next observation; the reset one where an episode ended
    reward: torch.Tensor  # (N,) env dtype
    terminated: torch.Tensor  # (N,) bool
    truncated: torch.Tensor  # (N,) bool: time limit reached, False where terminated
    final_obs: torch.Tensor  # (N, obs_dim) the episode's last observation where it ended, else obs
    episode_return: torch.Tensor  # (N,) undiscounted return of the episode that ended (NaN: none)
    episode_length: torch.Tensor  # (N,) its length in steps (NaN where none ended)


class BatchedEnv:
    """N environments stepped together as tensors (see the module docstring for the contract)."""

    env_id: str
    num_envs: int
    device: torch.device
    dtype: torch.dtype
    obs_dim: int
    discrete: bool
    n_actions: int | None = None  # discrete action spaces
    act_dim: int | None = None  # continuous action spaces
    action_low: torch.Tensor | None = None  # (act_dim,)
    action_high: torch.Tensor | None = None
    max_episode_steps: int
    return_upper_bound: float | None = None  # largest possible episode return, if known

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Start new episodes in every environment; returns the (N, obs_dim) observations."""
        raise NotImplementedError

    def step(self, actions: torch.Tensor) -> Step:
        """Advance every environment one step; discrete: (N,) long, continuous: (N, act_dim)."""
        raise NotImplementedError

    def resize(self, num_envs: int) -> torch.Tensor:
        """Keep the first min(old, new) environments' episodes, start the new ones; returns obs."""
        raise NotImplementedError

    def get_state(self) -> torch.Tensor:
        """(N, state_dim) physical state."""
        raise NotImplementedError

    def set_state(self, state: torch.Tensor, elapsed: torch.Tensor | None = None) -> torch.Tensor:
        """Overwrite the physical state (and the steps elapsed in each episode); returns obs."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the environment holds (nothing for the torch-native ones)."""

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.env_id!r}, num_envs={self.num_envs}, "
                f"device={self.device}, dtype={self.dtype})")


class TorchEnv(BatchedEnv):
    """Base of the torch-native environments; the state is an (N, state_dim) tensor.

    A subclass sets the class attributes (``reset_low``/``reset_high``: the uniform reset range
    of each state component) and implements ``_advance`` (the dynamics, in place on
    ``self._state``, returning reward and terminated) and ``_observe``.

    Seed axis (``streams`` = S > 1): the N rows are S blocks of N / S environments, one per
    seed of a trial, and block s draws its reset states from its own generator, seeded by
    ``reset(seed=[...])``'s s-th seed, in the order a run of that block alone draws them; so
    every block steps as a ``streams=1`` environment of N / S rows would (the dynamics act on
    each row alone).

    Speed: every step is a fixed, short sequence of tensor operations on all N environments
    (no Python loop over them); the state keeps the observation's row layout so observations
    are plain copies; on the CPU, reset states are drawn only for the environments that ended;
    on CUDA a full batch is drawn and selected with ``torch.where``, so ``step`` never waits
    for the device.
    """

    env_id: ClassVar[str]
    state_dim: ClassVar[int]
    default_max_episode_steps: ClassVar[int]
    reset_low: ClassVar[tuple[float, ...]]
    reset_high: ClassVar[tuple[float, ...]]
    # Gymnasium draws some reset states in float32 (Acrobot); None: in the env dtype
    reset_draw_dtype: ClassVar[torch.dtype | None] = None

    def __init__(self, num_envs: int, *, device: str | torch.device = "cpu",
                 seed: int | Sequence[int] = 0, dtype: torch.dtype = torch.float32,
                 max_episode_steps: int | None = None, streams: int = 1):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        if streams < 1 or num_envs % streams:
            raise ValueError(f"num_envs ({num_envs}) must be a positive multiple of streams "
                             f"({streams})")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_episode_steps = int(max_episode_steps or self.default_max_episode_steps)
        if not 1 <= self.max_episode_steps <= 2**24:  # episode lengths are counted in dtype
            raise ValueError(f"max_episode_steps must be in [1, 2**24], got {max_episode_steps}")
        self.streams = streams
        self._generators = [torch.Generator(device=self.device) for _ in range(streams)]
        self._reset_by_index = self.device.type == "cpu"
        draw = {"dtype": self.reset_draw_dtype or dtype, "device": self.device}
        self._low = torch.tensor(self.reset_low, **draw)
        self._span = torch.tensor(self.reset_high, **draw) - self._low
        self._nan = torch.tensor(math.nan, dtype=dtype, device=self.device)
        self._setup_constants()
        self._allocate(num_envs)
        self.reset(seed)

    # ---- what a subclass provides -------------------------------------------------------
    def _setup_constants(self) -> None:
        """Tensors the dynamics need on the device (action tables, thresholds)."""

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``self._state`` in place; return (reward (N,), terminated (N,) bool)."""
        raise NotImplementedError

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        """(n, state_dim) states -> new (n, obs_dim) observations."""
        raise NotImplementedError

    # ---- shared bookkeeping -------------------------------------------------------------
    def _allocate(self, num_envs: int) -> None:
        self.num_envs = num_envs
        self._state = torch.empty((num_envs, self.state_dim), dtype=self.dtype, device=self.device)
        # rows: return and length of the running episodes (one tensor: one op to restart them)
        self._episode = torch.zeros((2, num_envs), dtype=self.dtype, device=self.device)
        self._episode_return, self._episode_length = self._episode

    def _draw_reset_states(self, count: int,
                           per_stream: Sequence[int] | None = None) -> torch.Tensor:
        """(count, state_dim) states uniform in [reset_low, reset_high) per component; on a
        seed axis ``per_stream[s]`` of them (in block order) from block s's generator
        (None: count / S each)."""
        if per_stream is None:
            per_stream = [count // self.streams] * self.streams
        draws = torch.cat([
            torch.rand((k, self.state_dim), generator=g, dtype=self._low.dtype,
                       device=self.device)
            for g, k in zip(self._generators, per_stream, strict=True) if k])
        return torch.addcmul(self._low, self._span, draws).to(self.dtype)

    def _rows_per_stream(self, rows: torch.Tensor) -> list[int] | None:
        """How many of the (sorted) row indices ``rows`` fall in each block."""
        if self.streams == 1:
            return None
        block = self.num_envs // self.streams
        return torch.bincount(rows // block, minlength=self.streams).tolist()

    def reset(self, seed: int | Sequence[int] | None = None) -> torch.Tensor:
        """``seed``: one per stream (an int: the only stream's)."""
        if seed is not None:
            seeds = [seed] if isinstance(seed, int) else list(seed)
            if len(seeds) != self.streams:
                raise ValueError(f"reset needs {self.streams} seeds, one per stream; "
                                 f"got {len(seeds)}")
            for generator, value in zip(self._generators, seeds, strict=True):
                generator.manual_seed(value)
        self._state.copy_(self._draw_reset_states(self.num_envs))
        self._episode.zero_()
        return self._observe(self._state)

    def step(self, actions: torch.Tensor) -> Step:
        with torch.no_grad():
            reward, terminated = self._advance(actions)
            self._episode_return.add_(reward)
            length = self._episode_length.add_(1.0)
            # time limit reached and not terminated (on bools, '>' is 'and not')
            truncated = torch.ge(length, self.max_episode_steps).gt_(terminated)
            done = terminated | truncated
            episode_return = torch.where(done, self._episode_return, self._nan)
            episode_length = torch.where(done, length, self._nan)
            self._episode.mul_(~done)  # zero where done (faster than masked_fill_)
            final_obs = self._observe(self._state)
            obs = self._autoreset(done, final_obs)
        return Step(obs, reward, terminated, truncated, final_obs, episode_return,
                    episode_length)

    def _autoreset(self, done: torch.Tensor, final_obs: torch.Tensor) -> torch.Tensor:
        """Start new episodes where ``done``; returns the observations after it."""
        if self._reset_by_index:
            ended = done.nonzero().squeeze(1)
            if not ended.numel():
                return final_obs.clone()
            self._state.index_copy_(0, ended, self._draw_reset_states(
                ended.numel(), self._rows_per_stream(ended)))
        else:
            torch.where(done[:, None], self._draw_reset_states(self.num_envs), self._state,
                        out=self._state)
        return self._observe(self._state)

    def resize(self, num_envs: int) -> torch.Tensor:
        """On a seed axis ``num_envs`` counts all blocks, and each block keeps its first
        environments and starts its new ones."""
        if num_envs < 1 or num_envs % self.streams:
            raise ValueError(f"num_envs must be a positive multiple of {self.streams}, "
                             f"got {num_envs}")
        streams, old, new = self.streams, self.num_envs // self.streams, num_envs // self.streams
        keep = min(new, old)
        state = self._state.view(streams, old, self.state_dim)
        episode = self._episode.view(2, streams, old)
        self._allocate(num_envs)
        self._state.view(streams, new, self.state_dim)[:, :keep] = state[:, :keep]
        self._episode.view(2, streams, new)[:, :, :keep] = episode[:, :, :keep]
        if new > keep:
            self._state.view(streams, new, self.state_dim)[:, keep:] = self._draw_reset_states(
                streams * (new - keep)).view(streams, new - keep, self.state_dim)
        return self._observe(self._state)

    def get_state(self) -> torch.Tensor:
        return self._state.clone()

    def get_elapsed(self) -> torch.Tensor:
        """(N,) steps taken in each current episode."""
        return self._episode_length.to(torch.int32)

    def set_state(self, state: torch.Tensor, elapsed: torch.Tensor | None = None) -> torch.Tensor:
        state = torch.as_tensor(state, dtype=self.dtype, device=self.device)
        if state.shape != (self.num_envs, self.state_dim):
            raise ValueError(f"state must have shape {(self.num_envs, self.state_dim)}, "
                             f"got {tuple(state.shape)}")
        self._state.copy_(state)
        if elapsed is not None:
            self._episode_length.copy_(torch.as_tensor(elapsed, device=self.device))
        return self._observe(self._state)
