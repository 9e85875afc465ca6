"""Armijo backtracking line search (stochastic line search, SLS).

Each step starts from a trial step size set by ``reset_option`` (the reference's):

- 0: the previous accepted step size eta_{k-1};
- 1 (default): eta_{k-1} * gamma**(1/b), with b the task's batches per epoch;
- 2: ``eta0`` every step;

capped at ``eta_max``, with eta_{-1} = ``eta0``. The trial shrinks by ``beta`` until the Armijo
condition holds on the same minibatch:

    f_i(x_k - eta * g_k) <= f_i(x_k) - c * eta * ||g_k||^2

Each trial point costs one loss evaluation (counted by the task). As in the reference: where
||g_k|| < 1e-8 no trial is made and the parameters stay (the reset trial step is kept for the
next step); where ``max_backtracks`` trials all fail, the parameters move by 1e-6 * g_k and the
last shrunken trial is kept for the next step. ``last_step_size`` is the step applied (0, the
accepted eta, or 1e-6).

Defaults follow the reference's ``Sls`` with ``line_search_fn="armijo"``: c = 0.1, beta (its
``beta_b``) = 0.9, gamma = 2, eta0 (its ``init_step_size``) = 1, reset_option = 1, 100 trials;
its ``n_batches_per_epoch`` is the task's batches per epoch. Its ``eta_max`` (10) bounds only its
Goldstein search, so the Armijo search here is uncapped by default (``eta_max = inf``); a finite
``eta_max`` caps the trial step. The Goldstein search is not implemented.

Reference: Vaswani, Mishkin, Laradji, Schmidt, Gidel & Lacoste-Julien, "Painless stochastic
gradient: interpolation, line-search, and convergence rates", NeurIPS 2019; implementation
github.com/IssamLaradji/sls (``sls.Sls``). Reference-checked:
tests/test_step_size_momentum_adaptive.py compares 40-step trajectories (parameters and step
sizes, float64, a quadratic and a minibatch logistic regression, each reset option) with a
re-derivation of that update.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float, Int
from workbench.registry import Reference, register

_SMALLEST_GRAD_NORM = 1e-8  # the reference skips the search below this gradient norm
_FALLBACK_STEP = 1e-6  # the reference's step when every trial fails


class ArmijoSLS(FlatOptimizer):
    """On a seed axis every seed searches on its own: the trial points of the seeds still
    searching are evaluated together (``closure(backward=False, active=mask)``, which counts
    a loss evaluation for those seeds only) and a seed stops at its own first success."""

    def __init__(self, params, *, eta0, c, beta, gamma, eta_max, max_backtracks, batches,
                 reset_option, seeds=None):
        defaults = {
            "eta": eta0, "eta0": eta0, "c": c, "beta": beta, "gamma": gamma,
            "eta_max": eta_max, "max_backtracks": max_backtracks, "batches": batches,
            "reset_option": reset_option,
        }
        super().__init__(params, defaults)
        self.seeds = seeds

    def _trial(self, group) -> torch.Tensor:
        option = group["reset_option"]
        if option == 0:
            eta = self._as_seed_scalar(group["eta"])
        elif option == 1:
            eta = self._as_seed_scalar(group["eta"]) * group["gamma"] ** (1.0 / group["batches"])
        else:
            eta = self._as_seed_scalar(group["eta0"])
        return torch.clamp(eta, max=group["eta_max"])

    def _loss_at_trial(self, closure, searching):
        if self.seeds is None:
            return closure(backward=False).detach().double()
        return closure(backward=False, active=searching).detach().double()

    def step(self, closure):
        group = self.param_groups[0]
        loss = closure()
        f0 = loss.detach().double()
        origin, grads = self._snapshot(), self._grads()
        grad_sq = self._sq_per_seed(grads)
        eta = self._trial(group)
        searching = grad_sq.sqrt() >= _SMALLEST_GRAD_NORM
        applied = torch.where(searching, self._as_seed_scalar(_FALLBACK_STEP), 0.0)
        for _ in range(group["max_backtracks"]):
            if not bool(searching.any()):
                break
            self._step_from_per_seed(origin, grads, eta, searching)
            trial = self._loss_at_trial(closure, searching)
            accepted = searching & (trial <= f0 - group["c"] * eta * grad_sq)
            applied = torch.where(accepted, eta, applied)
            searching = searching & ~accepted
            eta = torch.where(searching, eta * group["beta"], eta)
        # every trial failed: the reference's tiny step
        self._step_from_per_seed(origin, grads, self._as_seed_scalar(_FALLBACK_STEP), searching)
        group["eta"] = self._kept(eta)
        self._report(applied)
        return loss


@register
class Armijo(StepSizeMethod):
    name = "armijo"
    hyperparameters = {
        "c": Float(0.1, low=0.01, high=0.5, log=True, minimum=1e-12, maximum=1.0),
        "beta": Float(0.9, low=0.3, high=0.95, minimum=1e-3, maximum=0.999),
        "gamma": Float(2.0, minimum=1.0, help="growth of the initial trial step per epoch"),
        "eta0": Float(1.0, minimum=1e-12, help="first trial step size"),
        "eta_max": Float(math.inf, minimum=1e-12, help="cap on the trial step (inf: none)"),
        "max_backtracks": Int(100, minimum=1, maximum=10_000),
        "reset_option": Choice(1, (0, 1, 2),
                               help="trial step: 0 previous, 1 previous*gamma^(1/b), 2 eta0"),
    }
    requires = frozenset({"closure"})
    reference = Reference(
        "Vaswani et al., Painless stochastic gradient: interpolation, line-search", 2019,
        "github.com/IssamLaradji/sls",
    )
    fidelity = "reference-checked"
    vectorised = True

    def step_size_cap(self):
        return self.hp.eta_max

    def build(self, params, info):
        return ArmijoSLS(
            params, eta0=self.hp.eta0, c=self.hp.c, beta=self.hp.beta, gamma=self.hp.gamma,
            eta_max=self.hp.eta_max, max_backtracks=self.hp.max_backtracks,
            batches=info.get("batches_per_epoch", 1), reset_option=self.hp.reset_option,
            seeds=info.get("seeds"),
        )
