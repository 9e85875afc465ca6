"""Binary logistic regression on a generated, seeded data set.

Data: x ~ N(0, I_d); a unit vector w* drawn at random; y = sign(<x, w*>), flipped with
probability ``label_noise``; each point is pushed ``margin`` away from the boundary along
y w*. Loss: f(w) = mean_i log(1 + exp(-y_i <x_i, w>)) + (l2 / 2) ||w||^2 >= 0.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from workbench.tasks.base import Task, TaskParams
from workbench.tasks.gradient_descent import Problem, batches_per_epoch, train


class LogRegParams(TaskParams):
    n_samples: int = Field(512, ge=2, le=10_000_000)
    dim: int = Field(20, ge=1, le=100_000)
    margin: float = Field(0.1, ge=0.0)
    label_noise: float = Field(0.0, ge=0.0, lt=0.5)
    l2: float = Field(0.0, ge=0.0)
    batch_size: int | None = Field(None, ge=1, description="None: full batch")
    data_seed: int | None = Field(None, description="None: the run's seed draws the data")
    init_scale: float = Field(1.0, ge=0.0)
    dtype: Literal["float32", "float64"] = "float64"


def make_data(params: LogRegParams, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (n, d) and labels in {-1, +1}, drawn on the CPU so every device sees the same."""
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, params.dtype)
    w_star = torch.randn(params.dim, generator=gen, dtype=dtype)
    w_star /= w_star.norm()
    x = torch.randn(params.n_samples, params.dim, generator=gen, dtype=dtype)
    y = torch.sign(x @ w_star)
    y[y == 0] = 1.0
    flips = torch.rand(params.n_samples, generator=gen, dtype=dtype) < params.label_noise
    x += params.margin * y[:, None] * w_star[None, :]
    y[flips] *= -1.0
    return x, y


class LogReg(Task):
    name = "logreg"
    description = "logistic regression on generated Gaussian classes with a margin"
    slots = ("step_size", "batch_size")
    default_methods = {"batch_size": "constant"}
    provides = frozenset({"closure", "loss_lower_bound", "per_sample_grads"})
    Params = LogRegParams
    metrics = {
        "train/loss": "minimize",
        "train/accuracy": "maximize",
        "train/grad_norm": "minimize",
    }
    default_objective = "train/loss"

    def run(self, params, methods, *, seed, device, budget, log):
        data_seed = seed if params.data_seed is None else params.data_seed
        x, y = (t.to(device) for t in make_data(params, data_seed))
        gen = torch.Generator().manual_seed(seed + 1)
        w0 = params.init_scale * torch.randn(params.dim, generator=gen, dtype=x.dtype)
        w = w0.to(device).requires_grad_(True)

        def batch_loss(idx):
            xb, yb = (x, y) if idx is None else (x[idx], y[idx])
            loss = F.softplus(-yb * (xb @ w)).mean()
            return loss + 0.5 * params.l2 * (w @ w) if params.l2 else loss

        def sample_loss(variables, xi, yi):
            (v,) = variables
            return F.softplus(-yi * (xi @ v)) + 0.5 * params.l2 * (v @ v)

        @torch.no_grad()
        def evaluate():
            margins = y * (x @ w)
            loss = F.softplus(-margins).mean() + 0.5 * params.l2 * (w @ w)
            return {
                "train/loss": float(loss),
                "train/accuracy": float((margins > 0).to(x.dtype).mean()),
            }

        info = {
            "loss_lower_bound": 0.0,
            "batches_per_epoch": batches_per_epoch(params.n_samples, params.batch_size),
            "total_steps": budget.steps,
        }
        problem = Problem([w], params.n_samples, batch_loss, evaluate, info,
                          sample_loss=sample_loss, data=(x, y))
        optimizer = methods["step_size"].build([w], info)
        return train(problem, optimizer, batch_size=params.batch_size, budget=budget,
                     seed=seed, device=device, log=log,
                     batch_method=methods.get("batch_size"))
