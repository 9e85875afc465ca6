"""Normalized LR+GD: gradient descent on the logistic loss, its step divided by the mean
sigmoid weight of the samples.

    w_i(theta) = sigma(-y_i <a_i, theta>) = 1 / (1 + exp(y_i <a_i, theta>))
    beta_t     = 1 / ( (1/n) sum_i w_i(theta_t) )
    theta_{t+1} = theta_t - lr * beta_t * grad f(theta_t)

with f(theta) = (1/n) sum_i log(1 + exp(-y_i <a_i, theta>)) and ``lr`` the paper's gamma.
Since grad f = -(1/n) sum_i w_i y_i a_i, the step lr * beta_t * grad f is lr times a convex
combination of the -y_i a_i, weighted towards the worst-classified samples: the normalized
batch perceptron as lr -> inf. ``last_step_size`` is lr * beta_t (2 lr at theta = 0).

``margins``: the method needs y_i <a_i, theta> for the samples of the step's (mini)batch at the
current parameters, which only a binary linear classification task can give; with a
minibatch, the mean runs over it (the paper's rule is full batch). ``epsilon`` floors the mean
weight, which tends to 0 as the margins grow, so the step size stays finite:
``last_step_size`` <= lr / epsilon (``step_size_cap``).

Reference: Tyurin, "From logistic regression to the perceptron algorithm: exploring gradient
descent with large step sizes", 2024 (arXiv 2412.08424), Section 6, Normalized LR+GD. No
reference code: the formula was transcribed from the paper's text (see the project's
literature catalogue, #75), not checked against an implementation. Fidelity: reconstructed.
tests/test_normalized_lr.py checks the update by hand and the first block of the paper's
Table 1 (the worst-case data set of Theorem 5.1, n = 1000, theta_0 = 0) against numpy.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Float
from workbench.registry import Reference, register


class NormalizedLRGD(FlatOptimizer):
    """``margins()`` gives y_i <a_i, theta> of the step's samples at the current parameters;
    on a seed axis each seed's (S, b), and beta_t = 1 / mean_i w_i per seed (over its own
    samples only)."""

    def __init__(self, params, lr: float, epsilon: float, margins, seeds=None):
        super().__init__(params, {"lr": lr, "epsilon": epsilon})
        self.seeds = seeds
        self._margins = margins

    def step(self, closure):
        loss = closure()
        group = self.param_groups[0]
        with torch.no_grad():
            weight = torch.sigmoid(-self._margins()).mean(-1).double()
        step_size = group["lr"] / torch.clamp(weight, min=group["epsilon"])
        self._descend_per_seed(self._grads(), step_size)
        self._report(step_size)
        return loss


@register
class NormalizedLR(StepSizeMethod):
    name = "normalized_lr"
    hyperparameters = {
        "lr": Float(1.0, low=1e-2, high=1e3, log=True, minimum=0.0,
                    help="step scale (the paper's gamma)"),
        "epsilon": Float(1e-12, minimum=1e-300, help="floor on the mean sigmoid weight"),
    }
    requires = frozenset({"margins"})
    reference = Reference(
        "Tyurin, From logistic regression to the perceptron algorithm: exploring gradient "
        "descent with large step sizes (Normalized LR+GD, Section 6)",
        2024,
    )
    fidelity = "reconstructed"
    vectorised = True

    def step_size_cap(self):
        return self.hp.lr / self.hp.epsilon

    def build(self, params, info):
        return NormalizedLRGD(params, self.hp.lr, self.hp.epsilon, info["margins"],
                              seeds=info.get("seeds"))
