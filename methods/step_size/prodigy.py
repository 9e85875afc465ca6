"""Prodigy: Adam whose step size d estimates the distance to a solution (D-Adaptation family).

Step k, with g_k the gradient at x_k, d_0 = d0, d_max = d0, and r_0 = s_0 = m_0 = v_0 = 0:

    lambda_k = lr * d_k * bc_k          (bc_k = sqrt(1 - beta2^(k+1)) / (1 - beta1^(k+1)) with
                                         use_bias_correction, else 1; the step size reported)
    r_{k+1}  = beta3 * r_k + (d_k / d0) * lambda_k * <g_k, x_0 - x_k>
    m_{k+1}  = beta1 * m_k + d_k (1 - beta1) g_k
    v_{k+1}  = beta2 * v_k + d_k^2 (1 - beta2) g_k^2          (elementwise)
    s_{k+1}  = beta3 * s_k + (d_k / d0) * w_k * g_k          (w_k = lambda_k; d_k with
                                                              safeguard_warmup)
    d_hat    = d_coef * r_{k+1} / ||s_{k+1}||_1
    d'       = max(d_k, d_hat) if d_k == d0 else d_k
    d_max    = max(d_max, d_hat);   d_{k+1} = min(d_max, growth_rate * d')
    x_{k+1}  = x_k - lambda_k * m_{k+1} / (sqrt(v_{k+1}) + d_{k+1} * eps)

With beta1 = 0 there is no m: the last line uses d_{k+1} * g_k in its place. Inner products and
the l1 norm run over all tensors together; beta3 < 0 stands for the reference's default
beta3 = sqrt(beta2). ``last_step_size`` is lambda_k (= d_k * lr in the default configuration),
the scalar multiplying Adam's normalised direction. A step whose ||s_{k+1}||_1 is 0 leaves x and
d unchanged, as in the reference (reported as 0).

Defaults follow the reference: lr = 1, betas = (0.9, 0.999), beta3 = sqrt(beta2), eps = 1e-8,
d0 = 1e-6, d_coef = 1, growth_rate = inf, use_bias_correction = False, safeguard_warmup = False.
Left out: weight decay (reference default 0; the tasks carry their own regularisation) and
``slice_p`` (default 1, exact statistics; larger values subsample them to save memory).

Reference: Mishchenko & Defazio, "Prodigy: an expeditiously adaptive parameter-free learner",
ICML 2024; implementation github.com/konstmish/prodigy (``prodigyopt.Prodigy``, prodigy.py).
Reference-checked: tests/test_step_size_parameter_free.py compares 40-step trajectories and step
sizes in float64 with a step-by-step re-derivation of that implementation's update.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Bool, Float
from workbench.registry import Reference, register


class ProdigyOptimizer(FlatOptimizer):
    """On a seed axis ``step`` (the steps taken), ``d``, ``d_max`` and ``numerator`` are per
    seed: a seed whose ||s_{k+1}||_1 is 0 keeps its own."""

    def __init__(self, params, *, lr, beta1, beta2, beta3, eps, d0, d_coef, growth_rate,
                 use_bias_correction, safeguard_warmup, seeds=None):
        defaults = {
            "lr": lr, "beta1": beta1, "beta2": beta2,
            "beta3": math.sqrt(beta2) if beta3 < 0 else beta3, "eps": eps, "d0": d0,
            "d_coef": d_coef, "growth_rate": growth_rate,
            "use_bias_correction": use_bias_correction, "safeguard_warmup": safeguard_warmup,
            "d": d0, "d_max": d0, "numerator": 0.0, "step": 0,
        }
        super().__init__(params, defaults)
        self.seeds = seeds

    def _update(self) -> None:
        group = self.param_groups[0]
        beta1, beta2, beta3 = group["beta1"], group["beta2"], group["beta3"]
        d0 = group["d0"]
        d, k = self._as_seed_scalar(group["d"]), self._as_seed_scalar(group["step"])
        bias_correction = self._as_seed_scalar(1.0)
        if group["use_bias_correction"]:
            bias_correction = (1 - torch.pow(beta2, k + 1)).sqrt() / (1 - torch.pow(beta1, k + 1))
        step_size = d * group["lr"] * bias_correction
        s_weight = (d / d0) * (d if group["safeguard_warmup"] else step_size)
        numerator = beta3 * self._as_seed_scalar(group["numerator"])
        params = self._params()
        grads = self._live_grads()
        for p, g in zip(params, grads, strict=True):
            state = self.state[p]
            if "s" not in state:
                state["x0"] = p.detach().clone()
                state["s"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
                if beta1 > 0:
                    state["exp_avg"] = torch.zeros_like(p)
            numerator = numerator + (d / d0) * step_size * self._sum_per_seed(
                [g * (state["x0"] - p)])
            if beta1 > 0:
                state["exp_avg"].mul_(beta1).add_(g * self._on_param(d * (1 - beta1), p))
            state["exp_avg_sq"].mul_(beta2).add_(
                g * self._on_param(d * d * (1 - beta2), p) * g)
            state["s"].mul_(beta3).add_(g * self._on_param(s_weight, p))
        s_l1 = sum(self._sum_per_seed([self.state[p]["s"].abs()]) for p in params)
        moving = s_l1 != 0
        if not bool(moving.any()):
            self._report(self._as_seed_scalar(0.0))
            return
        d_hat = group["d_coef"] * numerator / s_l1
        grown = torch.where(d == d0, torch.maximum(d, d_hat), d)
        d_max = self._as_seed_scalar(group["d_max"])
        d_max = torch.where(moving, torch.maximum(d_max, d_hat), d_max)
        d = torch.where(moving, torch.minimum(d_max, grown * group["growth_rate"]), d)
        group["d"], group["d_max"] = self._kept(d), self._kept(d_max)
        group["numerator"] = self._kept(
            torch.where(moving, numerator, self._as_seed_scalar(group["numerator"])))
        for p, g in zip(params, grads, strict=True):
            state = self.state[p]
            denominator = state["exp_avg_sq"].sqrt().add_(self._on_param(d * group["eps"], p))
            if beta1 > 0:
                moved = p - state["exp_avg"] * self._on_param(step_size, p) / denominator
            else:
                moved = p - g * self._on_param(step_size * d, p) / denominator
            p.copy_(self._where_per_seed(moving, moved, p))
        group["step"] = self._kept_count(k + moving.double())
        self._report(torch.where(moving, step_size, 0.0))


@register
class Prodigy(StepSizeMethod):
    name = "prodigy"
    hyperparameters = {
        "d_coef": Float(1.0, low=0.1, high=10.0, log=True, minimum=1e-12,
                        help="multiplier of the estimate d_hat"),
        "lr": Float(1.0, minimum=1e-12, help="multiplier of the step size d * lr"),
        "beta1": Float(0.9, minimum=0.0, maximum=0.9999, help="Adam's first-moment decay"),
        "beta2": Float(0.999, minimum=0.0, maximum=0.99999, help="Adam's second-moment decay"),
        "beta3": Float(-1.0, minimum=-1.0, maximum=0.99999,
                       help="decay of the d-estimate sums (negative: sqrt(beta2))"),
        "eps": Float(1e-8, minimum=1e-30, help="added to sqrt(v), scaled by d"),
        "d0": Float(1e-6, minimum=1e-30, help="initial estimate of the distance to a solution"),
        "growth_rate": Float(math.inf, minimum=1.0, help="largest factor d may grow by per step"),
        "use_bias_correction": Bool(False, help="Adam's bias correction in the step size"),
        "safeguard_warmup": Bool(False, help="leave lr out of the d-estimate denominator"),
    }
    reference = Reference(
        "Mishchenko & Defazio, Prodigy: an expeditiously adaptive parameter-free learner", 2024,
        "github.com/konstmish/prodigy",
    )
    fidelity = "reference-checked"
    vectorised = True

    def build(self, params, info):
        return ProdigyOptimizer(
            params, lr=self.hp.lr, beta1=self.hp.beta1, beta2=self.hp.beta2, beta3=self.hp.beta3,
            eps=self.hp.eps, d0=self.hp.d0, d_coef=self.hp.d_coef, growth_rate=self.hp.growth_rate,
            use_bias_correction=self.hp.use_bias_correction,
            safeguard_warmup=self.hp.safeguard_warmup, seeds=info.get("seeds"),
        )
