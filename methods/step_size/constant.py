"""Constant step size: x_{k+1} = x_k - lr * g_k (heavy-ball momentum optional).

Reference: Robbins & Monro (1951); implementation: ``torch.optim.SGD``, which this wraps, so the
trajectory matches it number for number (tests/test_step_size_methods.py).
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register


class _SGD(torch.optim.SGD):
    """``torch.optim.SGD`` that reports its step size."""

    @property
    def last_step_size(self) -> float:
        return float(self.param_groups[0]["lr"])


@register
class Constant(StepSizeMethod):
    name = "constant"
    hyperparameters = {
        "lr": Float(0.1, low=1e-3, high=10.0, log=True, minimum=0.0, help="step size"),
        "momentum": Float(0.0, minimum=0.0, maximum=0.999, help="heavy-ball momentum"),
    }
    reference = Reference(
        "Robbins & Monro, A stochastic approximation method", 1951, "torch.optim.SGD"
    )
    fidelity = "reference-checked"
    vectorised = True  # element-wise: exact on a seed axis as it is

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        return _SGD(params, lr=self.hp.lr, momentum=self.hp.momentum)
