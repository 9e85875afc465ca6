"""CartPole-v1 as batched tensors, step for step Gymnasium 1.x's ``CartPoleEnv``.

Dynamics (Barto, Sutton & Anderson 1983; Florian 2007), explicit Euler with tau = 0.02 s:
    temp      = (F + m_p l theta_dot^2 sin(theta)) / (m_c + m_p)
    theta_acc = (g sin(theta) - cos(theta) temp) / (l (4/3 - m_p cos(theta)^2 / (m_c + m_p)))
    x_acc     = temp - m_p l theta_acc cos(theta) / (m_c + m_p)
with F = +10 N (action 1) or -10 N (action 0), g = 9.8, m_c = 1, m_p = 0.1, l = 0.5 (half the
pole).  Positions are updated with the old velocities, then velocities with the accelerations.
Terminated when |x| > 2.4 or |theta| > 12 degrees; reward 1 at every step, the terminating one
included (Gymnasium's default ``sutton_barto_reward=False``); truncated after 500 steps.
Reset: every state component uniform in [-0.05, 0.05).  Observation = state (x, x_dot, theta,
theta_dot).  Float64 trajectories agree with Gymnasium's to rounding: constants are folded and
multiply-adds fused (fewer tensor operations per step), and torch's sin/cos may differ from
numpy's in the last bit.
"""

from __future__ import annotations

import math

import torch

from workbench.testbeds.envs.base import TorchEnv

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
HALF_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH
FORCE = 10.0
TAU = 0.02
X_THRESHOLD = 2.4
THETA_THRESHOLD = 12 * 2 * math.pi / 360


class CartPole(TorchEnv):
    env_id = "CartPole-v1"
    state_dim = 4
    obs_dim = 4
    discrete = True
    n_actions = 2
    default_max_episode_steps = 500
    reset_low = (-0.05,) * 4
    reset_high = (0.05,) * 4

    @property
    def return_upper_bound(self) -> float:
        return float(self.max_episode_steps)

    def _setup_constants(self) -> None:
        kw = {"dtype": self.dtype, "device": self.device}
        self._force_of_action = torch.tensor([-FORCE, FORCE], **kw)

    def _allocate(self, num_envs: int) -> None:
        super()._allocate(num_envs)
        kw = {"dtype": self.dtype, "device": self.device}
        self._acc = torch.empty((num_envs, 2), **kw)  # columns: x_acc, theta_acc
        self._ones = torch.ones(num_envs, **kw)
        # views reused at every step: (x, theta), (x_dot, theta_dot), x, theta, theta_dot, accs
        state = self._state
        self._views = (state[:, 0::2], state[:, 1::2], state[:, 0], state[:, 2], state[:, 3],
                       self._acc[:, 0], self._acc[:, 1])

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions, velocities, x, theta, theta_dot, x_acc, theta_acc = self._views
        force = self._force_of_action.index_select(0, actions.view(-1))
        angle = theta.contiguous()  # sin/cos vectorise only on contiguous input
        cos, sin = torch.cos(angle), torch.sin(angle)
        temp = torch.addcmul(force, torch.square(theta_dot), sin, value=POLE_MASS_LENGTH)
        temp.div_(TOTAL_MASS)
        denominator = torch.square(cos).mul_(-MASS_POLE / TOTAL_MASS).add_(4.0 / 3.0)
        denominator.mul_(HALF_LENGTH)
        torch.mul(sin, GRAVITY, out=theta_acc).addcmul_(cos, temp, value=-1.0)
        theta_acc.div_(denominator)
        torch.mul(theta_acc, -POLE_MASS_LENGTH / TOTAL_MASS, out=x_acc).mul_(cos).add_(temp)
        positions.add_(velocities, alpha=TAU)  # Euler: positions first, with old velocities
        velocities.add_(self._acc, alpha=TAU)
        terminated = (x.abs() > X_THRESHOLD).logical_or_(theta.abs() > THETA_THRESHOLD)
        return self._ones.clone(), terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.clone()
