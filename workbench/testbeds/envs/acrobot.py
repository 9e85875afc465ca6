"""Acrobot-v1 as batched tensors, step for step Gymnasium 1.x's ``AcrobotEnv``.

Two links (masses 1 kg, lengths 1 m, centres of mass at 0.5 m, moments of inertia 1), torque
-1, 0 or +1 on the joint between them (actions 0, 1, 2; Gymnasium's default torque noise is 0).
The equations of motion are the book version of Sutton & Barto (1998), section 11.3:
    d1 = m1 lc1^2 + m2 (l1^2 + lc2^2 + 2 l1 lc2 cos th2) + I1 + I2
    d2 = m2 (lc2^2 + l1 lc2 cos th2) + I2
    phi2 = m2 lc2 g cos(th1 + th2 - pi/2)
    phi1 = -m2 l1 lc2 dth2^2 sin th2 - 2 m2 l1 lc2 dth2 dth1 sin th2
           + (m1 lc1 + m2 l1) g cos(th1 - pi/2) + phi2
    ddth2 = (a + d2/d1 phi1 - m2 l1 lc2 dth1^2 sin th2 - phi2) / (m2 lc2^2 + I2 - d2^2/d1)
    ddth1 = -(d2 ddth2 + phi1) / d1
integrated by one classical Runge-Kutta (RK4) step over dt = 0.2 s, as Gymnasium's ``rk4`` does
with the sample times [0, dt].  Then both angles are wrapped into [-pi, pi] (by whole turns, as
Gymnasium's ``wrap``) and the velocities clipped to [-4 pi, 4 pi] and [-9 pi, 9 pi].
Terminated when -cos th1 - cos(th1 + th2) > 1 (the tip above the bar); reward -1 per step, 0 on
the terminating one; truncated after 500 steps.  Reset: all four state components uniform in
[-0.1, 0.1), drawn in float32 as Gymnasium does.  Observation: (cos th1, sin th1, cos th2,
sin th2, dth1, dth2).  Operations keep Gymnasium's order, so float64 trajectories agree with it
to rounding (torch's and numpy's sin/cos can differ in the last bit).
"""

from __future__ import annotations

import math

import torch

from workbench.testbeds.envs.base import TorchEnv

M1 = M2 = 1.0  # link masses [kg]
L1 = 1.0  # length of link 1 [m]
LC1 = LC2 = 0.5  # positions of the centres of mass [m]
I1 = I2 = 1.0  # moments of inertia
G = 9.8
DT = 0.2
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi
TORQUES = (-1.0, 0.0, 1.0)
# a 0.2 s step turns a link by less than 2 pi in practice (at most 1.77 pi outside [-pi, pi]
# in 12 M random and swinging steps); two passes remove up to two whole turns exactly as
# Gymnasium's repeated subtraction does
WRAP_PASSES = 2


def derivatives(state: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
    """d/dt of the (n, 4) states (th1, th2, dth1, dth2) under a constant (n,) torque."""
    theta1, theta2, dtheta1, dtheta2 = state.unbind(1)
    cos2, sin2 = torch.cos(theta2), torch.sin(theta2)
    d1 = M1 * LC1**2 + M2 * (L1**2 + LC2**2 + 2 * L1 * LC2 * cos2) + I1 + I2
    d2 = M2 * (LC2**2 + L1 * LC2 * cos2) + I2
    phi2 = M2 * LC2 * G * torch.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (-M2 * L1 * LC2 * dtheta2**2 * sin2
            - 2 * M2 * L1 * LC2 * dtheta2 * dtheta1 * sin2
            + (M1 * LC1 + M2 * L1) * G * torch.cos(theta1 - math.pi / 2) + phi2)
    ddtheta2 = ((torque + d2 / d1 * phi1 - M2 * L1 * LC2 * dtheta1**2 * sin2 - phi2)
                / (M2 * LC2**2 + I2 - d2**2 / d1))
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), dim=1)


def rk4_step(state: torch.Tensor, torque: torch.Tensor, dt: float) -> torch.Tensor:
    """One classical Runge-Kutta step of ``derivatives`` over ``dt``."""
    half = dt / 2.0
    k1 = derivatives(state, torque)
    k2 = derivatives(state + half * k1, torque)
    k3 = derivatives(state + half * k2, torque)
    k4 = derivatives(state + dt * k3, torque)
    return state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


class Acrobot(TorchEnv):
    env_id = "Acrobot-v1"
    state_dim = 4
    obs_dim = 6
    discrete = True
    n_actions = 3
    default_max_episode_steps = 500
    return_upper_bound = 0.0
    reset_low = (-0.1,) * 4
    reset_high = (0.1,) * 4
    reset_draw_dtype = torch.float32

    def _setup_constants(self) -> None:
        kw = {"dtype": self.dtype, "device": self.device}
        self._torque_of_action = torch.tensor(TORQUES, **kw)
        self._max_velocity = torch.tensor([MAX_VEL_1, MAX_VEL_2], **kw)
        self._min_velocity = -self._max_velocity

    def _advance(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        torque = self._torque_of_action.index_select(0, actions.view(-1))
        new = rk4_step(self._state, torque, DT)
        angles, velocities = new[:, :2], new[:, 2:]
        turn = math.pi - (-math.pi)
        for _ in range(WRAP_PASSES):
            torch.where(angles > math.pi, angles - turn, angles, out=angles)
            torch.where(angles < -math.pi, angles + turn, angles, out=angles)
        torch.clamp(velocities, self._min_velocity, self._max_velocity, out=velocities)
        self._state.copy_(new)
        theta1, theta2 = angles.unbind(1)
        height = torch.cos(theta1).neg_().sub_(torch.cos(theta2 + theta1))
        terminated = height > 1.0
        return terminated.to(self.dtype).sub_(1.0), terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        angles = state[:, :2]
        trig = torch.stack((torch.cos(angles), torch.sin(angles)), dim=2)  # cos1 sin1 cos2 sin2
        return torch.cat((trig.view(-1, 4), state[:, 2:]), dim=1)
