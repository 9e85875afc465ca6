"""Polyak step size for policy gradient, with a known bound on the return (SPS_max on -J).

The policy-gradient loss f(theta) estimates -J(theta), J the expected episodic return, so the
Polyak gap f(theta) - f* is J* - J(theta). With g the gradient the step receives:

    gamma_k = min( max(J* - J_hat, 0) / (c * ||g||^2 + eps),  gamma_max )
    theta_{k+1} = theta_k - gamma_k * g

J* is the task's ``return_upper_bound`` (the largest return an episode can have, from
``info``); J_hat is the latest ``episodic_return`` given to ``observe(stats)`` (the mean return
of the episodes finished in the latest rollout; a NaN keeps the previous estimate). Before
any return is known, ``first_step`` decides: ``gamma_max`` (default) steps with the cap,
``zero`` takes no step. The step size is in the units of the loss: J* - J_hat is in return
units, so the rule is scale-consistent only when the loss gradient estimates -grad J (no
advantage normalisation); ``gamma_max`` bounds it either way. ||g|| is the norm of the whole
gradient the optimizer sees (value head included when it shares the optimizer).

Reference: Li, Yuan, Fan, Schmidt, Horváth, Gower & Takáč, "Enhancing policy gradient with the
Polyak step-size adaption" (arXiv 2404.07525, 2024): gamma_k = min((V* - V_hat(theta_k)) /
(c ||grad V_hat(theta_k)||^2), gamma_b), SPS_max (Loizou et al. 2021) on -V. This implements
the case where V* is known (here J*, the task's bound); the paper's twin-model estimate of an
unknown V* and its entropy-regularised loss are not part of it. c = 0.5 and eps = 1e-8 follow
SPS's defaults (methods/step_size/polyak.py); gamma_max is the paper's gamma_b.

Fidelity: reconstructed, from the paper's description (no reference implementation was
available to compare with); tests/test_control_methods.py checks the step against the
formula, the cap, the fallback before the first return and the state round trip.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Choice, Float
from workbench.optim import FlatOptimizer
from workbench.registry import Reference, register


class PolicyGradientPolyak(FlatOptimizer):
    """SGD with the Polyak step from the observed return; state in ``param_groups[0]``. On a
    seed axis the return estimate, the gap, ||g||^2 and the step are each seed's own."""

    def __init__(self, params, *, c, gamma_max, eps, return_upper_bound, first_step,
                 seeds=None):
        defaults = {"c": c, "gamma_max": gamma_max, "eps": eps,
                    "return_upper_bound": return_upper_bound, "first_step": first_step,
                    "return_estimate": math.nan}
        super().__init__(params, defaults)
        self.seeds = seeds
        if seeds is not None:
            self.param_groups[0]["return_estimate"] = self._as_seed_scalar(math.nan)

    def observe(self, stats) -> None:
        group = self.param_groups[0]
        value = self._as_seed_scalar(stats["episodic_return"])
        estimate = self._as_seed_scalar(group["return_estimate"])
        group["return_estimate"] = self._kept(torch.where(torch.isfinite(value), value,
                                                          estimate))

    def _update(self) -> None:
        group = self.param_groups[0]
        grads = self._live_grads()
        estimate = self._as_seed_scalar(group["return_estimate"])
        gap = torch.clamp(group["return_upper_bound"] - estimate, min=0.0)
        denominator = group["c"] * self._sq_per_seed(grads) + group["eps"]
        # no gradient and eps = 0: the step does not move the parameters
        gamma = torch.where(denominator > 0,
                            torch.clamp(gap / denominator, max=group["gamma_max"]),
                            torch.where(gap > 0, group["gamma_max"], 0.0))
        first = group["gamma_max"] if group["first_step"] == "gamma_max" else 0.0
        gamma = torch.where(torch.isnan(estimate), first, gamma)
        self._descend_per_seed(grads, gamma)
        self._report(gamma)


@register
class PGPolyak(StepSizeMethod):
    name = "pg_polyak"
    hyperparameters = {
        "c": Float(0.5, minimum=1e-12, help="scale c of c * ||g||^2"),
        "gamma_max": Float(0.1, low=1e-3, high=1.0, log=True, minimum=0.0, maximum=1e6,
                           help="cap on the step size (the paper's gamma_b)"),
        "eps": Float(1e-8, minimum=0.0, help="added to c * ||g||^2"),
        "first_step": Choice("gamma_max", ("gamma_max", "zero"),
                             help="step size before any episodic return is known"),
    }
    requires = frozenset({"rl_stats", "return_upper_bound"})
    reference = Reference(
        "Li et al., Enhancing policy gradient with the Polyak step-size adaption", 2024,
    )
    fidelity = "reconstructed"
    vectorised = True

    def step_size_cap(self):
        return self.hp.gamma_max

    def build(self, params, info):
        return PolicyGradientPolyak(params, c=self.hp.c, gamma_max=self.hp.gamma_max,
                                    eps=self.hp.eps, first_step=self.hp.first_step,
                                    return_upper_bound=float(info["return_upper_bound"]),
                                    seeds=info.get("seeds"))
