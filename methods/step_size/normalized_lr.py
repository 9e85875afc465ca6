"""Normalized LR+GD: gradient descent whose step is gamma divided by the current loss.

    gamma_k = gamma / max(f(x_k) - offset, epsilon)
    x_{k+1} = x_k - gamma_k * grad f(x_k)

Reference: Tyurin, "From logistic regression to the perceptron algorithm: exploring gradient
descent with large step sizes", 2024 (arXiv 2412.08424). The paper proposes it for logistic
regression on separable data, whose loss is positive and tends to 0, so gamma / f(x_k) grows
as the iterates approach a separating direction. Only the abstract could be read here, not the
algorithm's statement: the rule above is the one the workbench lead transcribed, not checked
against the paper's text. Fidelity: reconstructed.

Convention (``divisor``): the paper divides by f(x_k). ``gap`` (default) divides by
f(x_k) - loss_lower_bound, which is the same on the logistic loss (lower bound 0) and stays
positive on tasks whose loss may be negative (e.g. the quadratic); ``loss`` divides by f(x_k)
itself and refuses tasks whose lower bound is negative. ``epsilon`` keeps the divisor away from
0, so ``last_step_size`` = gamma_k never exceeds gamma / epsilon (``step_size_cap``).
"""

from __future__ import annotations

from workbench.families import StepSizeMethod
from workbench.hyperparams import Choice, Float
from workbench.optim import FlatOptimizer
from workbench.registry import Reference, register


class NormalizedLRGD(FlatOptimizer):
    def __init__(self, params, gamma: float, offset: float, epsilon: float):
        super().__init__(params, {"gamma": gamma, "offset": offset, "epsilon": epsilon})

    def step(self, closure):
        loss = closure()
        group = self.param_groups[0]
        divisor = max(float(loss) - group["offset"], group["epsilon"])
        step_size = group["gamma"] / divisor
        grads = self._grads()
        self._descend(grads, step_size)
        self.last_step_size = step_size
        return loss


@register
class NormalizedLR(StepSizeMethod):
    name = "normalized_lr"
    hyperparameters = {
        "gamma": Float(1.0, low=1e-2, high=1e3, log=True, minimum=0.0, help="step scale gamma"),
        "divisor": Choice("gap", ("gap", "loss"),
                          help="gap: f(x) - loss_lower_bound; loss: f(x) (the paper's, f > 0)"),
        "epsilon": Float(1e-12, minimum=1e-300, help="floor on the divisor"),
    }
    requires = frozenset({"loss_lower_bound"})
    reference = Reference(
        "Tyurin, From logistic regression to the perceptron algorithm: exploring gradient "
        "descent with large step sizes (Normalized LR+GD)",
        2024,
    )
    fidelity = "reconstructed"

    def step_size_cap(self):
        return self.hp.gamma / self.hp.epsilon

    def build(self, params, info):
        bound = float(info["loss_lower_bound"])
        if self.hp.divisor == "loss" and bound < 0:
            raise ValueError(
                f"step_size/normalized_lr with divisor='loss' needs a positive loss, but this "
                f"task's loss_lower_bound is {bound}; use divisor='gap'"
            )
        offset = bound if self.hp.divisor == "gap" else 0.0
        return NormalizedLRGD(params, self.hp.gamma, offset, self.hp.epsilon)
