"""Frank-Wolfe (conditional gradient) step sizes, for tasks that provide an ``lmo``.

Every step: g = grad f(x), s = lmo(g) = argmin_{s in C} <g, s>, d = s - x, the FW gap
gap = <g, x - s> >= f(x) - f*, and x <- x + gamma d with gamma in [0, 1], so iterates stay in
C when x_0 is in C. ``last_step_size`` is gamma.

- ``fw_open_loop``: gamma_t = ell / (t + ell), t = 0, 1, ...; ell = 2 is the classic
  2/(t+2) of Frank & Wolfe (1956) and Jaggi (2013), for which
  f(x_t) - f* <= 2 L D^2 / (t + 2) (D: diameter of C); other ell follow Wirth, Kerdreux &
  Pokutta (2023).
- ``fw_short_step``: the Demyanov-Rubinov short step gamma_t = min(1, gap / (L ||d||^2)),
  the minimiser over [0, 1] of the quadratic upper bound given by the smoothness L.
  ``l_estimate="task"`` uses the task's L; ``"backtracking"`` follows Pedregosa, Negiar,
  Askari & Jaggi (2020): the estimate L_t starts from a gradient difference at the first step
  (or ``initial_smoothness``), is lowered before each step to
  max(min(gap^2 / (2 (f_{t-1} - f_t) ||d||^2), L_{t-1}), eta L_{t-1}), and is raised by
  ``tau`` until f(x + gamma d) - f(x) <= -gamma gap + gamma^2 L_t ||d||^2 / 2 + ``slack``.

Reference-checked: tests/test_frank_wolfe.py re-derives copt's ``minimize_frank_wolfe``
(openopt/copt, steps "sublinear", "DR" and "backtracking", whose defaults these follow: eta
0.9, tau 2, 100 trials, slack = float32 epsilon, first estimate from a step of 1e-3 along d)
and compares 30-step trajectories on l1-constrained least squares and the simplex portfolio
to 1e-10 in float64.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Choice, Float, Int
from workbench.optim import FlatOptimizer
from workbench.registry import Reference, register

_PROBE = 1e-3  # step along d of the first gradient-difference estimate of L (copt)


class FrankWolfe(FlatOptimizer):
    """x <- x + gamma (s - x) with ``rule`` in {"open_loop", "short_step", "backtracking"}."""

    def __init__(self, params, lmo, *, rule, ell=2, smoothness=math.nan, tau=2.0, eta=0.9,
                 slack=0.0, max_backtracks=100):
        defaults = {"t": 0, "ell": ell, "smoothness": smoothness, "tau": tau, "eta": eta,
                    "slack": slack, "max_backtracks": max_backtracks,
                    "previous_loss": math.nan}
        super().__init__(params, defaults)
        self._lmo = lmo
        self._rule = rule

    @staticmethod
    def _dot(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
        return float(sum(torch.sum(u * v) for u, v in zip(a, b, strict=True)))

    @torch.no_grad()
    def _move(self, origin, direction, gamma: float) -> None:
        for p, x, d in zip(self._params(), origin, direction, strict=True):
            torch.add(x, d, alpha=gamma, out=p)

    def step(self, closure):
        group = self.param_groups[0]
        loss = closure()
        value = float(loss)
        grads = self._grads()
        origin = self._snapshot()
        vertices = self._lmo(grads)
        direction = [s.to(x.dtype) - x for s, x in zip(vertices, origin, strict=True)]
        gap = -self._dot(grads, direction)
        norm_sq = self._norm_sq(direction)
        if gap <= 0.0 or norm_sq == 0.0:
            gamma = 0.0
        elif self._rule == "open_loop":
            gamma = group["ell"] / (group["t"] + group["ell"])
        elif self._rule == "short_step":
            gamma = min(gap / (group["smoothness"] * norm_sq), 1.0)
        else:
            gamma = self._backtrack(group, closure, value, gap, norm_sq, origin, direction,
                                    grads)
        self._move(origin, direction, gamma)
        group["t"] += 1
        group["previous_loss"] = value
        self.last_step_size = gamma
        return loss

    def _backtrack(self, group, closure, value, gap, norm_sq, origin, direction, grads):
        smoothness = group["smoothness"]
        if not smoothness > 0:  # first step: a gradient difference along d
            self._move(origin, direction, _PROBE)
            closure()
            probe = self._grads()
            diff = math.sqrt(sum(float(torch.sum((g - q) ** 2))
                                 for g, q in zip(grads, probe, strict=True)))
            smoothness = diff / (_PROBE * math.sqrt(norm_sq))
            for p, g in zip(self._params(), grads, strict=True):
                p.grad.copy_(g)
        elif math.isfinite(group["previous_loss"]):
            decrease = group["previous_loss"] - value
            guess = gap**2 / (2.0 * decrease * norm_sq) if decrease != 0 else math.inf
            smoothness = max(min(guess, smoothness), smoothness * group["eta"])
        for _ in range(group["max_backtracks"]):
            gamma = gap / (norm_sq * smoothness)
            if gamma < 1.0:
                bound = -0.5 * gamma * gap
            else:
                gamma = 1.0
                bound = -gap + 0.5 * smoothness * norm_sq
            self._move(origin, direction, gamma)
            if float(closure(backward=False)) - value <= bound + group["slack"]:
                break
            smoothness *= group["tau"]
        group["smoothness"] = smoothness
        return gamma


_COPT = "github.com/openopt/copt (copt/frank_wolfe.py, minimize_frank_wolfe)"


@register
class FrankWolfeOpenLoop(StepSizeMethod):
    name = "fw_open_loop"
    hyperparameters = {
        "ell": Int(2, low=1, high=8, minimum=1, maximum=1000,
                   help="gamma_t = ell / (t + ell); 2: the classic 2/(t+2)"),
    }
    requires = frozenset({"lmo"})
    reference = Reference("Jaggi, Revisiting Frank-Wolfe: projection-free sparse convex "
                          "optimization (after Frank & Wolfe 1956)", 2013, _COPT)
    fidelity = "reference-checked"

    def step_size_cap(self):
        return 1.0

    def build(self, params, info):
        return FrankWolfe(params, info["lmo"], rule="open_loop", ell=self.hp.ell)


@register
class FrankWolfeShortStep(StepSizeMethod):
    name = "fw_short_step"
    hyperparameters = {
        "l_estimate": Choice("task", ("task", "backtracking"),
                             help="L: the task's smoothness, or a backtracking estimate"),
        "initial_smoothness": Float(0.0, minimum=0.0,
                                    help="backtracking: first L (0: a gradient difference)"),
        "tau": Float(2.0, minimum=1.000001, help="backtracking: growth of L per trial"),
        "eta": Float(0.9, minimum=1e-6, maximum=1.0,
                     help="backtracking: largest decrease of L per step"),
        "slack": Float(float(torch.finfo(torch.float32).eps), minimum=0.0,
                       help="backtracking: tolerance of the sufficient-decrease test"),
        "max_backtracks": Int(100, minimum=1, maximum=10_000),
    }
    requires = frozenset({"lmo", "smoothness"})
    reference = Reference(
        "Demyanov & Rubinov 1970 short step; backtracking: Pedregosa, Negiar, Askari & Jaggi, "
        "Linearly convergent Frank-Wolfe with backtracking line-search", 2020, _COPT)
    fidelity = "reference-checked"

    @classmethod
    def requirements(cls, params):
        if params["l_estimate"] == "backtracking":
            return frozenset({"lmo", "closure"})
        return frozenset({"lmo", "smoothness"})

    def step_size_cap(self):
        return 1.0

    def build(self, params, info):
        if self.hp.l_estimate == "task":
            return FrankWolfe(params, info["lmo"], rule="short_step",
                              smoothness=float(info["smoothness"]))
        return FrankWolfe(params, info["lmo"], rule="backtracking",
                          smoothness=self.hp.initial_smoothness, tau=self.hp.tau, eta=self.hp.eta,
                          slack=self.hp.slack, max_backtracks=self.hp.max_backtracks)
