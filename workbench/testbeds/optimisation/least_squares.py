"""Least squares with a set condition number; f* exact; minibatch capable.

f(x) = 1/(2n) ||A x - b||^2 = mean_i 1/2 (<a_i, x> - b_i)^2 with A = sqrt(n) U diag(s) V^T
(U: n x d with orthonormal columns, V: d x d orthogonal, both random), s_j^2 log-spaced in
[1/kappa, 1]. So A^T A / n = V diag(s^2) V^T has eigenvalues in [1/kappa, 1] exactly: L = 1,
mu = 1/kappa. b = A x_true + noise * N(0, I) with x_true ~ N(0, I). f* = f(x*) with x* the
least-squares solution (``torch.linalg.lstsq`` in float64). Needs n_samples >= dim.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field, model_validator

from workbench.common import seeds
from workbench.testbeds.base import OneThreadParams, Task, cpu_threads
from workbench.testbeds.optimisation.loop import (
    Problem,
    Pure,
    batches_per_epoch,
    matvec,
    pure_problem,
    random_start,
    rows,
    with_horizon,
)
from workbench.testbeds.optimisation.seed_axis import train_one, train_seeds


class LeastSquaresParams(OneThreadParams):
    n_samples: int = Field(1000, ge=1, le=10_000_000)
    dim: int = Field(50, ge=1, le=5_000)
    condition_number: float = Field(100.0, ge=1.0, le=1e12,
                                    description="of A^T A / n (its eigenvalues span [1/k, 1])")
    noise: float = Field(0.1, ge=0.0, description="std of the noise added to b")
    batch_size: int | None = Field(None, ge=1, description="None: full batch")
    data_seed: int | None = Field(None, description="None: the run's seed draws the problem")
    init_scale: float = Field(1.0, ge=0.0, description="x_0 ~ init_scale * N(0, I)")
    dtype: Literal["float32", "float64"] = "float64"

    @model_validator(mode="after")
    def _tall(self):
        if self.n_samples < self.dim:
            raise ValueError(f"n_samples ({self.n_samples}) must be at least dim ({self.dim})")
        return self


def make_problem(params: LeastSquaresParams, seed: int):
    """(A, b, x*, f*, L) drawn on the CPU in float64."""
    gen = seeds.torch_generator(seed, "data")
    n, d = params.n_samples, params.dim
    u, _ = torch.linalg.qr(torch.randn(n, d, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    eigenvalues = torch.logspace(0.0, -math.log10(params.condition_number), d,
                                 dtype=torch.float64)
    a = math.sqrt(n) * (u * eigenvalues.sqrt()) @ v.T
    x_true = torch.randn(d, generator=gen, dtype=torch.float64)
    b = a @ x_true + params.noise * torch.randn(n, generator=gen, dtype=torch.float64)
    x_star = torch.linalg.lstsq(a, b[:, None]).solution[:, 0]
    f_star = float(0.5 * ((a @ x_star - b) ** 2).mean())
    smoothness = float(torch.linalg.eigvalsh(a.T @ a / n).max())
    return a, b, x_star, f_star, smoothness


def build_problem(params: LeastSquaresParams, seed: int, device: torch.device,
                  total_steps: int) -> Problem:
    data_seed = seed if params.data_seed is None else params.data_seed
    a, b, _, f_star, smoothness = make_problem(params, data_seed)
    dtype = getattr(torch, params.dtype)
    a, b = a.to(device, dtype), b.to(device, dtype)
    x = random_start(params.dim, params.init_scale, seed, device, dtype)

    def sample_loss(variables, ai, bi):
        (v,) = variables
        return 0.5 * (ai @ v - bi) ** 2

    info = {"f_star": f_star, "loss_lower_bound": f_star, "smoothness": smoothness,
            "batches_per_epoch": batches_per_epoch(params.n_samples, params.batch_size),
            "total_steps": total_steps}
    pure = Pure((a, b, torch.tensor(f_star, dtype=torch.float64, device=device)), _loss,
                _metrics)
    return pure_problem([x], params.n_samples, pure, info, sample_loss=sample_loss,
                        data=(a, b))


def _loss(variables, data, idx):
    (x,), (a, b, _) = variables, data
    ab, bb = (a, b) if idx is None else rows(idx, a, b)
    return 0.5 * ((matvec(ab, x) - bb) ** 2).mean(-1)


def _metrics(variables, data):
    loss = _loss(variables, data, None)
    return {"train/loss": loss, "train/suboptimality": loss.double() - data[2]}


class LeastSquares(Task):
    name = "least_squares"
    description = "least squares 1/(2n)||Ax - b||^2 with condition number kappa; f* exact"
    slots = ("step_size", "batch_size")
    default_methods = {"batch_size": "constant"}
    provides = frozenset({"closure", "f_star", "loss_lower_bound", "smoothness",
                          "per_sample_grads"})
    Params = LeastSquaresParams
    metrics = {"train/loss": "minimize", "train/suboptimality": "minimize",
               "train/grad_norm": "minimize"}
    bounds = {"train/loss": (0.0, None), "train/suboptimality": (0.0, None)}  # f* exact
    default_objective = "train/suboptimality"

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            problem = with_horizon(build_problem(params, seed, device, budget.steps), budget,
                                   params.batch_size)
            return train_one(problem, methods["step_size"], batch_size=params.batch_size,
                             budget=budget, seed=seed, device=device, log=log,
                             batch_method=methods.get("batch_size"))

    def run_seeds(self, params, methods, *, seeds, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            problems = [with_horizon(build_problem(params, seed, device, budget.steps), budget,
                                     params.batch_size) for seed in seeds]
            return train_seeds(problems, methods["step_size"], batch_size=params.batch_size,
                               budget=budget, seeds=seeds, device=device, log=log,
                               batch_method=methods.get("batch_size"))
