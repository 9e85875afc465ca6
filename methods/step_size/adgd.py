"""AdGD, adaptive gradient descent without descent, and its Δ-SGD variant.

Both take x_{k+1} = x_k - lambda_k * g_k with a step size from a local curvature estimate;
``last_step_size`` is lambda_k.

``variant="adgd"`` (default; Malitsky & Mishchenko's Algorithm 1, the reference's ``Adgd``):

    lambda_0 = lr0,  theta_0 = +inf,  x_1 = x_0 - lambda_0 g_0
    lambda_k = min( sqrt(1 + theta_{k-1}) lambda_{k-1},  ||x_k - x_{k-1}|| / (2 ||g_k - g_{k-1}||) )
    theta_k  = lambda_k / lambda_{k-1}

g_{k-1} is the gradient of the previous step (on its own minibatch; full-batch this is the
reference exactly). lr0 = 1e-10 is the reference's default first step; in float32 such a step
may not move the parameters at all, so choose a larger lr0 there. Where g_k = g_{k-1} or
x_k = x_{k-1} the curvature bound is +inf (no information; the reference gets +inf, resp. 0,
which stalls it), and where both bounds are infinite lambda_k = lambda_{k-1}. The reference's
``eps`` (an estimate of 1/L^2 added to the bound) stays at its default, 0.

``variant="delta_sgd"`` (Δ-SGD; the reference's PyTorch ``Adsgd``, which the Δ-SGD authors' code
uses as its client optimizer): the previous gradient is re-evaluated at x_{k-1} on the current
minibatch (one extra gradient evaluation per step, from the second step on; the reference also
spends one at step one, where it cannot change the step), and

    lambda_k = min( sqrt(1 + amplifier theta_{k-1}) lambda_{k-1},
                    ||x_k - x_{k-1}|| / (damping ||g_k(x_k) - g_k(x_{k-1})||) ) + eps

when both norms are positive, else (as at the first step, where x_{k-1} = x_k)
lambda_k = sqrt(1 + amplifier theta_{k-1}) lambda_{k-1}; before the first step theta = 1 and
lambda = delta_lr0. In the Δ-SGD paper's notation delta = amplifier and
gamma = 2 / damping. Defaults are those of the Δ-SGD code (lr 0.2, amplifier 0.02, damping 1,
eps 1e-8); weight decay (default 0) is left out.

Reference: Malitsky & Mishchenko, "Adaptive Gradient Descent without Descent", ICML 2020,
implementation github.com/ymalitsky/adaptive_GD (``optimizers.Adgd``; ``pytorch/optimizer.py``
``Adsgd``); Kim, Toghani, Uribe & Kyrillidis, "Adaptive Federated Learning with Auto-Tuned
Clients" (Δ-SGD), ICLR 2024, implementation github.com/jlylekim/auto-tuned-FL (``src/adsgd.py``,
``src/options.py``, ``src/update.py``). Reference-checked: tests/test_step_size_momentum_adaptive.py
compares 40-step trajectories (parameters and step sizes, float64, a quadratic and a logistic
regression, full and minibatch) of both variants with re-derivations of those updates.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


class AdGDOptimizer(FlatOptimizer):
    def __init__(self, params, *, variant, lr0, amplifier, damping, eps, seeds=None):
        delta = variant == "delta_sgd"
        defaults = {
            "variant": variant, "amplifier": amplifier, "damping": damping, "eps": eps,
            "lr": lr0, "theta": 1.0 if delta else math.inf, "k": 0,
        }
        super().__init__(params, defaults)
        self.seeds = seeds

    def _previous(self, key: str) -> list[torch.Tensor]:
        return [self.state[p][key] for p in self._params()]

    def _distance(self, a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
        return self._sq_per_seed([u - v for u, v in zip(a, b, strict=True)]).sqrt()

    def step(self, closure):
        group = self.param_groups[0]
        delta = group["variant"] == "delta_sgd"
        first = group["k"] == 0  # all seeds step together
        if delta and not first:
            current = self._snapshot()
            self._set(self._previous("x_prev"))
            closure()
            for p, g in zip(self._params(), self._grads(), strict=True):
                self.state[p]["g_prev"] = g
            self._set(current)
        loss = closure()
        with torch.no_grad():
            params, grads = self._snapshot(), self._grads()
            lr = self._as_seed_scalar(group["lr"])
            if delta or not first:
                zero = self._as_seed_scalar(0.0)
                moved = zero if first else self._distance(params, self._previous("x_prev"))
                changed = zero if first else self._distance(grads, self._previous("g_prev"))
                rule = self._delta_sgd if delta else self._adgd
                new_lr = rule(group, lr, self._as_seed_scalar(group["theta"]), moved, changed)
                theta = torch.where(lr > 0, new_lr / lr, math.inf)
                group["theta"] = self._kept(theta)
                lr = new_lr
                group["lr"] = self._kept(lr)
            for p, x, g in zip(self._params(), params, grads, strict=True):
                self.state[p]["x_prev"] = x
                self.state[p]["g_prev"] = g
            self._descend_per_seed(grads, lr)
        group["k"] += 1
        self._report(lr)
        return loss

    @staticmethod
    def _adgd(group, lr, theta, moved, changed):
        informed = (moved > 0) & (changed > 0)
        bound = torch.where(informed, moved / (2.0 * changed), math.inf)
        growth = torch.sqrt(1.0 + theta) * lr
        new_lr = torch.minimum(growth, bound)
        return torch.where(torch.isfinite(new_lr), new_lr, lr)

    @staticmethod
    def _delta_sgd(group, lr, theta, moved, changed):
        growth = lr * torch.sqrt(1.0 + group["amplifier"] * theta)
        informed = (moved > 0) & (changed > 0)
        bounded = torch.minimum(growth, moved / (group["damping"] * changed)) + group["eps"]
        return torch.where(informed, bounded, growth)


@register
class AdGD(StepSizeMethod):
    name = "adgd"
    hyperparameters = {
        "variant": Choice("adgd", ("adgd", "delta_sgd"),
                          help="adgd: Malitsky & Mishchenko; delta_sgd: Δ-SGD (Kim et al.)"),
        "lr0": Float(1e-10, minimum=1e-30, help="adgd: first step size lambda_0"),
        "delta_lr0": Float(0.2, minimum=1e-30, help="delta_sgd: first step size lambda_0"),
        "amplifier": Float(0.02, minimum=0.0,
                           help="delta_sgd: growth sqrt(1 + amplifier * theta) (paper's delta)"),
        "damping": Float(1.0, minimum=1e-12,
                         help="delta_sgd: curvature bound ||dx|| / (damping ||dg||)"),
        "eps": Float(1e-8, minimum=0.0, help="delta_sgd: added to the bounded step size"),
    }
    reference = Reference(
        "Malitsky & Mishchenko, Adaptive Gradient Descent without Descent", 2020,
        "github.com/ymalitsky/adaptive_GD",
    )
    fidelity = "reference-checked"
    vectorised = True

    @classmethod
    def requirements(cls, params):
        return frozenset({"closure"} if params["variant"] == "delta_sgd" else set())

    def build(self, params, info):
        delta = self.hp.variant == "delta_sgd"
        return AdGDOptimizer(
            params, variant=self.hp.variant, lr0=self.hp.delta_lr0 if delta else self.hp.lr0,
            amplifier=self.hp.amplifier, damping=self.hp.damping, eps=self.hp.eps,
            seeds=info.get("seeds"),
        )
