"""Constrained convex problems for Frank-Wolfe: a portfolio on the simplex and least squares
on an l1 ball. Full batch; the task provides a linear minimisation oracle (``lmo``).

- ``portfolio``: f(x) = -(1/n) sum_i log <r_i, x> over the probability simplex, with returns
  r_ij = exp(m_j + s_j z_ij) > 0 (asset drift m_j ~ 0.02 N(0, 1), volatility s_j ~ U[0.05,
  0.2], z_ij ~ N(0, 1); seeded). LMO: the vertex e_j with j = argmin_j g_j. ``smoothness``
  is a guaranteed bound along the simplex (directions d with sum d = 0, the only ones
  Frank-Wolfe takes): on the simplex <r_i, x> >= m_i = min_j r_ij, so
  d^T H(x) d = (1/n) sum_i <r_i, d>^2 / <r_i, x>^2 <= lambda_max(P S^T S P / n) ||d||^2 with
  S = diag(1/m) R and P = I - 11^T/d (about twice the curvature at the optimum).
- ``l1_least_squares``: f(x) = 1/(2n) ||A x - b||^2 over {||x||_1 <= radius}, with A and b
  drawn as in the ``least_squares`` task (eigenvalues of A^T A / n in [1/kappa, 1], so the
  smoothness is L = 1; the unconstrained solution lies far outside the ball). LMO: the vertex
  -radius sign(g_j) e_j with j = argmax_j |g_j|.

f* is computed at construction in float64: accelerated projected gradient (FISTA with
backtracking and restarts) identifies the optimal face, Newton's method on that face (its KKT
system) polishes the point, until the Frank-Wolfe gap of the point, an upper bound on its
suboptimality, is below 1e-12 (typically ~1e-15; ``info["f_star_accuracy"]`` holds the gap
reached). The run starts at the barycentre (simplex: 1/d; ball: the origin) or at a vertex
(e_1, or radius * e_1). Logged each step: ``train/fw_gap`` = <g, x - s> at the current
point (an upper bound on f - f*), ``train/suboptimality`` and ``train/infeasibility``
(distance-like violation of the constraint, 0 for Frank-Wolfe iterates; methods without an
LMO leave the set). On a seed axis (``run_seeds``) each seed keeps its own data, f*,
smoothness and start; the LMO acts row by row on the stacked gradients.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
from pydantic import Field, ValidationInfo, field_validator, model_validator

from workbench.common import seeds
from workbench.testbeds.base import Task, TaskParams
from workbench.testbeds.optimisation.least_squares import LeastSquaresParams
from workbench.testbeds.optimisation.least_squares import make_problem as make_least_squares
from workbench.testbeds.optimisation.loop import (
    Problem,
    Pure,
    matvec,
    pure_problem,
    with_horizon,
)
from workbench.testbeds.optimisation.seed_axis import train_one, train_seeds

_L1_KEYS = ("radius", "condition_number", "noise")


class SimplexParams(TaskParams):
    problem: Literal["portfolio", "l1_least_squares"] = "portfolio"
    dim: int = Field(50, ge=2, le=5_000, description="assets / variables")
    n_samples: int = Field(500, ge=1, le=1_000_000, description="return periods / rows of A")
    radius: float = Field(1.0, gt=0.0, description="l1_least_squares: radius of the l1 ball")
    condition_number: float = Field(100.0, ge=1.0, le=1e12,
                                    description="l1_least_squares: of A^T A / n")
    noise: float = Field(0.1, ge=0.0, description="l1_least_squares: std of the noise in b")
    init: Literal["barycentre", "vertex"] = "barycentre"
    data_seed: int | None = Field(None, description="None: the run's seed draws the problem")
    dtype: Literal["float32", "float64"] = "float64"

    @field_validator(*_L1_KEYS)
    @classmethod
    def _l1_only(cls, value, info: ValidationInfo):
        if (info.data.get("problem") == "portfolio"
                and value != cls.model_fields[info.field_name].default):
            raise ValueError("does not apply to problem 'portfolio'; remove the key")
        return value

    @model_validator(mode="after")
    def _consistent(self):
        if self.problem == "l1_least_squares" and self.n_samples < self.dim:
            raise ValueError(f"l1_least_squares needs n_samples ({self.n_samples}) >= dim "
                             f"({self.dim})")
        return self


def simplex_lmo(g: torch.Tensor) -> torch.Tensor:
    """e_j with j = argmin_j g_j, over the last axis (each leading row its own)."""
    return torch.zeros_like(g).scatter_(-1, torch.argmin(g, dim=-1, keepdim=True), 1.0)


def l1_ball_lmo(g: torch.Tensor, radius: float) -> torch.Tensor:
    """-radius sign(g_j) e_j with j = argmax_j |g_j|, over the last axis."""
    j = torch.argmax(g.abs(), dim=-1, keepdim=True)
    return torch.zeros_like(g).scatter_(-1, j, -radius * torch.sign(g.gather(-1, j)))


class _Objective:
    """f, its gradient, the LMO and the projection of one problem instance (one tensor x)."""

    def __init__(self, kind: str, data: torch.Tensor, b: torch.Tensor | None, radius: float):
        self.kind, self.data, self.b, self.radius = kind, data, b, radius

    def to(self, device, dtype) -> _Objective:
        b = None if self.b is None else self.b.to(device, dtype)
        return _Objective(self.kind, self.data.to(device, dtype), b, self.radius)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "portfolio":
            return -torch.log(self.data @ x).mean()
        return 0.5 * ((self.data @ x - self.b) ** 2).mean()

    def grad(self, x: torch.Tensor) -> torch.Tensor:
        n = self.data.shape[0]
        if self.kind == "portfolio":
            return -self.data.T @ (1.0 / (self.data @ x)) / n
        return self.data.T @ (self.data @ x - self.b) / n

    def lmo(self, g: torch.Tensor) -> torch.Tensor:
        return simplex_lmo(g) if self.kind == "portfolio" else l1_ball_lmo(g, self.radius)

    def fw_gap(self, x: torch.Tensor, g: torch.Tensor | None = None) -> float:
        g = self.grad(x) if g is None else g
        return float(g @ (x - self.lmo(g)))

    def infeasibility(self, x: torch.Tensor) -> float:
        if self.kind == "portfolio":
            return max(abs(float(x.sum()) - 1.0), float(torch.clamp(-x, min=0.0).max()))
        return max(float(x.abs().sum()) - self.radius, 0.0)


def make_problem(params: SimplexParams, seed: int) -> tuple[_Objective, float]:
    """The problem in float64 on the CPU and its smoothness bound L."""
    if params.problem == "l1_least_squares":
        a, b, _, _, smoothness = make_least_squares(LeastSquaresParams(
            n_samples=params.n_samples, dim=params.dim,
            condition_number=params.condition_number, noise=params.noise), seed)
        return _Objective("l1_least_squares", a, b, params.radius), smoothness
    gen = seeds.torch_generator(seed, "data")
    n, d = params.n_samples, params.dim
    drift = 0.02 * torch.randn(d, generator=gen, dtype=torch.float64)
    volatility = 0.05 + 0.15 * torch.rand(d, generator=gen, dtype=torch.float64)
    z = torch.randn(n, d, generator=gen, dtype=torch.float64)
    returns = torch.exp(drift + volatility * z)
    scaled = returns / returns.min(dim=1, keepdim=True).values
    centre = torch.eye(d, dtype=torch.float64) - 1.0 / d
    smoothness = float(torch.linalg.eigvalsh(centre @ scaled.T @ scaled @ centre / n).max())
    return _Objective("portfolio", returns, None, 1.0), smoothness


def _project_simplex_np(v: np.ndarray, total: float = 1.0) -> np.ndarray:
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - total
    rho = np.nonzero(u - cumulative / np.arange(1, v.size + 1) > 0)[0][-1]
    return np.maximum(v - cumulative[rho] / (rho + 1), 0.0)


def solve(objective: _Objective, x0: torch.Tensor, tol: float = 1e-12,
          max_iter: int = 20_000) -> torch.Tensor:
    """A float64 minimiser: FISTA with backtracking and restarts, which identifies the
    optimal face; every 50 iterations, Newton's method on the current face (its KKT system);
    done when that polished point has an FW gap <= tol (else the last FISTA iterate)."""
    data = objective.data.double().cpu().numpy()
    n = data.shape[0]
    portfolio, radius = objective.kind == "portfolio", objective.radius
    if portfolio:
        def value(x):
            wealth = data @ x
            return -np.mean(np.log(wealth)) if wealth.min() > 0 else np.inf

        def grad(x):
            return -data.T @ (1.0 / (data @ x)) / n

        def hess(x):
            scaled = data / (data @ x)[:, None]
            return scaled.T @ scaled / n

        def project(v):
            return _project_simplex_np(v)
    else:
        b = objective.b.double().cpu().numpy()
        gram, linear, constant = data.T @ data / n, data.T @ b / n, b @ b / (2 * n)

        def value(x):
            return 0.5 * x @ gram @ x - linear @ x + constant

        def grad(x):
            return gram @ x - linear

        def hess(x):
            return gram

        def project(v):
            if np.abs(v).sum() <= radius:
                return v.copy()
            return np.sign(v) * _project_simplex_np(np.abs(v), radius)

    def fw_gap(x):
        g = grad(x)
        if portfolio:
            return float(g @ x - g.min())
        return float(g @ x + radius * np.abs(g).max())

    x = y = project(x0.double().cpu().numpy())
    fx, momentum, lipschitz = value(x), 1.0, 1e-3
    for k in range(max_iter):
        if k % 50 == 0:
            polished = _newton_on_face(x, grad, hess, value, portfolio, radius)
            if polished is not None and fw_gap(polished) <= tol:
                return torch.from_numpy(polished)
        fy, gy = value(y), grad(y)
        if not np.isfinite(fy):
            y, momentum = x, 1.0
            fy, gy = fx, grad(x)
        while True:
            candidate = project(y - gy / lipschitz)
            step = candidate - y
            f_candidate = value(candidate)
            if f_candidate <= fy + gy @ step + 0.5 * lipschitz * (step @ step) + 1e-15 * abs(fy):
                break
            lipschitz *= 2.0
        if f_candidate > fx:  # restart the momentum from the last accepted point
            y, momentum = x, 1.0
            continue
        next_momentum = (1.0 + math.sqrt(1.0 + 4.0 * momentum**2)) / 2.0
        y = candidate + ((momentum - 1.0) / next_momentum) * (candidate - x)
        x, fx, momentum = candidate, f_candidate, next_momentum
    return torch.from_numpy(x)


def _newton_on_face(x, grad, hess, value, portfolio, radius):
    """Newton steps on the face of x: its support S and sign pattern, under the equality
    a . x_S = c of the active constraint (simplex: sum = 1; l1 sphere: sign . x_S = radius;
    none strictly inside the ball). None if a step leaves the face."""
    inside = not portfolio and np.abs(x).sum() < radius * (1 - 1e-12)
    support = np.arange(x.size) if inside else np.nonzero(x)[0]
    signs = np.ones(support.size) if portfolio else np.sign(x[support])
    level = 1.0 if portfolio else radius
    x = x.copy()
    for _ in range(50):
        g, h = grad(x)[support], hess(x)[np.ix_(support, support)]
        if inside:
            direction = np.linalg.solve(h, -g)
        else:
            kkt = np.block([[h, signs[:, None]], [signs[None, :], np.zeros((1, 1))]])
            rhs = np.concatenate([-g, [level - signs @ x[support]]])
            direction = np.linalg.solve(kkt, rhs)[: support.size]
        trial = x.copy()
        trial[support] += direction
        if inside:
            left = np.abs(trial).sum() > radius
        else:
            left = np.any(np.sign(trial[support]) != signs)
        if left or not np.isfinite(value(trial)):
            return None
        x = trial
        if np.abs(direction).max() <= 1e-15 * (1.0 + np.abs(x).max()):
            break
    return x


def _start(params: SimplexParams) -> torch.Tensor:
    d = params.dim
    if params.init == "vertex":
        x = torch.zeros(d, dtype=torch.float64)
        x[0] = 1.0 if params.problem == "portfolio" else params.radius
        return x
    if params.problem == "portfolio":
        return torch.full((d,), 1.0 / d, dtype=torch.float64)
    return torch.zeros(d, dtype=torch.float64)


def pure_formulas(params: SimplexParams, data: tuple[torch.Tensor, ...]) -> Pure:
    """Loss, metrics and the LMO as functions of (x,) and the data (the matrix R or A, b (zeros
    for the portfolio), f*), over any leading (seed) axes. The gradient in ``train/fw_gap`` is
    the analytic one: portfolio -R^T (1 / (R x)) / n, least squares A^T (A x - b) / n."""
    portfolio, radius = params.problem == "portfolio", params.radius

    def lmo_of(g):
        return simplex_lmo(g) if portfolio else l1_ball_lmo(g, radius)

    def loss(variables, data, _idx):
        (x,), (a, b, _) = variables, data
        if portfolio:
            return -torch.log(matvec(a, x)).mean(-1)
        return 0.5 * ((matvec(a, x) - b) ** 2).mean(-1)

    def metrics(variables, data):
        (x,), (a, b, f_star) = variables, data
        value = loss(variables, data, None)
        weights = -1.0 / matvec(a, x) if portfolio else matvec(a, x) - b
        g = (a * weights.unsqueeze(-1)).sum(-2) / a.shape[-2]
        if portfolio:
            infeasible = torch.maximum((x.sum(-1) - 1.0).abs(),
                                       torch.clamp(-x, min=0.0).amax(-1))
        else:
            infeasible = torch.clamp(x.abs().sum(-1) - radius, min=0.0)
        return {"train/loss": value, "train/suboptimality": value.double() - f_star,
                "train/fw_gap": (g * (x - lmo_of(g))).sum(-1), "train/infeasibility": infeasible}

    def lmo(_variables, _data, _idx, grads):
        (g,) = grads
        return [lmo_of(g.detach())]

    return Pure(data, loss, metrics, inputs={"lmo": lmo})


def build_problem(params: SimplexParams, seed: int, device: torch.device,
                  total_steps: int) -> Problem:
    data_seed = seed if params.data_seed is None else params.data_seed
    exact, smoothness = make_problem(params, data_seed)
    start = _start(params)
    x_star = solve(exact, start)
    f_star, accuracy = float(exact.value(x_star)), exact.fw_gap(x_star)
    objective = exact.to(device, getattr(torch, params.dtype))
    x = start.to(device, objective.data.dtype).requires_grad_(True)
    n = objective.data.shape[0]
    b = torch.zeros(n, dtype=x.dtype, device=device) if objective.b is None else objective.b
    pure = pure_formulas(params, (objective.data, b,
                                  torch.tensor(f_star, dtype=torch.float64, device=device)))
    diameter = math.sqrt(2.0) if params.problem == "portfolio" else 2.0 * params.radius
    info = {"f_star": f_star, "loss_lower_bound": f_star - accuracy, "smoothness": smoothness,
            "diameter": diameter, "f_star_accuracy": accuracy, "batches_per_epoch": 1,
            "total_steps": total_steps}  # lmo: the formulas' (pure_formulas)
    return pure_problem([x], n, pure, info)


class Simplex(Task):
    name = "simplex"
    description = ("constrained: log-utility portfolio on the simplex or least squares on an "
                   "l1 ball; LMO for Frank-Wolfe; f* to 1e-12")
    slots = ("step_size",)
    slot_requires = {"step_size": frozenset({"lmo"})}
    provides = frozenset({"closure", "lmo", "f_star", "loss_lower_bound", "smoothness"})
    Params = SimplexParams
    metrics = {"train/loss": "minimize", "train/suboptimality": "minimize",
               "train/fw_gap": "minimize", "train/grad_norm": "minimize"}
    default_objective = "train/suboptimality"

    def run(self, params, methods, *, seed, device, budget, log):
        problem = with_horizon(build_problem(params, seed, device, budget.steps), budget, None)
        return train_one(problem, methods["step_size"], batch_size=None, budget=budget,
                         seed=seed, device=device, log=log)

    def run_seeds(self, params, methods, *, seeds, device, budget, log):
        problems = [with_horizon(build_problem(params, seed, device, budget.steps), budget,
                                 None) for seed in seeds]
        return train_seeds(problems, methods["step_size"], batch_size=None, budget=budget,
                           seeds=seeds, device=device, log=log)
