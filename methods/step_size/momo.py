"""MoMo: a Polyak-type step size for SGD with momentum, from a model built on momentum averages.

With g_k the minibatch gradient and f_k the minibatch loss at x_k:

    fbar_k  = beta * fbar_{k-1}  + (1 - beta) * f_k
    d_k     = beta * d_{k-1}     + (1 - beta) * g_k
    gamma_k = beta * gamma_{k-1} + (1 - beta) * <g_k, x_k>
    h_k     = fbar_k + <d_k, x_k> - gamma_k
    tau_k   = min( lr / rho_k,  max(h_k - rho_k * lb, 0) / ||d_k||^2 )
    x_{k+1} = x_k - tau_k * d_k

Without bias correction (default) rho_k = 1 and the averages start at the first values (fbar_0 =
f_0, d_0 = g_0, gamma_0 = <g_0, x_0>); with ``bias_correction`` they start at zero and
rho_k = 1 - beta**k. ``last_step_size`` is tau_k, the scalar applied to the momentum direction
d_k. Where ||d_k|| = 0 nothing moves and tau_k is the cap lr / rho_k, as the reference's
``min`` gives.

The lower bound lb is the task's ``loss_lower_bound`` (0 for non-negative losses, the
reference's default lb = 0). With ``use_fstar`` it is instead an online estimate, never below
that bound, reset and updated as the reference does:
    if h_k < rho_k * lb:  lb = max(h_k / (2 rho_k), lb_0)          (before tau_k)
    lb = max((h_k - tau_k ||d_k||^2 / 2) / rho_k, lb_0)             (after tau_k)

Defaults follow the reference's ``Momo`` (SGD type): lr = 1, beta = 0.9, bias_correction off,
use_fstar off. Its weight decay (default 0) is left out: the tasks carry their own
regularisation.

Reference: Schaipp, Ohana, Eickenberg, Defazio & Gower, "MoMo: Momentum Models for Adaptive
Learning Rates", ICML 2024; implementation github.com/fabian-sp/MoMo (``momo.Momo``).
Reference-checked: tests/test_step_size_momentum_adaptive.py compares 40-step trajectories
(parameters and step sizes, float64, a quadratic and a logistic regression, with and without
bias correction and use_fstar) with a re-derivation of that update.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Bool, Float
from workbench.registry import Reference, register


class MomoOptimizer(FlatOptimizer):
    def __init__(self, params, *, lr, beta, lower_bound, bias_correction, use_fstar, seeds=None):
        defaults = {
            "lr": lr, "beta": beta, "bias_correction": bias_correction,
            "use_fstar": use_fstar, "initial_lb": 0.0, "lb": 0.0,
            "k": 0, "loss_avg": 0.0, "grad_dot_x_avg": 0.0,
        }
        super().__init__(params, defaults)
        self.seeds = seeds
        group = self.param_groups[0]  # the task's bound: a float, or per seed on a seed axis
        group["initial_lb"] = group["lb"] = self._kept(self._as_seed_scalar(lower_bound))

    def step(self, closure):
        loss = closure()
        with torch.no_grad():
            self._update(loss.detach().double())
        return loss

    def _update(self, value: torch.Tensor) -> None:
        group = self.param_groups[0]
        beta, corrected = group["beta"], group["bias_correction"]
        params = self._params()
        grads = self._live_grads()
        grad_dot_x = self._sum_per_seed([g * p for g, p in zip(grads, params, strict=True)])
        group["k"] += 1  # all seeds step together
        if group["k"] == 1:
            loss_avg = self._as_seed_scalar(0.0) if corrected else value
            grad_dot_x_avg = self._as_seed_scalar(0.0) if corrected else grad_dot_x
            for p, g in zip(params, grads, strict=True):
                self.state[p]["grad_avg"] = torch.zeros_like(p) if corrected else g.clone()
        else:
            loss_avg = self._as_seed_scalar(group["loss_avg"])
            grad_dot_x_avg = self._as_seed_scalar(group["grad_dot_x_avg"])
        loss_avg = beta * loss_avg + (1.0 - beta) * value
        grad_dot_x_avg = beta * grad_dot_x_avg + (1.0 - beta) * grad_dot_x
        directions = []
        for p, g in zip(params, grads, strict=True):
            d = self.state[p]["grad_avg"]
            d.mul_(beta).add_(g, alpha=1.0 - beta)
            directions.append(d)
        rho = 1.0 - beta ** group["k"] if corrected else 1.0
        d_dot_x = self._sum_per_seed([d * p for d, p in zip(directions, params, strict=True)])
        d_sq = self._sq_per_seed(directions)
        model_value = loss_avg + d_dot_x - grad_dot_x_avg
        lb = self._as_seed_scalar(group["lb"])
        initial_lb = self._as_seed_scalar(group["initial_lb"])
        if group["use_fstar"]:
            lb = torch.where(model_value < rho * lb,
                             torch.maximum(model_value / (2.0 * rho), initial_lb), lb)
        gap = torch.clamp(model_value - rho * lb, min=0.0)
        polyak = torch.where(d_sq > 0, gap / d_sq, math.inf)
        tau = torch.clamp(polyak, max=group["lr"] / rho)
        if group["use_fstar"]:
            lb = torch.maximum((model_value - 0.5 * tau * d_sq) / rho, initial_lb)
        self._descend_per_seed(directions, tau)
        group["loss_avg"] = self._kept(loss_avg)
        group["grad_dot_x_avg"] = self._kept(grad_dot_x_avg)
        group["lb"] = self._kept(lb)
        self._report(tau)


@register
class Momo(StepSizeMethod):
    name = "momo"
    hyperparameters = {
        "lr": Float(1.0, low=1e-2, high=1e2, log=True, minimum=0.0,
                    help="cap on the adaptive step size"),
        "beta": Float(0.9, minimum=0.0, maximum=0.999, help="momentum of the averages"),
        "bias_correction": Bool(False, help="averages start at zero, rescaled by 1-beta^k"),
        "use_fstar": Bool(False, help="estimate the lower bound online (never below the "
                                      "task's bound)"),
    }
    requires = frozenset({"loss_lower_bound"})
    reference = Reference(
        "Schaipp et al., MoMo: Momentum Models for Adaptive Learning Rates", 2024,
        "github.com/fabian-sp/MoMo",
    )
    fidelity = "reference-checked"
    vectorised = True

    def step_size_cap(self):
        return self.hp.lr / (1.0 - self.hp.beta) if self.hp.bias_correction else self.hp.lr

    def build(self, params, info):
        return MomoOptimizer(
            params, lr=self.hp.lr, beta=self.hp.beta, lower_bound=info["loss_lower_bound"],
            bias_correction=self.hp.bias_correction, use_fstar=self.hp.use_fstar,
            seeds=info.get("seeds"),
        )
