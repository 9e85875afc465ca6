"""Subset-Norm: Adam/AdaGrad-style adaptive steps whose second moment is shared by each subset of
coordinates, so it takes one number per subset instead of one per coordinate.

The coordinates of every parameter tensor are split into subsets S. With g_t the gradient,
|S| the subset's size and r(S) = ||g_{t,S}||^2 (``reduce="sum"``) or ||g_{t,S}||^2 / |S|
(``reduce="mean"``):

    m_t   = beta1 m_{t-1} + (1 - beta1) g_t                 (m_t = g_t when beta1 = 0)
    v_t,S = beta2 v_{t-1,S} + (1 - beta2) r(S)              (beta2 < 1: an EMA, Adam form)
    v_t,S = v_{t-1,S} + r(S)                                (beta2 = 1: a sum, AdaGrad form)
    a_t   = lr * sqrt(1 - beta2^t) / (1 - beta1^t)          (correct_bias; else a_t = lr;
                                                             beta2 = 1 drops the sqrt factor)
    x_{t+1,S} = x_{t,S} - a_t * m_{t,S} / (sqrt(v_t,S) + eps)

with v_0 = 0. beta1 = 0, beta2 = 1, correct_bias off is the paper's AdaGrad-Subset-Norm, which
is AdaGrad-Norm per subset: one subset holding every coordinate is AdaGrad-Norm (with b_0 = 0 and
eps outside the root), subsets of one coordinate are coordinate-wise AdaGrad.

Subsets (``subsets``):
  - ``heuristics`` (the paper's): a 2-D tensor of shape (m, n) gets one subset per row when
    m >= n and one per column otherwise, i.e. subsets of min(m, n) coordinates and max(m, n)
    accumulators; a tensor of any other rank stays coordinate-wise (one subset per entry).
  - ``chunks``: every tensor is flattened and cut into consecutive subsets of k coordinates,
    k = ``subset_size`` (0: floor(sqrt(numel))) lowered to the closest divisor of numel.
On a seed axis the leading seed dimension is never split or reduced over: each seed's
subsets are those of its own tensor.

Reference: Nguyen & Nguyen, "Subset-Norm and Subspace-Momentum: Faster Memory-Efficient Adaptive
Optimization with Convergence Guarantees", ICML 2025 (arXiv 2411.07120); the authors' code
(github.com/timmytonga/sn-sm, ``subset_norm.py`` / ``GenericOptim``, and
github.com/timmytonga/adam-subset-norm) gives the facts taken here: the subset's squared norm
is summed (not averaged), the "heuristics" subsets above, the Adam form with momentum as used
in their experiments, beta2 = 1 for AdaGrad accumulation, eps added after the root, and the
defaults lr = 1e-3, betas = (0.9, 0.999), eps = 1e-6, correct_bias = True. ``reduce="mean"``
(the subset's mean square, so subsets of one size behave like Adam's per-coordinate scale) is
not the reference's and is offered as an option. Departures: with beta2 = 1 and correct_bias the
reference code's step factor sqrt(1 - 1^t) is 0; here the second-moment factor is dropped
instead. Their code applies Subset-Norm to the weight matrices of linear layers only and keeps
plain Adam for the rest; here every tensor uses the chosen subsets (under ``heuristics`` the
non-matrix tensors are coordinate-wise, which is the same thing). Subspace-Momentum, the paper's
second method, is not implemented.

``last_step_size`` is lr (as ``adam`` reports it); the step each subset takes is a_t over its
own root, which this scalar does not show.

Fidelity: reconstructed from the paper and its code's facts (checked against the formulas
above by hand in tests/test_subset_norm.py, not against the reference implementation).
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Bool, Choice, Float, Int
from workbench.registry import Reference, register


def chunk_size(numel: int, wanted: int) -> int:
    """The subset size of ``chunks``: ``wanted`` (0: floor(sqrt(numel))) clipped to [1, numel],
    lowered to the closest divisor of numel."""
    k = math.isqrt(numel) if wanted == 0 else wanted
    k = max(1, min(k, numel))
    while numel % k:
        k -= 1
    return k


class SubsetNormOptimizer(torch.optim.Optimizer):
    """Per parameter, ``exp_avg`` (shaped as it) and ``exp_avg_sq`` (one entry per subset) in
    ``state``; the step count t in ``param_groups[0]["t"]`` (the seeds of an axis step
    together)."""

    def __init__(self, params, *, lr, beta1, beta2, eps, subsets, subset_size, reduce,
                 correct_bias, seeds=None):
        super().__init__(params, {"lr": lr, "beta1": beta1, "beta2": beta2, "eps": eps,
                                  "t": 0})
        self.subsets, self.subset_size = subsets, subset_size
        self.reduce, self.correct_bias = reduce, correct_bias
        self.lead = 0 if seeds is None else 1  # leading dimensions never reduced (the seeds)

    @property
    def last_step_size(self) -> float:
        return float(self.param_groups[0]["lr"])

    def _grouped(self, t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
        """``t`` viewed so that each subset lies along the dimensions returned (reduce over
        them, keepdim, to get one entry per subset)."""
        shape = t.shape[self.lead:]
        if self.subsets == "heuristics":
            if len(shape) != 2:
                return t, ()
            return t, ((-1,) if shape[0] >= shape[1] else (-2,))
        numel = math.prod(shape)
        k = chunk_size(numel, self.subset_size)
        return t.reshape(*t.shape[:self.lead], numel // k, k), (-1,)

    def step(self, closure):
        loss = closure()
        group = self.param_groups[0]
        group["t"] += 1
        t, beta1, beta2 = group["t"], group["beta1"], group["beta2"]
        size = group["lr"]
        if self.correct_bias:
            size = size * (math.sqrt(1.0 - beta2**t) if beta2 < 1 else 1.0) / (1.0 - beta1**t)
        with torch.no_grad():
            for p in group["params"]:
                g = p.grad if p.grad is not None else torch.zeros_like(p)
                state = self.state[p]
                if beta1 > 0:
                    m = state.setdefault("exp_avg", torch.zeros_like(p))
                    m.mul_(beta1).add_(g, alpha=1.0 - beta1)
                else:
                    m = g
                grouped, dims = self._grouped(g)
                r = grouped * grouped
                if dims:
                    r = r.sum(dim=dims, keepdim=True)
                    if self.reduce == "mean":
                        r = r / math.prod(grouped.shape[d] for d in dims)
                if "exp_avg_sq" not in state:
                    state["exp_avg_sq"] = torch.zeros_like(r)
                v = state["exp_avg_sq"]
                if beta2 < 1:
                    v.mul_(beta2).add_(r, alpha=1.0 - beta2)
                else:
                    v.add_(r)
                direction, _ = self._grouped(m)
                p.sub_((direction / (v.sqrt() + group["eps"])).reshape(p.shape) * size)
        return loss


@register
class SubsetNorm(StepSizeMethod):
    name = "subset_norm"
    hyperparameters = {
        "lr": Float(1e-3, low=1e-4, high=1.0, log=True, minimum=0.0, help="base step size"),
        "beta1": Float(0.9, minimum=0.0, maximum=0.999999, help="momentum decay; 0: none"),
        "beta2": Float(0.999, minimum=0.0, maximum=1.0,
                       help="second-moment decay; 1: AdaGrad-style sum"),
        "eps": Float(1e-6, minimum=0.0, help="added to the root of the subset's second moment"),
        "subsets": Choice("heuristics", ("heuristics", "chunks"),
                          help="heuristics: rows or columns of matrices (the longer side's "
                               "count), others per coordinate; chunks: consecutive subsets"),
        "subset_size": Int(0, minimum=0, help="chunks: coordinates per subset; 0: sqrt(numel)"),
        "reduce": Choice("sum", ("sum", "mean"), help="subset's squared norm or mean square"),
        "correct_bias": Bool(True, help="Adam's bias correction of the step"),
    }
    reference = Reference(
        "Nguyen & Nguyen, Subset-Norm and Subspace-Momentum: faster memory-efficient adaptive "
        "optimization with convergence guarantees", 2025, "github.com/timmytonga/sn-sm",
    )
    fidelity = "reconstructed"
    vectorised = True  # each subset lies within one seed's slice

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        return SubsetNormOptimizer(
            params, lr=self.hp.lr, beta1=self.hp.beta1, beta2=self.hp.beta2, eps=self.hp.eps,
            subsets=self.hp.subsets, subset_size=self.hp.subset_size, reduce=self.hp.reduce,
            correct_bias=self.hp.correct_bias, seeds=info.get("seeds"))
