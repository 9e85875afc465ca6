"""Armijo backtracking line search (stochastic line search, SLS).

At each step the trial step size starts at ``min(eta_prev * gamma**(1/b), eta_max)`` (``b``:
batches per epoch) and shrinks by ``beta`` until the Armijo condition holds on the same
minibatch:

    f_i(x_k - eta * g_k) <= f_i(x_k) - c * eta * ||g_k||^2

Each trial point costs one loss evaluation (counted by the task).

Reference: Vaswani, Mishkin, Laradji, Schmidt, Gidel & Lacoste-Julien, "Painless stochastic
gradient: interpolation, line-search, and convergence rates", NeurIPS 2019 (defaults c=0.1,
beta=0.9, gamma=2, eta_max=10). Reconstructed from the paper.
"""

from __future__ import annotations

from workbench.families import StepSizeMethod
from workbench.hyperparams import Float, Int
from workbench.optim import FlatOptimizer
from workbench.registry import Reference, register


class ArmijoSLS(FlatOptimizer):
    def __init__(self, params, *, eta0, c, beta, gamma, eta_max, max_backtracks, batches):
        defaults = {
            "eta": eta0, "c": c, "beta": beta, "gamma": gamma, "eta_max": eta_max,
            "max_backtracks": max_backtracks, "batches": batches,
        }
        super().__init__(params, defaults)

    def step(self, closure):
        group = self.param_groups[0]
        loss = closure()
        f0 = float(loss)
        origin, grads = self._snapshot(), self._grads()
        grad_sq = self._norm_sq(grads)
        eta = min(group["eta"] * group["gamma"] ** (1.0 / group["batches"]), group["eta_max"])
        for _ in range(group["max_backtracks"]):
            self._step_from(origin, grads, eta)
            if float(closure(backward=False)) <= f0 - group["c"] * eta * grad_sq:
                break
            eta *= group["beta"]
        else:
            self._step_from(origin, grads, eta)
        group["eta"] = eta
        self.last_step_size = eta
        return loss


@register
class Armijo(StepSizeMethod):
    name = "armijo"
    hyperparameters = {
        "c": Float(0.1, low=0.01, high=0.5, log=True, minimum=1e-12, maximum=1.0),
        "beta": Float(0.9, low=0.3, high=0.95, minimum=1e-3, maximum=0.999),
        "gamma": Float(2.0, minimum=1.0, help="growth of the initial trial step per epoch"),
        "eta0": Float(1.0, minimum=1e-12, help="first trial step size"),
        "eta_max": Float(10.0, minimum=1e-12),
        "max_backtracks": Int(100, minimum=1, maximum=10_000),
    }
    requires = frozenset({"closure"})
    reference = Reference(
        "Vaswani et al., Painless stochastic gradient: interpolation, line-search", 2019,
        "github.com/IssamLaradji/sls",
    )
    fidelity = "reconstructed"

    def step_size_cap(self):
        return self.eta_max

    def build(self, params, info):
        return ArmijoSLS(
            params, eta0=self.eta0, c=self.c, beta=self.beta, gamma=self.gamma,
            eta_max=self.eta_max, max_backtracks=self.max_backtracks,
            batches=info.get("batches_per_epoch", 1),
        )
