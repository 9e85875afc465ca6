"""Step halving: SGD whose step size halves every ``every`` steps.

    eta_t   = lr / 2**floor(t / every)        (t = 0, 1, 2, ... counts the steps taken)
    x_{t+1} = x_t - eta_t * g_t

``last_step_size`` is eta_t; it never exceeds lr (``step_size_cap``).

Reference: none; a demo plugin for the workbench tests (a plain step-decay schedule). Defaults
lr = 0.1 (the workbench's constant step size) and every = 10. Fidelity: reconstructed (no
reference implementation to check against).
"""

from __future__ import annotations

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Float, Int
from workbench.registry import Reference, register


class HalvingOptimizer(FlatOptimizer):
    """Keeps the step count in ``param_groups[0]["t"]`` so it survives ``state_dict()``."""

    def __init__(self, params, lr: float, every: int):
        super().__init__(params, {"lr": lr, "every": every, "t": 0})

    def _update(self) -> None:
        group = self.param_groups[0]
        step_size = group["lr"] / 2 ** (group["t"] // group["every"])
        self._descend(self._live_grads(), step_size)
        group["t"] += 1
        self.last_step_size = step_size


@register
class HalvingStep(StepSizeMethod):
    name = "halving_step"
    hyperparameters = {
        "lr": Float(0.1, low=1e-3, high=10.0, log=True, minimum=0.0, help="initial step size"),
        "every": Int(10, minimum=1, help="steps between halvings"),
    }
    reference = Reference("demo plugin for the workbench tests", 2026)
    fidelity = "reconstructed"

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        return HalvingOptimizer(params, self.hp.lr, self.hp.every)
