"""MountainCar-v0 as batched tensors, step for step Gymnasium 1.x's ``MountainCarEnv``.

Moore (1990) / Sutton & Barto's mountain car, actions 0 (push left), 1 (none), 2 (push right):
    velocity <- clip(velocity + (action - 1) 0.001 - 0.0025 cos(3 position), -0.07, 0.07)
    position <- clip(position + velocity, -1.2, 0.6); velocity <- 0 if position hit -1.2 moving left
Terminated when position >= 0.5 and velocity >= 0; reward -1 at every step; truncated after 200
steps.  Reset: position uniform in [-0.6, -0.4), velocity 0.  Observation = state (position,
velocity).  Operations keep Gymnasium's order, so float64 trajectories agree with it to rounding.
"""

from __future__ import annotations

import torch

from workbench.testbeds.envs.base import TorchEnv

MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.5
GOAL_VELOCITY = 0.0
FORCE = 0.001
GRAVITY = 0.0025


class MountainCar(TorchEnv):
    env_id = "MountainCar-v0"
    state_dim = 2
    obs_dim = 2
    discrete = True
    n_actions = 3
    default_max_episode_steps = 200
    return_upper_bound = 0.0
    reset_low = (-0.6, 0.0)
    reset_high = (-0.4, 0.0)

    def _setup_constants(self) -> None:
        self._push_of_action = torch.tensor([-FORCE, 0.0, FORCE], dtype=self.dtype,
                                            device=self.device)

    def _allocate(self, num_envs: int) -> None:
        super()._allocate(num_envs)
        self._reward = torch.full((num_envs,), -1.0, dtype=self.dtype, device=self.device)
        self._columns = self._state.unbind(1)  # position, velocity (views)

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        position, velocity = self._columns
        push = self._push_of_action.index_select(0, actions.view(-1))
        velocity.add_(torch.mul(position, 3).cos_().mul_(-GRAVITY).add_(push))
        velocity.clamp_(-MAX_SPEED, MAX_SPEED)
        position.add_(velocity).clamp_(MIN_POSITION, MAX_POSITION)
        velocity.masked_fill_((position == MIN_POSITION) & (velocity < 0), 0.0)
        terminated = (position >= GOAL_POSITION) & (velocity >= GOAL_VELOCITY)
        return self._reward.clone(), terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.clone()
