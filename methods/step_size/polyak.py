"""Polyak step size, in its stochastic capped form SPS_max.

    gamma_k = min( (f_i(x_k) - f_i^*) / (c * ||grad f_i(x_k)||^2 + eps),  gamma_b,k,  gamma_max )
    x_{k+1} = x_k - gamma_k * grad f_i(x_k)

``adapt`` selects the bound gamma_b,k, as the reference's ``adapt_flag`` does:

- ``smooth_iter`` (default, the reference's): gamma_b,k = growth**(1/b) * gamma_{k-1} with b the
  task's batches per epoch and gamma_{-1} = ``gamma0``; the step may grow by at most a factor
  ``growth`` per epoch;
- ``constant``: no such bound (only ``gamma_max``), the SPS_max of the paper.

``gamma_max`` (default inf, the reference's ``eta_max=None``) caps both. A negative gap counts as
0. Where ||grad f_i|| < 1e-8 no step is taken and gamma_k = 0, as in the reference (with
``smooth_iter`` the bound then stays 0). With the full batch, ``adapt="constant"``, ``c = 1``,
``eps = 0``, ``gamma_max = inf`` and the exact ``f^*`` this is Polyak's (1987) step.

``f_star`` selects what stands for f_i^*:

- ``lower_bound``: the task's lower bound on the loss (0 for non-negative losses; the reference's
  default f^* = 0, the interpolation setting of Loizou et al. 2021);
- ``exact``: the task's exact optimal value (needs a task that knows it);
- ``estimate``: a target level ``f_best - delta`` below the best loss seen so far
  (Polyak's target-level variant; Nedic & Bertsekas 2001; not in the reference).

The reference's ``smooth_iter`` divides the loss itself (f^* = 0 whatever its ``fstar_flag``);
here the gap always uses the selected f_i^*, which equals the reference on tasks whose lower
bound is 0 (``lower_bound``, the default). Defaults follow the reference's ``Sps``: c = 0.5,
eps = 1e-8, growth (its ``gamma``) = 2, gamma0 (its ``init_step_size``) = 1; its
``n_batches_per_epoch`` is the task's batches per epoch.

Reference: Loizou, Vaswani, Laradji & Lacoste-Julien, "Stochastic Polyak step-size for SGD: an
adaptive learning rate for fast convergence", AISTATS 2021; implementation
github.com/IssamLaradji/sps (``sps.Sps``). Reference-checked:
tests/test_step_size_momentum_adaptive.py compares 40-step trajectories (parameters and step
sizes, float64, a quadratic and a minibatch logistic regression, both ``adapt`` modes) with a
re-derivation of that update.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register

_SMALLEST_GRAD_NORM = 1e-8  # the reference takes no step below this gradient norm


class SPSMax(FlatOptimizer):
    def __init__(self, params, *, c, gamma_max, f_star, delta, adapt, growth, gamma0, eps,
                 batches, seeds=None):
        defaults = {
            "c": c, "gamma_max": gamma_max, "f_best": math.inf, "adapt": adapt,
            "growth": growth, "gamma": gamma0, "eps": eps, "batches": batches,
        }
        super().__init__(params, defaults)
        self.seeds = seeds
        self._f_star = f_star
        self._delta = delta

    def _target(self, loss):
        """f_i^* per seed: the given value, or f_best - delta (f_best updated with ``loss``)."""
        group = self.param_groups[0]
        if self._delta is None:
            return self._as_seed_scalar(self._f_star)
        best = torch.minimum(self._as_seed_scalar(group["f_best"]), loss)
        group["f_best"] = self._kept(best)
        return best - self._delta

    def step(self, closure):
        loss = closure()
        value = loss.detach().double()
        group = self.param_groups[0]
        grads = self._grads()
        grad_sq = self._sq_per_seed(grads)
        gap = torch.clamp(value - self._target(value), min=0.0)
        gamma = torch.clamp(gap / (group["c"] * grad_sq + group["eps"]), max=group["gamma_max"])
        if group["adapt"] == "smooth_iter":
            bound = group["growth"] ** (1.0 / group["batches"]) * self._as_seed_scalar(
                group["gamma"])
            gamma = torch.minimum(gamma, bound)
        gamma = torch.where(grad_sq.sqrt() < _SMALLEST_GRAD_NORM, 0.0, gamma)
        self._descend_per_seed(grads, gamma)
        group["gamma"] = self._kept(gamma)
        self._report(gamma)
        return loss


@register
class Polyak(StepSizeMethod):
    name = "polyak"
    hyperparameters = {
        "c": Float(0.5, low=0.05, high=2.0, log=True, minimum=1e-12, help="scale c"),
        "gamma_max": Float(math.inf, minimum=0.0, help="cap on the step size (inf: none)"),
        "f_star": Choice("lower_bound", ("lower_bound", "exact", "estimate"), help="f_i^*"),
        "delta": Float(1e-2, minimum=0.0, help="target level below f_best ('estimate')"),
        "adapt": Choice("smooth_iter", ("smooth_iter", "constant"),
                        help="smooth_iter: also bound by growth**(1/b) * previous step"),
        "growth": Float(2.0, minimum=1.0, help="smooth_iter: growth of the bound per epoch"),
        "gamma0": Float(1.0, minimum=0.0, help="smooth_iter: bound before the first step"),
        "eps": Float(1e-8, minimum=0.0, help="added to c * ||g||^2"),
    }
    reference = Reference(
        "Loizou et al., Stochastic Polyak step-size for SGD (SPS_max)",
        2021,
        "github.com/IssamLaradji/sps",
    )
    fidelity = "reference-checked"
    vectorised = True

    @classmethod
    def requirements(cls, params):
        needs = {"lower_bound": "loss_lower_bound", "exact": "f_star", "estimate": None}
        need = needs[params["f_star"]]
        return frozenset({need} if need else set())

    def step_size_cap(self):
        return self.hp.gamma_max

    def build(self, params, info):
        if self.hp.f_star == "estimate":
            f_star, delta = None, self.hp.delta
        else:
            f_star = info["loss_lower_bound" if self.hp.f_star == "lower_bound" else "f_star"]
            delta = None
        return SPSMax(
            params, c=self.hp.c, gamma_max=self.hp.gamma_max, f_star=f_star, delta=delta,
            adapt=self.hp.adapt, growth=self.hp.growth, gamma0=self.hp.gamma0, eps=self.hp.eps,
            batches=info.get("batches_per_epoch", 1), seeds=info.get("seeds"),
        )
