"""AICN: Newton's method with the affine-invariant cubic step-size schedule.

With g = grad f(x_k) and H = hess f(x_k) on the step's minibatch:

    d_k     = H^{-1} g                       (conjugate gradients on the task's ``hvp``)
    G_k     = sqrt(g^T H^{-1} g) = sqrt(<g, d_k>)   (the Newton decrement, ||g||*_{x_k})
    alpha_k = (-1 + sqrt(1 + 2 L G_k)) / (L G_k) = 2 / (1 + sqrt(1 + 2 L G_k))
    x_{k+1} = x_k - alpha_k d_k

alpha_k minimises the affine-invariant cubic upper bound along the Newton direction,
m(alpha) = -alpha G^2 + alpha^2 G^2 / 2 + L alpha^3 G^3 / 6 >= f(x_k - alpha d_k) - f(x_k)
when f is L-semi-strongly self-concordant; alpha_k -> 1 (the pure Newton step) as G_k -> 0, and
it is at most 1. L is the constant of that assumption (the paper's L_est), a hyperparameter.
The second form of alpha_k is the first without its cancellation at small L G.

``backtrack`` (off by default) estimates L instead: each step starts from half the previous
step's accepted L (``L`` at the first step) and doubles it until the cubic bound holds at the
trial point, f(x_k - alpha d_k) <= f(x_k) + m(alpha), each trial one loss evaluation (at most
``max_backtracks`` doublings; the last trial is taken). This is the catalogue's description of
the backtracking of Hanzely, Abdukhakimov & Takáč (2024), not checked against their
Algorithm: part of the reconstruction.

The solve: conjugate gradients from d = 0, stopped when ||H d - g|| <= ``cg_tol`` ||g|| or after
``cg_iters`` products, or where the curvature <p, H p> is not positive (a task whose Hessian
is not positive definite: the direction found so far is used; the method is meant for convex
tasks). Each product is one ``hvp`` call; the task does not count them as gradient
evaluations. G_k^2 < 0 (rounding) counts as 0. ``last_step_size`` is alpha_k (a multiplier of
the Newton direction, not of the gradient; cap 1).

Reference: Hanzely, Kamzolov, Pasechnyuk, Gasnikov, Richtárik & Takáč, "A damped Newton method
achieves global O(1/k^2) and local quadratic convergence rate", NeurIPS 2022 (AICN, its
Algorithm 1 step size); the 2024 follow-up "Newton method revisited: global convergence rates
up to O(k^-3) for stepsize schedules and linesearch procedures" (Hanzely, Abdukhakimov & Takáč)
generalises the schedule. Reconstructed: no reference implementation was found; the formula is
the catalogue's (catalogue-000, the ¶52 entry and section 4.1 item 10), re-derived above as the
minimiser of the cubic model. tests/test_aicn.py checks it against the formula by hand.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Bool, Float, Int
from workbench.registry import Reference, register


class AICNOptimizer(FlatOptimizer):
    def __init__(self, params, *, hvp, L, backtrack, max_backtracks, cg_iters, cg_tol,
                 seeds=None):
        defaults = {"L": L, "backtrack": backtrack, "max_backtracks": max_backtracks,
                    "cg_iters": cg_iters, "cg_tol": cg_tol, "first": True}
        super().__init__(params, defaults)
        self.seeds = seeds
        self._hvp = hvp

    def _dot(self, a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
        return self._sum_per_seed([x * y for x, y in zip(a, b, strict=True)])

    def _combine(self, a, b, scale):
        """a + scale * b, per seed."""
        return [x + y * self._on_param(scale, y) for x, y in zip(a, b, strict=True)]

    def newton_direction(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """d with H d = g, by conjugate gradients (per seed: a seed that has converged stops
        moving)."""
        group = self.param_groups[0]
        d = [torch.zeros_like(g) for g in grads]
        r = [g.clone() for g in grads]
        p = [g.clone() for g in grads]
        rs = self._dot(r, r)
        goal = group["cg_tol"] ** 2 * rs
        live = rs > goal
        for _ in range(group["cg_iters"]):
            if not bool(live.any()):
                break
            hp = [t.detach() for t in self._hvp(p)]
            curvature = self._dot(p, hp)
            live = live & (curvature > 0)
            step = torch.where(live, rs / torch.where(live, curvature, 1.0), 0.0)
            d = self._combine(d, p, step)
            r = self._combine(r, hp, -step)
            new_rs = self._dot(r, r)
            beta = torch.where(live, new_rs / torch.where(live, rs, 1.0), 0.0)
            p = self._combine(r, p, beta)
            rs = torch.where(live, new_rs, rs)
            live = live & (rs > goal)
        return d

    @staticmethod
    def _alpha(L, decrement):
        return 2.0 / (1.0 + torch.sqrt(1.0 + 2.0 * L * decrement))

    def step(self, closure):
        group = self.param_groups[0]
        loss = closure()
        grads = self._grads()
        with torch.no_grad():
            d = self.newton_direction(grads)
            decrement_sq = torch.clamp(self._dot(grads, d), min=0.0)
            decrement = decrement_sq.sqrt()
            L = self._as_seed_scalar(group["L"])
            if not group["backtrack"]:
                alpha = self._alpha(L, decrement)
                self._descend_per_seed(d, alpha)
            else:
                alpha, L = self._backtrack(closure, loss.detach().double(), d, decrement,
                                           decrement_sq, L if group["first"] else 0.5 * L)
                group["first"] = False
                group["L"] = self._kept(L)
        self._report(alpha)
        return loss

    def _backtrack(self, closure, f0, d, decrement, decrement_sq, L):
        """Double L (per seed) until f(x - alpha d) <= f(x) + m(alpha); the accepted (alpha,
        L), or the last trial's."""
        group = self.param_groups[0]
        origin = self._snapshot()
        searching = torch.ones_like(f0, dtype=torch.bool)
        alpha = self._alpha(L, decrement)
        for attempt in range(group["max_backtracks"] + 1):
            self._step_from_per_seed(origin, d, alpha, searching)
            if self.seeds is None:
                trial = closure(backward=False).detach().double()
            else:
                trial = closure(backward=False, active=searching).detach().double()
            bound = f0 + decrement_sq * (-alpha + 0.5 * alpha ** 2
                                         + L * alpha ** 3 * decrement / 6.0)
            searching = searching & ~(trial <= bound)
            if not bool(searching.any()) or attempt == group["max_backtracks"]:
                break
            L = torch.where(searching, 2.0 * L, L)
            alpha = torch.where(searching, self._alpha(L, decrement), alpha)
        return alpha, L


@register
class AICN(StepSizeMethod):
    name = "aicn"
    hyperparameters = {
        "L": Float(1.0, low=1e-3, high=1e3, log=True, minimum=1e-12,
                   help="semi-strong self-concordance constant (the paper's L_est); with "
                        "backtrack: the first step's estimate"),
        "backtrack": Bool(False, help="estimate L: halve it each step, double it until the "
                                      "cubic bound holds"),
        "max_backtracks": Int(50, minimum=0, maximum=10_000, help="backtrack: doublings"),
        "cg_iters": Int(100, minimum=1, maximum=100_000,
                        help="Hessian-vector products per Newton solve"),
        "cg_tol": Float(1e-10, minimum=0.0, maximum=1.0,
                        help="solve to ||H d - g|| <= cg_tol ||g||"),
    }
    reference = Reference(
        "Hanzely, Kamzolov, Pasechnyuk, Gasnikov, Richtárik & Takáč, A damped Newton method "
        "achieves global O(1/k^2) and local quadratic convergence rate (AICN)", 2022,
    )
    fidelity = "reconstructed"
    vectorised = True

    @classmethod
    def requirements(cls, params):
        return frozenset({"hvp", "closure"} if params["backtrack"] else {"hvp"})

    def step_size_cap(self):
        return 1.0

    def build(self, params, info):
        return AICNOptimizer(
            params, hvp=info["hvp"], L=self.hp.L, backtrack=self.hp.backtrack,
            max_backtracks=self.hp.max_backtracks, cg_iters=self.hp.cg_iters,
            cg_tol=self.hp.cg_tol, seeds=info.get("seeds"),
        )
