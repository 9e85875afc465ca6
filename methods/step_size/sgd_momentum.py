"""SGD with heavy-ball momentum (Polyak 1964), optionally Nesterov's variant.

torch.optim.SGD's convention (dampening 0; the buffer starts at the first gradient):

    buf_k   = momentum * buf_{k-1} + g_k
    x_{k+1} = x_k - lr * buf_k                         (heavy ball)
    x_{k+1} = x_k - lr * (g_k + momentum * buf_k)      (nesterov=True)

Reference: Polyak, "Some methods of speeding up the convergence of iteration methods", 1964;
Nesterov's form as in Sutskever, Martens, Dahl & Hinton, ICML 2013. This wraps
``torch.optim.SGD``. Defaults: momentum 0.9; lr 0.01, searched in [1e-4, 1], a decade below
``constant``'s range because momentum 0.9 multiplies the long-run step by 1 / (1 - 0.9) = 10.
``last_step_size`` is lr (the factor on the momentum buffer).

Fidelity: reference-checked: tests/test_step_size_baselines.py compares the trajectory with a
separately built ``torch.optim.SGD`` number for number, and the first steps with the formula.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Bool, Float
from workbench.registry import Reference, register


class _MomentumSGD(torch.optim.SGD):
    """``torch.optim.SGD`` that reports its lr as its step size."""

    @property
    def last_step_size(self) -> float:
        return float(self.param_groups[0]["lr"])


@register
class SGDMomentum(StepSizeMethod):
    name = "sgd_momentum"
    hyperparameters = {
        "lr": Float(0.01, low=1e-4, high=1.0, log=True, minimum=0.0, help="step size"),
        "momentum": Float(0.9, minimum=0.0, maximum=0.999, help="heavy-ball momentum"),
        "nesterov": Bool(False, help="Nesterov's variant"),
    }
    reference = Reference(
        "Polyak, Some methods of speeding up the convergence of iteration methods", 1964,
        "torch.optim.SGD",
    )
    fidelity = "reference-checked"
    vectorised = True  # element-wise: exact on a seed axis as it is

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        # With momentum 0 both forms are plain SGD; torch refuses nesterov=True there.
        nesterov = self.hp.nesterov and self.hp.momentum > 0
        return _MomentumSGD(params, lr=self.hp.lr, momentum=self.hp.momentum, nesterov=nesterov)
