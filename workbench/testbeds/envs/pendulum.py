"""Pendulum-v1 as batched tensors, step for step Gymnasium 1.x's ``PendulumEnv``.

Inverted pendulum swing-up (g = 10, m = 1, l = 1, dt = 0.05), torque u clipped to [-2, 2]:
    cost    = normalize(th)^2 + 0.1 th_dot^2 + 0.001 u^2,  normalize(th) = ((th + pi) mod 2 pi) - pi
    th_dot' = clip(th_dot + (3 g / (2 l) sin th + 3 / (m l^2) u) dt, -8, 8)
    th'     = th + th_dot' dt
reward = -cost (of the state before the step); never terminates; truncated after 200 steps.
Reset: th uniform in [-pi, pi), th_dot uniform in [-1, 1).  Observation: (cos th, sin th, th_dot).
Operations keep Gymnasium's order.  One difference in float64: Gymnasium's action space is
float32 and numpy computes 3 u and 0.001 u^2 in float32; here they are computed in the
environment's dtype (equal whenever those products are exact in float32).
"""

from __future__ import annotations

import math

import torch

from workbench.testbeds.envs.base import TorchEnv

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT = 0.05
G = 10.0
MASS = 1.0
LENGTH = 1.0


class Pendulum(TorchEnv):
    env_id = "Pendulum-v1"
    state_dim = 2
    obs_dim = 3
    discrete = False
    act_dim = 1
    default_max_episode_steps = 200
    return_upper_bound = 0.0
    reset_low = (-math.pi, -1.0)
    reset_high = (math.pi, 1.0)

    def _setup_constants(self) -> None:
        kw = {"dtype": self.dtype, "device": self.device}
        self.action_low = torch.tensor([-MAX_TORQUE], **kw)
        self.action_high = torch.tensor([MAX_TORQUE], **kw)

    def _allocate(self, num_envs: int) -> None:
        super()._allocate(num_envs)
        self._never = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self._columns = self._state.unbind(1)  # theta, theta_dot (views)

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        theta, theta_dot = self._columns
        torque = actions.reshape(-1).to(self.dtype).clamp(-MAX_TORQUE, MAX_TORQUE)
        angle = torch.add(theta, math.pi).remainder_(2 * math.pi).sub_(math.pi)
        cost = angle.square_().add_(torch.square(theta_dot).mul_(0.1))
        cost.add_(torch.square(torque).mul_(0.001))
        acceleration = torch.sin(theta).mul_(3 * G / (2 * LENGTH))
        acceleration.add_(torque.mul_(3.0 / (MASS * LENGTH**2)))
        theta_dot.add_(acceleration.mul_(DT)).clamp_(-MAX_SPEED, MAX_SPEED)
        theta.add_(theta_dot * DT)
        return cost.neg_(), self._never.clone()

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        theta = state[:, 0]
        return torch.stack((torch.cos(theta), torch.sin(theta), state[:, 1]), dim=1)
