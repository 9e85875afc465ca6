"""DoG, Distance over Gradients: SGD whose step size is a distance over a gradient sum.

    r_t   = max(r_eps, max_{i<=t} ||x_i - x_0||),    r_eps = reps_rel * (1 + ||x_0||)
    G_t   = eps + sum_{i<=t} ||g_i||^2
    eta_t = lr * r_t / sqrt(G_t)
    x_{t+1} = x_t - eta_t * g_t

Norms are global: all tensors of the parameter group form one vector (the reference's ``DoG``
class; its layer-wise ``LDoG`` is a different scheme). With ``init_eta > 0`` the first step
size is ``init_eta`` and r_eps is 0, as in the reference. Defaults follow the reference:
reps_rel = 1e-6, lr = 1, eps = 1e-8. Its weight decay (default 0) is left out: the tasks carry
their own regularisation. ``last_step_size`` is eta_t. Where the reference stops on G_t = 0 (all
gradients zero and eps = 0), this takes no step and reports 0.

Reference: Ivgi, Hinder & Carmon, "DoG is SGD's best friend: a parameter-free dynamic step size
schedule", ICML 2023; implementation github.com/formll/dog (``dog.DoG``, version 1.0.3).
Reference-checked: tests/test_step_size_parameter_free.py compares 40-step trajectories and step
sizes in float64 with a step-by-step re-derivation of that implementation's update.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Float
from workbench.registry import Reference, register


class DoGOptimizer(FlatOptimizer):
    def __init__(self, params, *, reps_rel: float, lr: float, eps: float, init_eta: float,
                 seeds=None):
        defaults = {
            "reps_rel": reps_rel, "lr": lr, "eps": eps, "init_eta": init_eta,
            "step": 0, "max_distance": 0.0, "grad_sq_sum": 0.0,
        }
        super().__init__(params, defaults)
        self.seeds = seeds

    def _update(self) -> None:
        group = self.param_groups[0]
        params = self._params()
        grads = self._live_grads()
        first = group["step"] == 0  # all seeds step together
        if first:
            for p in params:
                self.state[p]["x0"] = p.detach().clone()
            if group["init_eta"] > 0:
                max_distance = self._as_seed_scalar(0.0)
            else:
                max_distance = group["reps_rel"] * (1.0 + self._sq_per_seed(params).sqrt())
            grad_sq_sum = self._as_seed_scalar(group["eps"])
        else:
            distance = self._sq_per_seed([p - self.state[p]["x0"] for p in params]).sqrt()
            max_distance = torch.maximum(self._as_seed_scalar(group["max_distance"]), distance)
            grad_sq_sum = self._as_seed_scalar(group["grad_sq_sum"])
        grad_sq_sum = grad_sq_sum + self._sq_per_seed(grads)
        if first and group["init_eta"] > 0:
            eta = self._as_seed_scalar(group["init_eta"])
        else:
            eta = torch.where(grad_sq_sum > 0,
                              group["lr"] * max_distance / grad_sq_sum.sqrt(), 0.0)
        self._descend_per_seed(grads, eta)
        group["max_distance"] = self._kept(max_distance)
        group["grad_sq_sum"] = self._kept(grad_sq_sum)
        group["step"] += 1
        self._report(eta)


@register
class DoG(StepSizeMethod):
    name = "dog"
    hyperparameters = {
        "reps_rel": Float(1e-6, low=1e-8, high=1e-2, log=True, minimum=1e-16,
                          help="initial movement r_eps = reps_rel * (1 + ||x_0||)"),
        "lr": Float(1.0, minimum=1e-12, help="multiplier of the DoG step size (c)"),
        "eps": Float(1e-8, minimum=0.0, help="added to the sum of squared gradient norms"),
        "init_eta": Float(0.0, minimum=0.0,
                          help="first step size, replacing reps_rel (0: use reps_rel)"),
    }
    reference = Reference(
        "Ivgi, Hinder & Carmon, DoG is SGD's best friend: a parameter-free dynamic step size "
        "schedule", 2023, "github.com/formll/dog",
    )
    fidelity = "reference-checked"
    vectorised = True

    def build(self, params, info):
        return DoGOptimizer(params, reps_rel=self.hp.reps_rel, lr=self.hp.lr, eps=self.hp.eps,
                            init_eta=self.hp.init_eta, seeds=info.get("seeds"))
