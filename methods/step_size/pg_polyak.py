"""Polyak step size for policy gradient, with a known or an estimated optimum (SPS_max on -J).

The policy-gradient loss f(theta) estimates -J(theta), J the expected episodic return, so the
Polyak gap f(theta) - f* is J* - J(theta). With g the gradient the step receives:

    gamma_k = min( max(J* - J_hat, 0) / (c * ||g||^2 + eps),  gamma_max )
    theta_{k+1} = theta_k - gamma_k * g

J* is, with ``optimum: known`` (default), the task's ``return_upper_bound`` (the largest return
an episode can have, from ``info``); with ``optimum: running_max``, an estimate for tasks with
no known bound: the best return seen so far plus a margin, J*_k = max_{i<=k} J_hat_i + delta
(so the gap J*_k - J_hat_k is at least delta, and the step shrinks as the return stops
improving). J_hat is the latest ``episodic_return`` given to ``observe(stats)`` (the mean return
of the episodes finished in the latest rollout; a NaN keeps the previous estimate). Before
any return is known, ``first_step`` decides: ``gamma_max`` (default) steps with the cap,
``zero`` takes no step. The step size is in the units of the loss: J* - J_hat is in return
units, so the rule is scale-consistent only when the loss gradient estimates -grad J (no
advantage normalisation); ``gamma_max`` bounds it either way. ||g|| is the norm of the whole
gradient the optimizer sees (value head included when it shares the optimizer).

Reference: Li, Yuan, Fan, Schmidt, Horváth, Gower & Takáč, "Enhancing policy gradient with the
Polyak step-size adaption" (arXiv 2404.07525, 2024): gamma_k = min((V* - V_hat(theta_k)) /
(c ||grad V_hat(theta_k)||^2), gamma_b), SPS_max (Loizou et al. 2021) on -V. This implements
the case where V* is known (here J*, the task's bound) and, for an unknown V*, a running
maximum plus a margin (the project's literature catalogue, entry 3, option b) in place of the
paper's twin-model estimate, which is not part of it, nor is its entropy-regularised loss.
c = 0.5 and eps = 1e-8 follow SPS's defaults (methods/step_size/polyak.py); gamma_max is the
paper's gamma_b.

Fidelity: reconstructed, from the paper's description (no reference implementation was
available to compare with); tests/test_control_methods.py checks the step against the
formula, the cap, the fallback before the first return and the state round trip.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


class PolicyGradientPolyak(FlatOptimizer):
    """SGD with the Polyak step from the observed return; state in ``param_groups[0]``. On a
    seed axis the return estimate, the gap, ||g||^2 and the step are each seed's own."""

    def __init__(self, params, *, c, gamma_max, eps, return_upper_bound, first_step,
                 delta=None, seeds=None):
        defaults = {"c": c, "gamma_max": gamma_max, "eps": eps,
                    "return_upper_bound": return_upper_bound, "first_step": first_step,
                    "return_estimate": math.nan, "best_return": math.nan, "delta": delta}
        super().__init__(params, defaults)
        self.seeds = seeds
        if seeds is not None:
            self.param_groups[0]["return_estimate"] = self._as_seed_scalar(math.nan)
            self.param_groups[0]["best_return"] = self._as_seed_scalar(math.nan)

    def observe(self, stats) -> None:
        group = self.param_groups[0]
        value = self._as_seed_scalar(stats["episodic_return"])
        estimate = self._as_seed_scalar(group["return_estimate"])
        group["return_estimate"] = self._kept(torch.where(torch.isfinite(value), value,
                                                          estimate))
        best = self._as_seed_scalar(group["best_return"])
        group["best_return"] = self._kept(torch.fmax(best, torch.where(
            torch.isfinite(value), value, math.nan)))

    def _optimum(self) -> torch.Tensor:
        """J*: the known bound, or the best return seen plus delta (NaN before any return)."""
        group = self.param_groups[0]
        if group["delta"] is None:
            return self._as_seed_scalar(group["return_upper_bound"])
        return self._as_seed_scalar(group["best_return"]) + group["delta"]

    def _update(self) -> None:
        group = self.param_groups[0]
        grads = self._live_grads()
        estimate = self._as_seed_scalar(group["return_estimate"])
        gap = torch.clamp(self._optimum() - estimate, min=0.0)
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
        "optimum": Choice("known", ("known", "running_max"),
                          help="J*: the task's return bound, or the best return seen + delta"),
        "delta": Float(1.0, minimum=1e-12,
                       help="running_max: margin above the best return, in return units"),
    }
    reference = Reference(
        "Li et al., Enhancing policy gradient with the Polyak step-size adaption", 2024,
    )
    fidelity = "reconstructed"
    vectorised = True

    @classmethod
    def requirements(cls, params):
        if params["optimum"] == "known":
            return frozenset({"rl_stats", "return_upper_bound"})
        return frozenset({"rl_stats"})

    def step_size_cap(self):
        return self.hp.gamma_max

    def build(self, params, info):
        known = self.hp.optimum == "known"
        return PolicyGradientPolyak(
            params, c=self.hp.c, gamma_max=self.hp.gamma_max, eps=self.hp.eps,
            first_step=self.hp.first_step, delta=None if known else self.hp.delta,
            return_upper_bound=float(info["return_upper_bound"]) if known else math.nan,
            seeds=info.get("seeds"))
