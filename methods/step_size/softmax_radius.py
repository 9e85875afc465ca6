"""Softmax-radius controller: gradient descent whose step is capped by the Taylor convergence
radius of the cross-entropy along the update.

Along the update x - t g, sample i's class logits move at the directional derivatives
a_i = J_i g (the task's ``logit_jvp`` of the gradient; one Jacobian-vector product). The
cross-entropy log sum_k exp(z_k) - z_y is analytic in t only up to the nearest complex zero of
the partition function sum_k exp(z_k) (the "ghosts of softmax"); under logit linearisation
that radius is at least

    rho_i = pi / Delta_i,   Delta_i = max_k a_ik - min_k a_ik     (``radius: lower_bound``)

and, for two classes, exactly

    rho_i = sqrt(delta_i^2 + pi^2) / Delta_i                   (``radius: binary_exact``)

with delta_i the logit gap at x (|y_i <x_i, w>|, read from the task's ``margins``). The batch
loss is a mean over the step's samples, so its radius is rho = min_i rho_i, and the step is

    eta_k   = min( lr, kappa * rho )
    x_{k+1} = x_k - eta_k g

kappa = 1 (the default) is the abstract's controller "tau <= rho_a": the normalised step
r = eta / rho is at most 1. Where every Delta_i is 0 the radius is infinite and eta_k = lr.
``last_step_size`` is eta_k (cap lr). The radius is scale-free in g, so the cap is the same
for the unit direction and step length tau = eta ||g||.

Reference: Sao, "Ghosts of Softmax" (2026; the Taylor-radius paper of the seed feed's ¶45,
catalogue-000 ¶45 and section 4.1 item 7; the full title is not in the catalogue).
Reconstructed: no reference implementation was found. Followed: the abstract's binary exact
radius sqrt(delta^2 + pi^2)/Delta_a (the seed text lost the root; the catalogue gives the
paper page's form), its multiclass bound pi/Delta_a with Delta_a the spread of the directional
logit derivatives, and its controller tau <= rho_a; the base update (plain gradient descent,
v = -g) and the batch radius as the tightest sample are the catalogue's reading, not checked
against the paper's code. tests/test_softmax_radius.py checks the step against the formulas by
hand and the binary radius against the singularity of log(1 + e^{-m}).
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


class SoftmaxRadiusOptimizer(FlatOptimizer):
    def __init__(self, params, *, lr, kappa, logit_jvp, margins=None, seeds=None):
        super().__init__(params, {"lr": lr, "kappa": kappa})
        self.seeds = seeds
        self._logit_jvp = logit_jvp
        self._margins = margins  # binary_exact only

    def radius(self, grads: list[torch.Tensor]) -> torch.Tensor:
        """rho per seed: the smallest radius over the step's samples (inf: no logit moves)."""
        slopes = self._logit_jvp(grads).detach().double()  # (b, K), (S, b, K) on a seed axis
        spread = slopes.amax(-1) - slopes.amin(-1)
        if self._margins is None:
            height = torch.full_like(spread, math.pi)
        else:
            gap = self._margins().detach().double()
            height = torch.sqrt(gap * gap + math.pi ** 2)
        each = torch.where(spread > 0, height / torch.where(spread > 0, spread, 1.0), math.inf)
        return each.amin(-1)

    def step(self, closure):
        loss = closure()
        group = self.param_groups[0]
        with torch.no_grad():
            grads = self._grads()
            eta = torch.clamp(group["kappa"] * self.radius(grads), max=group["lr"])
            self._descend_per_seed(grads, eta)
        self._report(eta)
        return loss


@register
class SoftmaxRadius(StepSizeMethod):
    name = "softmax_radius"
    hyperparameters = {
        "lr": Float(1.0, low=1e-2, high=1e3, log=True, minimum=0.0,
                    help="the base gradient step, capped by kappa * the radius"),
        "kappa": Float(1.0, low=0.25, high=1.0, minimum=1e-12,
                       help="safety factor: eta <= kappa * rho (1: the paper's tau <= rho_a)"),
        "radius": Choice("lower_bound", ("lower_bound", "binary_exact"),
                         help="pi / Delta (any number of classes), or sqrt(delta^2 + pi^2) / "
                              "Delta (two classes, exact)"),
    }
    reference = Reference(
        "Sao, Ghosts of Softmax (complex-singularity radius caps the safe step size of "
        "cross-entropy)", 2026,
    )
    fidelity = "reconstructed"
    vectorised = True

    @classmethod
    def requirements(cls, params):
        return frozenset({"logit_jvp", "margins"} if params["radius"] == "binary_exact"
                         else {"logit_jvp"})

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        margins = info["margins"] if self.hp.radius == "binary_exact" else None
        return SoftmaxRadiusOptimizer(params, lr=self.hp.lr, kappa=self.hp.kappa,
                                      logit_jvp=info["logit_jvp"], margins=margins,
                                      seeds=info.get("seeds"))
