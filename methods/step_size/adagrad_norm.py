"""AdaGrad-Norm: one scalar AdaGrad step size from the running sum of squared gradient norms.

    b_{k+1}^2 = b_k^2 + ||g_k||^2
    x_{k+1}   = x_k - (eta / b_{k+1}) * g_k

``last_step_size`` is eta / b_{k+1}; it never exceeds eta / b_0 (``step_size_cap``).

Reference: Ward, Wu & Bottou, "AdaGrad stepsizes: sharp convergence over nonconvex landscapes",
ICML 2019 / JMLR 2020 (Algorithm "AdaGrad-Norm"). The paper's guarantees hold for any b_0 > 0
and eta > 0 and its experiments sweep b_0; the defaults eta = 1, b_0 = 0.01 are those of
the co-author X. Wu's PyTorch ``Adagradnorm`` optimizer (lr=1.0, initial_accumulator_value=1e-2,
which is b_0 there), whose sums run per output row rather than over the whole gradient as in the
paper and here. Fidelity: reconstructed from the paper's update (checked against that formula
in tests/test_step_size_baselines.py, not against a reference implementation).
"""

from __future__ import annotations

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Float
from workbench.registry import Reference, register


class AdaGradNormOptimizer(FlatOptimizer):
    """Keeps b_k^2 in ``param_groups[0]["b_sq"]`` so it survives ``state_dict()`` (per seed
    on a seed axis)."""

    def __init__(self, params, eta: float, b0: float, seeds=None):
        super().__init__(params, {"eta": eta, "b_sq": b0 * b0})
        self.seeds = seeds

    def step(self, closure):
        loss = closure()
        group = self.param_groups[0]
        grads = self._grads()
        b_sq = self._as_seed_scalar(group["b_sq"]) + self._sq_per_seed(grads)
        step_size = group["eta"] / b_sq.sqrt()
        self._descend_per_seed(grads, step_size)
        group["b_sq"] = self._kept(b_sq)
        self._report(step_size)
        return loss


@register
class AdaGradNorm(StepSizeMethod):
    name = "adagrad_norm"
    hyperparameters = {
        "eta": Float(1.0, low=1e-2, high=1e2, log=True, minimum=0.0, help="step scale eta"),
        "b0": Float(1e-2, minimum=1e-12, help="initial accumulator b_0 (> 0)"),
    }
    reference = Reference(
        "Ward, Wu & Bottou, AdaGrad stepsizes: sharp convergence over nonconvex landscapes",
        2019,
        "github.com/xwuShirley/pytorch (torch/optim/adagradnorm.py)",
    )
    fidelity = "reconstructed"
    vectorised = True

    def step_size_cap(self):
        return self.hp.eta / self.hp.b0

    def build(self, params, info):
        return AdaGradNormOptimizer(params, self.hp.eta, self.hp.b0, seeds=info.get("seeds"))
