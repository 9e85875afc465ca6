"""D-Adaptation, SGD variant: dual averaging whose scale d estimates the distance to a solution.

Step k, with g_k the gradient at x_k and d_0 = d0, s_0 = 0, n_0 = 0:

    lambda_k = lr * d_k / ||g_0||                  (the step size reported)
    n_{k+1}  = n_k + lambda_k * <g_k, s_k>
    s_{k+1}  = s_k + lambda_k * g_k
    d_hat    = 2 * n_{k+1} / ||s_{k+1}||
    d_{k+1}  = max(d_k, min(d_hat, growth_rate * d_k))
    z_{k+1}  = x_0 - s_{k+1}
    x_{k+1}  = momentum * x_k + (1 - momentum) * z_{k+1}

Sums and norms run over all tensors together. ``last_step_size`` is lambda_k = lr * d_k / ||g_0||,
the weight of g_k in s (with momentum 0 exactly the scalar multiplying g_k in x_{k+1} - x_k;
with momentum it is spread over later steps by the averaging). The new d_{k+1} first acts on the
next step. Defaults follow the reference: lr = 1, momentum = 0, d0 = 1e-6, growth_rate = inf.
The reference advises lowering lr only on instability: without momentum d can keep
growing once steps overshoot (the reference diverges on the default ``quadratic`` task too).
Its weight decay (default 0) is left out: the tasks carry their own regularisation. While every
gradient seen is zero the reference divides by ||g_0|| = 0 and fails; this takes no step,
reports 0 and waits for a nonzero first gradient; as in the reference, a step whose s_{k+1}
is exactly 0 leaves x, d and n unchanged (reported as 0).

Reference: Defazio & Mishchenko, "Learning-rate-free learning by D-Adaptation", ICML 2023;
implementation github.com/facebookresearch/dadaptation (``DAdaptSGD``, dadapt_sgd.py).
Reference-checked: tests/test_step_size_parameter_free.py compares 40-step trajectories and step
sizes in float64 with a step-by-step re-derivation of that implementation's update.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Float
from workbench.registry import Reference, register


class DAdaptSGDOptimizer(FlatOptimizer):
    """On a seed axis ``step`` (the steps taken), ``d``, ``numerator`` and ``g0_norm`` are per
    seed: a seed waiting for a nonzero first gradient, or whose s_{k+1} is 0, keeps its own."""

    def __init__(self, params, *, lr: float, momentum: float, d0: float, growth_rate: float,
                 seeds=None):
        defaults = {
            "lr": lr, "momentum": momentum, "growth_rate": growth_rate,
            "d": d0, "numerator": 0.0, "g0_norm": 0.0, "step": 0,
        }
        super().__init__(params, defaults)
        self.seeds = seeds

    def _update(self) -> None:
        group = self.param_groups[0]
        params = self._params()
        grads = self._live_grads()
        step = self._as_seed_scalar(group["step"])
        g0_norm = torch.where(step == 0, self._sq_per_seed(grads).sqrt(),
                              self._as_seed_scalar(group["g0_norm"]))
        group["g0_norm"] = self._kept(g0_norm)
        started = g0_norm != 0
        if not bool(started.any()):
            self._report(self._as_seed_scalar(0.0))
            return
        d = self._as_seed_scalar(group["d"])
        step_size = torch.where(started, group["lr"] * d / g0_norm, 0.0)
        numerator = self._as_seed_scalar(group["numerator"])
        for p, g in zip(params, grads, strict=True):
            state = self.state[p]
            if "s" not in state:
                state["x0"] = p.detach().clone()
                state["s"] = torch.zeros_like(p)
            numerator = numerator + step_size * self._sum_per_seed([g * state["s"]])
            state["s"].add_(g * self._on_param(step_size, p))
        s_norm = self._sq_per_seed([self.state[p]["s"] for p in params]).sqrt()
        moving = started & (s_norm != 0)
        if not bool(moving.any()):
            self._report(self._as_seed_scalar(0.0))
            return
        d_hat = 2 * numerator / s_norm
        new_d = torch.maximum(d, torch.minimum(d_hat, d * group["growth_rate"]))
        group["d"] = self._kept(torch.where(moving, new_d, d))
        group["numerator"] = self._kept(
            torch.where(moving, numerator, self._as_seed_scalar(group["numerator"])))
        beta = group["momentum"]
        for p in params:
            state = self.state[p]
            p.copy_(self._where_per_seed(
                moving, p * beta + (state["x0"] - state["s"]) * (1 - beta), p))
        group["step"] = self._kept_count(step + moving.double())
        self._report(torch.where(moving, step_size, 0.0))


@register
class DAdaptation(StepSizeMethod):
    name = "d_adaptation"
    hyperparameters = {
        "lr": Float(1.0, low=0.01, high=10.0, log=True, minimum=1e-12,
                    help="multiplier of the D-adapted step size"),
        "momentum": Float(0.0, minimum=0.0, maximum=0.999,
                          help="weight of x_k in the average with z_{k+1}"),
        "d0": Float(1e-6, minimum=1e-30, help="initial estimate of the distance to a solution"),
        "growth_rate": Float(math.inf, minimum=1.0, help="largest factor d may grow by per step"),
    }
    reference = Reference(
        "Defazio & Mishchenko, Learning-rate-free learning by D-Adaptation", 2023,
        "github.com/facebookresearch/dadaptation",
    )
    fidelity = "reference-checked"
    vectorised = True

    def build(self, params, info):
        return DAdaptSGDOptimizer(params, lr=self.hp.lr, momentum=self.hp.momentum, d0=self.hp.d0,
                                  growth_rate=self.hp.growth_rate, seeds=info.get("seeds"))
