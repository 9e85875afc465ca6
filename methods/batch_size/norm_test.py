"""Norm-test adaptive batch size (the batch side of AdAdaGrad / AdAdaGrad-Norm).

At a tested step with batch size b, batch gradient g = mean_i G_i and the unbiased sample
variance of the per-sample gradients V = sum_i |G_i - g|^2 / (b - 1) (the trace of their
covariance; the sum over coordinates of per-coordinate variances), the norm test holds when

    V / b <= eta^2 |g|^2.

When it fails the next batch size is the smallest that would pass,

    b' = ceil(V / (eta^2 |g|^2)),

and the batch size never decreases: b_next = max(b, b'), clipped to [min_size, max_size or
n_samples]. Steps 1, 1 + every, 1 + 2 every, ... are tested (``every`` = 1: every step); the
first batch is ``start_size`` (0: the task's batch size). The logged statistic
``batch/norm_test_stat`` is V / (b |g|^2), which the test compares with eta^2.

References: Byrd, Chin, Nocedal & Wu, "Sample size selection in optimization methods for
machine learning", Math. Programming 2012 (the norm test); Lau, Liu & Kolar, "AdAdaGrad:
Adaptive batch size schemes for adaptive gradient methods", 2024 (the test with AdaGrad /
AdaGrad-Norm steps; the step-size side is step_size/adagrad_norm). Followed: the authors' code,
github.com/timlautk/AdAdaGrad (tests.py ``norm_test``; main.py): V is the sum of the
per-coordinate unbiased (correction 1) variances, b' = ceil(max(b, V / (eta^2 |g|^2))), tested
at iterations 0, every, 2 every, ... (``--test_interval``, default 1), capped at the largest
batch size, default eta = 0.1 (their runs use 0.1 to 0.5). Where |g|^2 = 0 their code divides by
zero; here V > 0 then gives the largest batch and V <= 0 passes the test. ``min_size`` is at
least 2: a batch of one has no sample variance, so the test could never grow it.

Fidelity: reference-checked. ``test_norm_test_reproduces_adadagrad_reference`` in
tests/test_batch_size_methods.py reproduces the batch-size sequence of a re-derivation of the
authors' rule number for number on synthetic per-sample gradients.
"""

from __future__ import annotations

import math

from methods.batch_size._bounds import bounds, clip_size, size_range
from workbench.families import BatchSizeMethod
from workbench.hyperparams import Float, Int
from workbench.registry import Reference, register


@register
class NormTest(BatchSizeMethod):
    name = "norm_test"
    hyperparameters = {
        "eta": Float(0.1, low=0.02, high=1.0, log=True, minimum=1e-6,
                     help="tolerance of the norm test"),
        "every": Int(1, minimum=1, help="steps between tests"),
        "start_size": Int(0, minimum=0, help="first batch size; 0: the task's batch size"),
        **bounds(smallest=2),
    }
    requires = frozenset({"per_sample_grads"})
    reference = Reference(
        "Lau, Liu & Kolar, AdAdaGrad: Adaptive batch size schemes for adaptive gradient methods "
        "(norm test of Byrd, Chin, Nocedal & Wu 2012)",
        2024,
        "github.com/timlautk/AdAdaGrad tests.py (norm_test)",
    )
    fidelity = "reference-checked"

    def start(self, info):
        self.lowest, self.highest = size_range(self.hp.min_size, self.hp.max_size,
                                               info["n_samples"])
        first = self.hp.start_size or info.get("batch_size") or info["n_samples"]
        self.current = clip_size(first, self.lowest, self.highest)
        self.statistic = math.nan
        return self.current

    def next_batch_size(self, step, stats):
        if (step - 1) % self.hp.every == 0:
            self.test(stats["grad_var"], stats["grad_sq_big"], stats["big_batch_size"])
        return self.current

    def test(self, variance: float, grad_sq: float, batch: int) -> None:
        """Run the norm test on one batch and grow the batch size if it fails."""
        self.statistic = _ratio(variance, batch * grad_sq)
        needed = _ratio(variance, self.hp.eta**2 * grad_sq)
        if needed > batch:
            self.current = max(self.current, clip_size(needed, self.lowest, self.highest,
                                                       rounding=math.ceil))

    def diagnostics(self):
        return {"batch/norm_test_stat": self.statistic}


def _ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, read as +inf (numerator > 0) or 0 when denominator <= 0."""
    if denominator > 0:
        return numerator / denominator
    return math.inf if numerator > 0 else 0.0
