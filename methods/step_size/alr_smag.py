"""ALR-SMAG: the Polyak step size generalised to stochastic heavy-ball momentum.

    d_k   = beta d_{k-1} + g_k          (d_0 = 0; a sum, not an average)
    tau_k = min( lr, (f(x_k) - f_lb) / (c ||d_k||^2) )
    x_{k+1} = x_k - tau_k d_k

f is the step's (minibatch) loss and f_lb the task's lower bound on it (``loss_lower_bound``;
the reference's ``lb``, 0 by default: the same on a loss bounded below by 0). The momentum
direction, not the gradient, enters the Polyak ratio, which is what keeps the method from the
heavy ball's oscillation on ill-conditioned problems and makes it insensitive to beta.
``last_step_size`` is tau_k, at most ``lr``. Where ||d_k|| = 0 the step is lr (nothing moves).
The reference's decoupled weight decay is left out (the task's to set here).

Reference: Wang, Johansson & Zhang, "Generalized Polyak step size for first order optimization
with momentum", ICML 2023 (arXiv 2305.12939); implementation: Schaipp's ``AlrSmag`` in
github.com/fabian-sp/step-back (``stepback/optim/alr_smag.py``, commit 94f055b). Reference-checked:
tests/test_alr_smag.py compares six steps (iterates and step sizes, float64, a logistic
regression and a quadratic) with that optimizer's.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Float
from workbench.registry import Reference, register


class ALRSMAGOptimizer(FlatOptimizer):
    def __init__(self, params, *, lr: float, beta: float, c: float, lower_bound, seeds=None):
        super().__init__(params, {"lr": lr, "beta": beta, "c": c})
        self.seeds = seeds
        self._lower_bound = lower_bound  # a float, or per seed on a seed axis

    def step(self, closure):
        loss = closure()
        group = self.param_groups[0]
        with torch.no_grad():
            directions = []
            for p, grad in zip(self._params(), self._live_grads(), strict=True):
                state = self.state[p]
                if "d" not in state:
                    state["d"] = torch.zeros_like(p)
                state["d"].mul_(group["beta"]).add_(grad)
                directions.append(state["d"])
            norm_sq = self._sq_per_seed(directions)
            gap = loss.detach().double() - self._as_seed_scalar(self._lower_bound)
            lr = self._as_seed_scalar(group["lr"])
            ratio = torch.where(norm_sq > 0, gap / (group["c"] * norm_sq), lr)
            tau = torch.minimum(lr, ratio)
            self._descend_per_seed(directions, tau)
        self._report(tau)
        return loss


@register
class ALRSMAG(StepSizeMethod):
    name = "alr_smag"
    hyperparameters = {
        "lr": Float(1.0, low=1e-2, high=1e2, log=True, minimum=0.0,
                    help="cap on the step size (the reference's lr, eta_max)"),
        "beta": Float(0.9, low=0.0, high=0.99, minimum=0.0, maximum=1.0,
                      help="momentum: d = beta d + g"),
        "c": Float(1.0, minimum=1e-12, help="Polyak scale: (f - f_lb) / (c ||d||^2)"),
    }
    requires = frozenset({"loss_lower_bound"})
    reference = Reference(
        "Wang, Johansson & Zhang, Generalized Polyak step size for first order optimization "
        "with momentum (ALR-SMAG)", 2023, "github.com/fabian-sp/step-back",
    )
    fidelity = "reference-checked"
    vectorised = True

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        return ALRSMAGOptimizer(params, lr=self.hp.lr, beta=self.hp.beta, c=self.hp.c,
                                lower_bound=info["loss_lower_bound"], seeds=info.get("seeds"))
