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
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float, Int
from workbench.registry import Reference, register

_PROBE = 1e-3  # step along d of the first gradient-difference estimate of L (copt)


class FrankWolfe(FlatOptimizer):
    """x <- x + gamma (s - x) with ``rule`` in {"open_loop", "short_step", "backtracking"}.

    On a seed axis (``seeds`` = S) gap, ||d||^2, gamma and the backtracking estimate L are
    per seed (tensors (S,)); a seed whose gap is <= 0 takes gamma = 0 on its own; the seeds
    still backtracking evaluate their trial points together (``closure(backward=False,
    active=mask)``) and only the seeds without an estimate take the first step's probe."""

    def __init__(self, params, lmo, *, rule, ell=2, smoothness=math.nan, tau=2.0, eta=0.9,
                 slack=0.0, max_backtracks=100, seeds=None):
        super().__init__(params, {"t": 0, "ell": ell, "tau": tau, "eta": eta, "slack": slack,
                                  "max_backtracks": max_backtracks})
        self.seeds = seeds
        group = self.param_groups[0]
        group["smoothness"] = self._kept(self._as_seed_scalar(smoothness))
        group["previous_loss"] = self._kept(self._as_seed_scalar(math.nan))
        self._lmo = lmo
        self._rule = rule

    def _move(self, origin, direction, gamma: torch.Tensor, where=None) -> None:
        """x <- origin + gamma d for the seeds in ``where`` (all: None)."""
        where = torch.ones_like(gamma, dtype=torch.bool) if where is None else where
        self._step_from_per_seed(origin, direction, -gamma, where)

    def _evaluate(self, closure, active) -> torch.Tensor:
        if self.seeds is None:
            return closure(backward=False).detach().double()
        return closure(backward=False, active=active).detach().double()

    def step(self, closure):
        group = self.param_groups[0]
        loss = closure()
        value = loss.detach().double()
        grads = self._grads()
        origin = self._snapshot()
        vertices = self._lmo(grads)
        direction = [s.to(x.dtype) - x for s, x in zip(vertices, origin, strict=True)]
        gap = -self._sum_per_seed([g * d for g, d in zip(grads, direction, strict=True)])
        norm_sq = self._sq_per_seed(direction)
        moving = ~((gap <= 0.0) | (norm_sq == 0.0))
        if self._rule == "open_loop":
            gamma = self._as_seed_scalar(group["ell"] / (group["t"] + group["ell"]))
        elif self._rule == "short_step":
            smoothness = self._as_seed_scalar(group["smoothness"])
            gamma = torch.clamp(gap / (smoothness * norm_sq), max=1.0)
        else:
            gamma = self._backtrack(group, closure, value, gap, norm_sq, origin, direction,
                                    grads, moving)
        gamma = torch.where(moving, gamma, 0.0)
        self._move(origin, direction, gamma)
        group["t"] += 1
        group["previous_loss"] = self._kept(value)
        self._report(gamma)
        return loss

    def _backtrack(self, group, closure, value, gap, norm_sq, origin, direction, grads,
                   moving):
        smoothness = self._as_seed_scalar(group["smoothness"])
        probing = moving & ~(smoothness > 0)
        if bool(probing.any()):  # first step: a gradient difference along d
            self._move(origin, direction, self._as_seed_scalar(_PROBE), probing)
            if self.seeds is None:
                closure()
            else:
                closure(active=probing)
            diff = self._sq_per_seed([g - q for g, q in zip(grads, self._grads(),
                                                            strict=True)]).sqrt()
            smoothness = torch.where(probing, diff / (_PROBE * norm_sq.sqrt()), smoothness)
            for p, g in zip(self._params(), grads, strict=True):
                p.grad.copy_(g)
            self._set(origin)
        previous = self._as_seed_scalar(group["previous_loss"])
        decrease = previous - value
        guess = torch.where(decrease != 0, gap**2 / (2.0 * decrease * norm_sq), math.inf)
        lowered = torch.maximum(torch.minimum(guess, smoothness), smoothness * group["eta"])
        smoothness = torch.where(moving & ~probing & torch.isfinite(previous), lowered,
                                 smoothness)
        searching = moving.clone()
        gamma = torch.zeros_like(gap)
        for _ in range(group["max_backtracks"]):
            if not bool(searching.any()):
                break
            trial = gap / (norm_sq * smoothness)
            capped = ~(trial < 1.0)
            trial = torch.where(capped, 1.0, trial)
            bound = torch.where(capped, -gap + 0.5 * smoothness * norm_sq, -0.5 * trial * gap)
            gamma = torch.where(searching, trial, gamma)
            self._move(origin, direction, gamma, searching)
            accepted = searching & (self._evaluate(closure, searching) - value
                                    <= bound + group["slack"])
            searching = searching & ~accepted
            smoothness = torch.where(searching, smoothness * group["tau"], smoothness)
        group["smoothness"] = self._kept(smoothness)
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
    vectorised = True

    def step_size_cap(self):
        return 1.0

    def build(self, params, info):
        return FrankWolfe(params, info["lmo"], rule="open_loop", ell=self.hp.ell,
                          seeds=info.get("seeds"))


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
    vectorised = True

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
                              smoothness=info["smoothness"], seeds=info.get("seeds"))
        return FrankWolfe(params, info["lmo"], rule="backtracking",
                          smoothness=self.hp.initial_smoothness, tau=self.hp.tau, eta=self.hp.eta,
                          slack=self.hp.slack, max_backtracks=self.hp.max_backtracks,
                          seeds=info.get("seeds"))
