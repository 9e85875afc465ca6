"""The linear-quadratic system, its optimal costs (Riccati) and the exact expected cost of a
policy.

x_{t+1} = A x_t + B u_t + w_t, w_t ~ N(0, W) with W = noise_std^2 I, x_0 ~ N(mu_0, Sigma_0),
and the cost of a horizon of H steps (t = 0..H-1) is sum_t x_t' Q x_t + u_t' R u_t, reported as
an average per step (divided by H).

The instance (``dean``) is the one Dean, Mania, Matni, Recht & Tu (2017, "On the sample
complexity of the linear quadratic regulator") use and Mania, Guy & Recht (2018, ARS) take for
their LQR experiment: A = [[1.01, 0.01, 0], [0.01, 1.01, 0.01], [0, 0.01, 1.01]] (a marginally
unstable graph Laplacian system: every eigenvalue of A exceeds 1), B = I, Q = 1e-3 I, R = I.
The defaults of the rest (x_0 ~ N(0, I), w_t ~ N(0, I), episodes of about 300 steps) are those
of the LQR environment in the ARS code base, read, not run (fidelity: reconstructed); each is an
option of the task.

References computed here:

- ``finite_horizon_optimum``: the optimal expected cost over H steps over all (causal) policies,
  by the backward Riccati recursion P_H = 0,
  P_t = Q + A'P_{t+1}A - A'P_{t+1}B (R + B'P_{t+1}B)^{-1} B'P_{t+1}A; the expected total is
  mu_0'P_0 mu_0 + tr(P_0 Sigma_0) + sum_{t=0}^{H-1} tr(P_{t+1} W).
- ``stationary_optimum``: the infinite-horizon average cost J* = tr(P* W), P* the solution of
  the discrete algebraic Riccati equation (``scipy.linalg.solve_discrete_are``), and its gain
  K* = -(R + B'P*B)^{-1} B'P*A (u = K* x).
- ``stationary_cost``: J(K) = tr(P_K W) of a linear policy u = K x, P_K solving the Lyapunov
  equation P = Q + K'RK + (A+BK)'P(A+BK); inf when A+BK is not stable.
- ``expected_cost``: the exact expected average cost over H of u_t = K x_t + v_t (a linear
  policy: v = 0; an open-loop one: K = 0), from the moments: m_{t+1} = (A+BK) m_t + B v_t,
  S_{t+1} = (A+BK) S_t (A+BK)' + W, cost_t = m'Qm + tr(Q S) + (Km + v)'R(Km + v) + tr(K'RK S).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class LQSystem:
    a: np.ndarray  # (n, n)
    b: np.ndarray  # (n, m)
    q: np.ndarray  # (n, n)
    r: np.ndarray  # (m, m)
    noise_std: float
    x0_mean: np.ndarray  # (n,)
    x0_std: float

    @property
    def n(self) -> int:
        return self.a.shape[0]

    @property
    def m(self) -> int:
        return self.b.shape[1]

    @property
    def w(self) -> np.ndarray:
        return self.noise_std ** 2 * np.eye(self.n)

    @property
    def sigma0(self) -> np.ndarray:
        return self.x0_std ** 2 * np.eye(self.n)


def dean(noise_std: float = 1.0, x0_mean: float = 0.0, x0_std: float = 1.0) -> LQSystem:
    """The instance of Dean et al. (2017) used by Mania et al. (2018); x_0's mean is
    ``x0_mean`` in every coordinate."""
    a = np.array([[1.01, 0.01, 0.0], [0.01, 1.01, 0.01], [0.0, 0.01, 1.01]])
    n = a.shape[0]
    return LQSystem(a, np.eye(n), 1e-3 * np.eye(n), np.eye(n), noise_std,
                    np.full(n, float(x0_mean)), x0_std)


def finite_horizon_optimum(sys: LQSystem, horizon: int) -> float:
    """The least expected average cost per step over ``horizon`` steps (backward Riccati)."""
    a, b, q, r, w = sys.a, sys.b, sys.q, sys.r, sys.w
    p = np.zeros_like(q)  # P_H
    noise_total = 0.0
    for _ in range(horizon):  # P_{t+1} -> P_t, adding tr(P_{t+1} W)
        noise_total += float(np.trace(p @ w))
        gain = np.linalg.solve(r + b.T @ p @ b, b.T @ p @ a)
        p = q + a.T @ p @ a - a.T @ p @ b @ gain
    total = float(sys.x0_mean @ p @ sys.x0_mean + np.trace(p @ sys.sigma0)) + noise_total
    return total / horizon


def stationary_optimum(sys: LQSystem) -> tuple[float, np.ndarray]:
    """(J* = tr(P* W), K*) from the discrete algebraic Riccati equation."""
    from scipy.linalg import solve_discrete_are

    p = solve_discrete_are(sys.a, sys.b, sys.q, sys.r)
    k = -np.linalg.solve(sys.r + sys.b.T @ p @ sys.b, sys.b.T @ p @ sys.a)
    return float(np.trace(p @ sys.w)), k


def stationary_cost(sys: LQSystem, k: np.ndarray) -> float:
    """J(K) = tr(P_K W), the infinite-horizon average cost of u = K x (inf if unstable)."""
    from scipy.linalg import solve_discrete_lyapunov

    closed = sys.a + sys.b @ k
    if max(abs(np.linalg.eigvals(closed))) >= 1.0:
        return math.inf
    p = solve_discrete_lyapunov(closed.T, sys.q + k.T @ sys.r @ k)
    return float(np.trace(p @ sys.w))


def expected_cost(sys: LQSystem, horizon: int, k: np.ndarray | None = None,
                  v: np.ndarray | None = None) -> float:
    """The exact expected average cost per step over ``horizon`` of u_t = K x_t + v_t
    (``k`` None: 0; ``v`` (horizon, m) None: 0)."""
    k = np.zeros((sys.m, sys.n)) if k is None else k
    closed = sys.a + sys.b @ k
    mean, cov = sys.x0_mean.astype(float), sys.sigma0.astype(float)
    total = 0.0
    for t in range(horizon):
        u_mean = k @ mean + (0.0 if v is None else v[t])
        total += float(mean @ sys.q @ mean + np.trace(sys.q @ cov) + u_mean @ sys.r @ u_mean
                       + np.trace(k.T @ sys.r @ k @ cov))
        if not math.isfinite(total):
            return math.inf
        mean = closed @ mean + (0.0 if v is None else sys.b @ v[t])
        cov = closed @ cov @ closed.T + sys.w
    return total / horizon


def rollout_costs(sys: LQSystem, horizon: int, gains: torch.Tensor, signals: torch.Tensor,
                  generator: torch.Generator) -> torch.Tensor:
    """Sampled average costs per step of P policies u_t = K_p x_t + v_{p,t}, one rollout each
    from its own draws of x_0 and the noise: ``gains`` (P, m, n), ``signals`` (P, H, m);
    returns (P,) float64. The draws come from ``generator`` (CPU) in a fixed order."""
    p_count = gains.shape[0]
    dtype = torch.float64
    a, b, q, r = (torch.as_tensor(x, dtype=dtype) for x in (sys.a, sys.b, sys.q, sys.r))
    x0_noise = torch.randn(p_count, sys.n, generator=generator, dtype=dtype)
    noise = torch.randn(horizon, p_count, sys.n, generator=generator, dtype=dtype)
    x = torch.as_tensor(sys.x0_mean, dtype=dtype) + sys.x0_std * x0_noise
    total = torch.zeros(p_count, dtype=dtype)
    for t in range(horizon):
        u = torch.einsum("pmn,pn->pm", gains, x) + signals[:, t]
        total = total + ((x @ q) * x).sum(-1) + ((u @ r) * u).sum(-1)
        x = x @ a.T + u @ b.T + sys.noise_std * noise[t]
    return total / horizon
