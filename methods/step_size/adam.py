"""Adam: per-coordinate steps from bias-corrected moment estimates.

    m_k = beta1 m_{k-1} + (1 - beta1) g_k,    v_k = beta2 v_{k-1} + (1 - beta2) g_k^2
    x_{k+1} = x_k - lr * (m_k / (1 - beta1^k)) / (sqrt(v_k / (1 - beta2^k)) + eps)
    (weight_decay > 0 adds weight_decay * x_k to g_k, as torch.optim.Adam does)

Reference: Kingma & Ba, "Adam: a method for stochastic optimization", ICLR 2015 (defaults
lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8). This wraps ``torch.optim.Adam``.

``last_step_size`` is the base lr; the step each coordinate actually takes is lr times its own
ratio above, which this scalar does not show.

Fidelity: reference-checked: tests/test_step_size_baselines.py compares the trajectory with a
separately built ``torch.optim.Adam`` number for number over 40 steps, and the first steps
with the formula above computed by hand.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register


class _Adam(torch.optim.Adam):
    """``torch.optim.Adam`` that reports its base lr as its step size."""

    @property
    def last_step_size(self) -> float:
        return float(self.param_groups[0]["lr"])


@register
class Adam(StepSizeMethod):
    name = "adam"
    hyperparameters = {
        "lr": Float(1e-3, low=1e-4, high=1.0, log=True, minimum=0.0, help="base step size"),
        "beta1": Float(0.9, minimum=0.0, maximum=0.999999, help="first-moment decay"),
        "beta2": Float(0.999, minimum=0.0, maximum=0.999999, help="second-moment decay"),
        "eps": Float(1e-8, minimum=0.0, help="added to the root of the second moment"),
        "weight_decay": Float(0.0, minimum=0.0, help="L2 penalty added to the gradient"),
    }
    reference = Reference(
        "Kingma & Ba, Adam: a method for stochastic optimization", 2015, "torch.optim.Adam"
    )
    fidelity = "reference-checked"
    vectorised = True  # element-wise: exact on a seed axis as it is

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        return _Adam(params, lr=self.hp.lr, betas=(self.hp.beta1, self.hp.beta2), eps=self.hp.eps,
                     weight_decay=self.hp.weight_decay)
