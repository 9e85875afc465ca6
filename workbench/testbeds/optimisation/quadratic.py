"""A strongly convex quadratic with a set condition number; f* is known exactly.

f(x) = 1/2 x^T A x - b^T x with A = Q diag(lambda) Q^T, eigenvalues log-spaced in
[1/kappa, 1] (L = 1, mu = 1/kappa), Q a random orthogonal matrix, b ~ N(0, I).
x* = A^{-1} b and f* = -1/2 b^T A^{-1} b, computed in float64. Full batch only. Gives its
Hessian-vector product A v (``hvp``) for second-order step sizes.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from workbench.common import seeds
from workbench.testbeds.base import OneThreadParams, Task, cpu_threads
from workbench.testbeds.optimisation.loop import (
    Problem,
    Pure,
    matvec,
    pure_problem,
    random_start,
    with_horizon,
)
from workbench.testbeds.optimisation.seed_axis import train_one, train_seeds


class QuadraticParams(OneThreadParams):
    dim: int = Field(50, ge=1, le=5_000)
    condition_number: float = Field(100.0, ge=1.0)
    data_seed: int | None = Field(None, description="None: the run's seed draws the problem")
    init_scale: float = Field(1.0, ge=0.0)
    dtype: Literal["float32", "float64"] = "float64"


def make_problem(params: QuadraticParams, seed: int):
    """(A, b, f*) drawn on the CPU in float64."""
    gen = seeds.torch_generator(seed, "data")
    d = params.dim
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    eigenvalues = torch.logspace(0.0, -torch.log10(torch.tensor(params.condition_number)), d,
                                 dtype=torch.float64)
    a = q @ torch.diag(eigenvalues) @ q.T
    a = 0.5 * (a + a.T)
    b = torch.randn(d, generator=gen, dtype=torch.float64)
    f_star = float(-0.5 * b @ torch.linalg.solve(a, b))
    return a, b, f_star


class Quadratic(Task):
    name = "quadratic"
    description = "strongly convex quadratic with condition number kappa; f* exact"
    slots = ("step_size",)
    provides = frozenset({"closure", "f_star", "loss_lower_bound", "hvp"})
    Params = QuadraticParams
    metrics = {"train/loss": "minimize", "train/suboptimality": "minimize",
               "train/grad_norm": "minimize"}
    bounds = {"train/suboptimality": (0.0, None)}  # f* exact; the loss itself may be < 0
    default_objective = "train/suboptimality"

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            problem = with_horizon(build_problem(params, seed, device, budget.steps), budget, None)
            return train_one(problem, methods["step_size"], batch_size=None, budget=budget,
                             seed=seed, device=device, log=log)

    def run_seeds(self, params, methods, *, seeds, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            problems = [with_horizon(build_problem(params, seed, device, budget.steps), budget,
                                     None) for seed in seeds]
            return train_seeds(problems, methods["step_size"], batch_size=None, budget=budget,
                               seeds=seeds, device=device, log=log)


def _loss(variables, data, idx):
    (x,), (a, b, _) = variables, data
    return 0.5 * (x * matvec(a, x)).sum(-1) - (b * x).sum(-1)


def _hvp(variables, data, idx, vectors):
    """A v (``REQUIRABLE["hvp"]``; the Hessian of the loss is A everywhere)."""
    (v,), (a, _, _) = vectors, data
    return [matvec(a, v)]


def _metrics(variables, data):
    loss = _loss(variables, data, None)
    return {"train/loss": loss, "train/suboptimality": loss.double() - data[2]}


def build_problem(params: QuadraticParams, seed: int, device: torch.device,
                  total_steps: int) -> Problem:
    data_seed = seed if params.data_seed is None else params.data_seed
    a, b, f_star = make_problem(params, data_seed)
    dtype = getattr(torch, params.dtype)
    a, b = a.to(device, dtype), b.to(device, dtype)
    x = random_start(params.dim, params.init_scale, seed, device, dtype)
    info = {"f_star": f_star, "loss_lower_bound": f_star, "batches_per_epoch": 1,
            "total_steps": total_steps, "smoothness": 1.0}
    data = (a, b, torch.tensor(f_star, dtype=torch.float64, device=device))
    return pure_problem([x], 1, Pure(data, _loss, _metrics, inputs={"hvp": _hvp}), info)
