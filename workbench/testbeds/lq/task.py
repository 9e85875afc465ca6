"""The linear-quadratic testbed's task: Augmented Random Search on the LQR instance of Dean et
al. (2017) (``lqr-ars``), with a linear state-feedback policy or the open-loop oscillator
baseline (``policy``).

Slots: ``step_size`` (alpha of every ARS update: the optimizer is handed -g, g ARS's ascent
direction, as the cost's gradient; see ``ars``) and ``batch_size`` (N, the directions of every
update; 2N rollouts). ARS itself is the testbed's trainer, its options (``nu``, ``top_b``,
``normalise``) the task's parameters, with the paper's V1 as the default (b = N, sigma_R on).

Per update: draw N directions (the seed's ``actions`` stream: the exploration is in parameter
space), roll out theta +- nu delta_k once each (H steps, fresh x_0 and noise from the ``env``
stream), compute g, step. Logged
at every update: the exact expected cost of the current policy over the horizon
(``train/expected_cost``), its gap to the DARE controller's on the same horizon
(``train/relative_cost_gap``, the objective), the linear policy's infinite-horizon gap to the
DARE optimum (``train/stationary_cost_gap``; not logged for the oscillator, which has no
stationary cost on this unstable system), the rollouts' mean return (-H x the mean sampled cost
per step), |g| (``train/grad_norm``), N, the step size and the costs. ``budget.samples`` counts
environment steps (2 N H per update), as the control testbed's does.
"""

from __future__ import annotations

import math
import time
from typing import Literal

import torch
from pydantic import Field, model_validator

from workbench.common import seeds
from workbench.families import open_update_slots, step_size_taken
from workbench.testbeds.base import OneThreadParams, Task, cpu_threads
from workbench.testbeds.lq.ars import ars_direction, as_policies, initial_parameters
from workbench.testbeds.lq.system import (
    LQSystem,
    dean,
    expected_cost,
    finite_horizon_optimum,
    rollout_costs,
    stationary_cost,
    stationary_optimum,
)


class LQParams(OneThreadParams):
    policy: Literal["linear", "oscillator"] = Field(
        "linear", description="linear: u = Kx; oscillator: u_i = a_i sin(omega t + phi_i) + b_i")
    horizon: int = Field(300, ge=1, le=10_000, description="steps per rollout and of the cost")
    noise_std: float = Field(1.0, ge=0.0, description="std of each process-noise coordinate")
    x0_mean: float = Field(0.0, description="mean of each coordinate of x_0")
    x0_std: float = Field(1.0, ge=0.0, description="std of each coordinate of x_0")
    directions: int = Field(8, ge=1, le=10_000, description="N, directions per update (the "
                            "batch-size slot's base size)")
    top_b: int | None = Field(None, ge=1, description="b, the directions kept (None: all N, "
                              "ARS V1; b < N: V1-t)")
    nu: float = Field(0.01, gt=0.0, description="std of the exploration noise nu (the "
                      "paper's range 0.01-0.03; the smoothing biases the fixed point: "
                      "README: lq)")
    normalise: bool = Field(True, description="divide by sigma_R, the std of the 2b returns "
                            "used (off: basic random search)")
    omega: float = Field(0.1, description="the oscillator's starting frequency (rad per step)")

    @model_validator(mode="after")
    def _something_to_control(self):
        if self.noise_std == 0 and self.x0_std == 0 and self.x0_mean == 0:
            raise ValueError("noise_std, x0_std and x0_mean are all 0: the state stays 0 and "
                             "every policy costs 0")
        return self


def system_of(params: LQParams) -> LQSystem:
    return dean(params.noise_std, params.x0_mean, params.x0_std)


class LQRARS(Task):
    name = "lqr-ars"
    description = ("ARS (V1/V1-t) on the LQR instance of Dean et al.: a linear policy or an "
                   "open-loop oscillator; cost gap to the Riccati controller")
    slots = ("step_size", "batch_size")
    default_methods = {"step_size": "constant", "batch_size": "constant"}
    provides = frozenset()
    Params = LQParams
    metrics = {"train/relative_cost_gap": "minimize", "train/stationary_cost_gap": "minimize",
               "train/expected_cost": "minimize", "train/return": "maximize"}
    bounds = {"train/return": (None, 0.0)}
    default_objective = "train/relative_cost_gap"

    @classmethod
    def metric_bounds(cls, params):
        """The horizon's optimum over all policies (backward Riccati) bounds the gap below."""
        system = system_of(params)
        _, k_star = stationary_optimum(system)
        reference = expected_cost(system, params.horizon, k_star)
        floor = (finite_horizon_optimum(system, params.horizon) - reference) / reference
        return {**cls.bounds, "train/relative_cost_gap": (floor, None)}

    @classmethod
    def objective_problem(cls, params, metric, methods):
        if metric == "train/stationary_cost_gap" and params.policy != "linear":
            return "train/stationary_cost_gap is logged for policy: linear only"
        return None

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            return train(params, methods, seed=seed, budget=budget, log=log)


def train(params: LQParams, methods, *, seed: int, budget, log) -> dict:
    """ARS on the CPU in float64 (the system is a few numbers: nothing to gain elsewhere)."""
    system = system_of(params)
    n, m, horizon = system.n, system.m, params.horizon
    j_star, k_star = stationary_optimum(system)
    reference = expected_cost(system, horizon, k_star)
    theta = initial_parameters(params.policy, n, m, params.omega).requires_grad_(True)
    per_direction = 2 * horizon  # environment steps a direction costs
    slots = open_update_slots(
        methods, [theta], per_update=1, batch=params.directions, samples=2**40,
        updates=budget.planned_steps(params.directions * per_direction))
    optimizer, batch_slot = slots.optimizer, slots.batch
    directions = slots.first_batch or params.directions
    draw_directions = seeds.torch_generator(seed, "actions")  # parameter-space exploration
    draw_rollouts = seeds.torch_generator(seed, "env")  # x_0 and the process noise

    def evaluate() -> dict[str, float]:
        current = theta.detach()
        gains, signals = as_policies(params.policy, current.unsqueeze(0), n, m, horizon)
        cost = expected_cost(system, horizon, gains[0].numpy(), signals[0].numpy())
        metrics = {"train/expected_cost": cost,
                   "train/relative_cost_gap": (cost - reference) / reference}
        if params.policy == "linear" and j_star > 0:  # no noise: every stable K costs 0
            metrics["train/stationary_cost_gap"] = (
                (stationary_cost(system, gains[0].numpy()) - j_star) / j_star)
        return metrics

    env_steps, used_directions, seconds, update = 0, 0, 0.0, 0
    metrics = {**evaluate(), "batch/size": float(directions), "cost/env_steps": 0.0,
               "cost/samples": 0.0, "cost/updates": 0.0, "time/wall_seconds": 0.0}
    log(0, metrics)
    diverged = False
    while update < budget.steps:
        started = time.perf_counter()
        with torch.no_grad():
            deltas = torch.randn(directions, theta.numel(), generator=draw_directions,
                                 dtype=torch.float64)
            current = theta.detach()
            thetas = torch.cat([current + params.nu * deltas, current - params.nu * deltas])
            gains, signals = as_policies(params.policy, thetas, n, m, horizon)
            costs = rollout_costs(system, horizon, gains, signals, draw_rollouts)
            rewards = -horizon * costs  # each rollout's undiscounted return
            g, _ = ars_direction(deltas, rewards[:directions], rewards[directions:],
                                 top_b=params.top_b, normalise=params.normalise)
        mean_cost = costs.mean()

        def closure(backward: bool = True, g: torch.Tensor = g,
                    mean_cost: torch.Tensor = mean_cost) -> torch.Tensor:
            """The rollouts' mean cost per step; with ``backward``, -g as the gradient."""
            if backward:
                theta.grad = -g.clone()
            return mean_cost

        optimizer.step(closure)
        update += 1
        env_steps += directions * per_direction
        used_directions += directions
        seconds += time.perf_counter() - started
        grad_norm = float(g.norm())
        metrics = {
            **evaluate(), "train/return": float(rewards.mean()), "train/grad_norm": grad_norm,
            "method/step_size": step_size_taken(optimizer), "batch/size": float(directions),
            **batch_slot.diagnostics(), "cost/env_steps": float(env_steps),
            "cost/samples": float(env_steps), "cost/updates": float(update),
            "time/wall_seconds": seconds,
        }
        log(update, metrics)
        if not (bool(torch.isfinite(theta).all()) and math.isfinite(float(mean_cost))):
            diverged = True
            break
        wanted = batch_slot.after_step(update, loss=float(mean_cost), grad_sq=grad_norm ** 2,
                                       batch_size=directions, samples=used_directions)
        if wanted is not None:
            directions = wanted
        if budget.spent(env_steps, seconds):
            break
    return {**metrics, "steps": update, "diverged": diverged, "env_steps": env_steps}
