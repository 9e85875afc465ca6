"""Polyak step size, in its stochastic capped form SPS_max.

    gamma_k = min( (f_i(x_k) - f_i^*) / (c * ||grad f_i(x_k)||^2),  gamma_max )
    x_{k+1} = x_k - gamma_k * grad f_i(x_k)

With the full batch, ``c = 1``, ``gamma_max = inf`` and the exact ``f^*`` this is Polyak's
(1987) step. ``f_star`` selects what stands for f_i^*:

- ``lower_bound``: the task's lower bound on the loss (0 for non-negative losses; the
  interpolation setting of Loizou et al. 2021);
- ``exact``: the task's exact optimal value (needs a task that knows it);
- ``estimate``: a target level ``f_best - delta`` below the best loss seen so far
  (Polyak's target-level variant; Nedic & Bertsekas 2001).

Reference: Loizou, Vaswani, Laradji & Lacoste-Julien, "Stochastic Polyak step-size for SGD:
an adaptive learning rate for fast convergence", AISTATS 2021. Reconstructed from the paper.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Choice, Float
from workbench.optim import FlatOptimizer
from workbench.registry import Reference, register

_TINY = 1e-30


class SPSMax(FlatOptimizer):
    def __init__(self, params, c: float, gamma_max: float, f_star, delta: float | None):
        defaults = {"c": c, "gamma_max": gamma_max, "f_best": math.inf}
        super().__init__(params, defaults)
        self._f_star = f_star
        self._delta = delta

    def _target(self, loss: float) -> float:
        group = self.param_groups[0]
        if self._delta is None:
            return float(self._f_star)
        group["f_best"] = min(group["f_best"], loss)
        return group["f_best"] - self._delta

    def step(self, closure):
        loss = closure()
        value = float(loss)
        group = self.param_groups[0]
        grads = self._grads()
        grad_sq = self._norm_sq(grads)
        gap = max(value - self._target(value), 0.0)
        gamma = min(gap / (group["c"] * max(grad_sq, _TINY)), group["gamma_max"])
        with torch.no_grad():
            for p, g in zip(self._params(), grads, strict=True):
                p.add_(g, alpha=-gamma)
        self.last_step_size = gamma
        return loss


@register
class Polyak(StepSizeMethod):
    name = "polyak"
    hyperparameters = {
        "c": Float(0.5, low=0.05, high=2.0, log=True, minimum=1e-12, help="scale c"),
        "gamma_max": Float(10.0, minimum=0.0, help="cap on the step size (inf: none)"),
        "f_star": Choice("lower_bound", ("lower_bound", "exact", "estimate"), help="f_i^*"),
        "delta": Float(1e-2, minimum=0.0, help="target level below f_best ('estimate')"),
    }
    reference = Reference(
        "Loizou et al., Stochastic Polyak step-size for SGD (SPS_max)",
        2021,
        "github.com/IssamLaradji/sps",
    )
    fidelity = "reconstructed"

    @classmethod
    def requirements(cls, params):
        needs = {"lower_bound": "loss_lower_bound", "exact": "f_star", "estimate": None}
        need = needs[params["f_star"]]
        return frozenset({need} if need else set())

    def step_size_cap(self):
        return self.gamma_max

    def build(self, params, info):
        if self.f_star == "estimate":
            return SPSMax(params, self.c, self.gamma_max, None, self.delta)
        source = "loss_lower_bound" if self.f_star == "lower_bound" else "f_star"
        return SPSMax(params, self.c, self.gamma_max, info[source], None)
