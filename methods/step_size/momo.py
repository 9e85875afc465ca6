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
from workbench.hyperparams import Bool, Float
from workbench.optim import FlatOptimizer
from workbench.registry import Reference, register


class MomoOptimizer(FlatOptimizer):
    def __init__(self, params, *, lr, beta, lower_bound, bias_correction, use_fstar):
        defaults = {
            "lr": lr, "beta": beta, "bias_correction": bias_correction,
            "use_fstar": use_fstar, "initial_lb": lower_bound, "lb": lower_bound,
            "k": 0, "loss_avg": 0.0, "grad_dot_x_avg": 0.0,
        }
        super().__init__(params, defaults)

    def step(self, closure):
        loss = closure()
        with torch.no_grad():
            self._update(float(loss))
        return loss

    def _update(self, value: float) -> None:
        group = self.param_groups[0]
        beta, corrected = group["beta"], group["bias_correction"]
        params = self._params()
        grads = self._live_grads()
        grad_dot_x = float(sum(torch.sum(g * p) for g, p in zip(grads, params, strict=True)))
        group["k"] += 1
        if group["k"] == 1:
            group["loss_avg"] = 0.0 if corrected else value
            group["grad_dot_x_avg"] = 0.0 if corrected else grad_dot_x
            for p, g in zip(params, grads, strict=True):
                self.state[p]["grad_avg"] = torch.zeros_like(p) if corrected else g.clone()
        group["loss_avg"] = beta * group["loss_avg"] + (1.0 - beta) * value
        group["grad_dot_x_avg"] = beta * group["grad_dot_x_avg"] + (1.0 - beta) * grad_dot_x
        directions = []
        for p, g in zip(params, grads, strict=True):
            d = self.state[p]["grad_avg"]
            d.mul_(beta).add_(g, alpha=1.0 - beta)
            directions.append(d)
        rho = 1.0 - beta ** group["k"] if corrected else 1.0
        d_dot_x = float(sum(torch.sum(d * p) for d, p in zip(directions, params, strict=True)))
        d_sq = self._norm_sq(directions)
        model_value = group["loss_avg"] + d_dot_x - group["grad_dot_x_avg"]
        if group["use_fstar"] and model_value < rho * group["lb"]:
            group["lb"] = max(model_value / (2.0 * rho), group["initial_lb"])
        gap = max(model_value - rho * group["lb"], 0.0)
        polyak = gap / d_sq if d_sq > 0 else math.inf
        tau = min(group["lr"] / rho, polyak)
        if group["use_fstar"]:
            group["lb"] = max((model_value - 0.5 * tau * d_sq) / rho, group["initial_lb"])
        for p, d in zip(params, directions, strict=True):
            p.add_(d, alpha=-tau)
        self.last_step_size = tau


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

    def step_size_cap(self):
        return self.hp.lr / (1.0 - self.hp.beta) if self.hp.bias_correction else self.hp.lr

    def build(self, params, info):
        return MomoOptimizer(
            params, lr=self.hp.lr, beta=self.hp.beta, lower_bound=float(info["loss_lower_bound"]),
            bias_correction=self.hp.bias_correction, use_fstar=self.hp.use_fstar,
        )
