"""Augmented Random Search's update direction and the two policies it searches.

ARS (Mania, Guy & Recht, 2018, "Simple random search of static linear policies is competitive
for reinforcement learning"), versions V1 and V1-t: with N directions delta_k ~ N(0, I) and
the returns r(theta + nu delta_k), r(theta - nu delta_k) of one rollout each,

    theta <- theta + alpha / (b sigma_R) * sum_{k in top-b} [r(theta + nu delta_k)
                                                            - r(theta - nu delta_k)] delta_k,

top-b the b directions with the largest max(r+, r-) (V1: b = N) and sigma_R the standard
deviation of the 2b returns used (population, ddof 0; 1 where they are all equal, and 1 when
``normalise`` is off: Basic Random Search, the paper's Algorithm 1 with b = N). V2's online
state normalisation is not implemented (this LQR's states share one scale).

Here ``ars_direction`` returns g = 1/(b sigma_R) sum [r+ - r-] delta: the step-size slot's
optimizer is handed -g as the gradient of the cost, so ``constant`` (theta <- theta - alpha
(-g)) is the paper's update with alpha its ``lr``, and any other step-size method takes its
own step along the same estimate.

Policies (theta flat):

- ``linear``: u = K x, theta = K row by row (m x n);
- ``oscillator``: the open-loop baseline of Raffin et al. (2024, "An open-loop baseline for
  reinforcement learning locomotion tasks"), u_i(t) = a_i sin(omega t + phi_i) + b_i with one
  omega shared by all inputs; theta = (a_1..a_m, phi_1..phi_m, b_1..b_m, omega), t the step
  index 0..H-1. It ignores the state. (Raffin et al. tune these by black-box optimisation and
  track the target with a PD controller; here the target is the input itself and ARS searches
  it.)
"""

from __future__ import annotations

import torch


def ars_direction(deltas: torch.Tensor, r_plus: torch.Tensor, r_minus: torch.Tensor, *,
                  top_b: int | None = None, normalise: bool = True) -> tuple[torch.Tensor, float]:
    """(g, sigma_R): the ascent direction of the returns from ``deltas`` (N, d) and the returns
    (N,) of theta +- nu delta_k (see the module docstring)."""
    n = deltas.shape[0]
    b = n if top_b is None else max(1, min(int(top_b), n))
    best = torch.maximum(r_plus, r_minus)
    # stable: ties keep the directions' order
    keep = torch.sort(best, descending=True, stable=True).indices[:b]
    plus, minus = r_plus[keep], r_minus[keep]
    sigma = 1.0
    if normalise:
        spread = float(torch.cat([plus, minus]).std(correction=0))
        sigma = spread if spread > 0.0 else 1.0
    g = ((plus - minus).unsqueeze(1) * deltas[keep]).sum(0) / (b * sigma)
    return g, sigma


def parameter_count(policy: str, n: int, m: int) -> int:
    return m * n if policy == "linear" else 3 * m + 1


def initial_parameters(policy: str, n: int, m: int, omega: float) -> torch.Tensor:
    """theta_0: K = 0 (linear); a = phi = b = 0 and omega = ``omega`` (oscillator)."""
    theta = torch.zeros(parameter_count(policy, n, m), dtype=torch.float64)
    if policy == "oscillator":
        theta[-1] = omega
    return theta


def oscillator_signal(thetas: torch.Tensor, m: int, horizon: int) -> torch.Tensor:
    """u_{p,t,i} = a_i sin(omega t + phi_i) + b_i for each row p of ``thetas`` (P, 3m + 1):
    (P, horizon, m)."""
    amp, phase, bias = thetas[:, :m], thetas[:, m:2 * m], thetas[:, 2 * m:3 * m]
    omega = thetas[:, 3 * m:3 * m + 1]  # (P, 1)
    t = torch.arange(horizon, dtype=thetas.dtype)
    angle = omega.unsqueeze(1) * t.view(1, -1, 1) + phase.unsqueeze(1)  # (P, H, m)
    return amp.unsqueeze(1) * torch.sin(angle) + bias.unsqueeze(1)


def as_policies(policy: str, thetas: torch.Tensor, n: int, m: int,
                horizon: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(gains (P, m, n), signals (P, H, m)) of the parameter rows ``thetas`` (P, d)."""
    p = thetas.shape[0]
    if policy == "linear":
        return thetas.reshape(p, m, n), torch.zeros(p, horizon, m, dtype=thetas.dtype)
    return (torch.zeros(p, m, n, dtype=thetas.dtype),
            oscillator_signal(thetas, m, horizon))
