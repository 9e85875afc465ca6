"""AEGD: adaptive gradient descent with energy.

With the energy g(x) = sqrt(f(x) + c) (c > 0 chosen so that f + c > 0) and an energy variable
r, one per parameter entry:

    r_0     = sqrt(f(x_0) + c)                    (every entry, at the first step)
    v_k     = grad f(x_k) / (2 sqrt(f(x_k) + c))  (= grad g(x_k))
    r_{k+1} = r_k / (1 + 2 lr v_k^2)               (element-wise)
    x_{k+1} = x_k - 2 lr r_{k+1} v_k

Here the energy is sqrt(f(x) - f_lb + c), f_lb the task's lower bound on the loss
(``loss_lower_bound``; ``shift: lower_bound``, the default): AEGD on f - f_lb, a constant shift.
On a loss bounded below by 0 (logistic regression, the networks) that is the reference
exactly; on a loss that goes negative (a quadratic with a linear term) a fixed c would have to
be guessed. ``shift: c`` takes f_lb = 0 whatever the task (the reference's rule, for tasks
that give no bound).

r never grows, so the scheme is unconditionally energy-stable: for any lr the iterates cannot
blow up the way gradient descent's do past 2/L. The effective step of an entry is
lr r_{k+1} / sqrt(f(x_k) + c); ``last_step_size`` is its mean over the parameters (per seed on
a seed axis). f is the step's (minibatch) loss, as in the reference. A loss with f + c <= 0
stops the run with a ValueError, as the reference does. The reference's weight decay (and its
AEGDW variant) is left out: weight decay is the task's to set here.

Reference: Liu & Tian, "AEGD: Adaptive gradient descent with energy" (2020, arXiv 2010.05109);
implementation github.com/txping/AEGD (``aegd.py``, defaults lr 0.1, c 1). Reference-checked:
tests/test_aegd.py compares six steps on a logistic regression and a quadratic (float64) with
the reference optimizer's iterates.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


class AEGDOptimizer(FlatOptimizer):
    def __init__(self, params, *, lr: float, c: float, lower_bound=0.0, seeds=None):
        super().__init__(params, {"lr": lr, "c": c})
        self.seeds = seeds
        self._lower_bound = lower_bound  # a float, or per seed on a seed axis

    def step(self, closure):
        loss = closure()
        group = self.param_groups[0]
        with torch.no_grad():
            shifted = loss.detach().double() - self._as_seed_scalar(self._lower_bound) + group[
                "c"]
            if bool((shifted <= 0).any()):
                raise ValueError(f"aegd: c={group['c']} does not make f(x) - f_lb + c > 0 "
                                 f"(f(x) = {loss.detach().tolist()}, f_lb = "
                                 f"{self._lower_bound}); choose a larger c or shift: "
                                 "lower_bound")
            energy = shifted.sqrt()
            entries, effective = 0, self._as_seed_scalar(0.0)
            for p, grad in zip(self._params(), self._live_grads(), strict=True):
                root = self._on_param(energy, p)
                v = grad / (2 * root)
                state = self.state[p]
                if "r" not in state:
                    state["r"] = root * torch.ones_like(p)
                r = state["r"]
                r.div_(1 + 2 * group["lr"] * v * v)
                p.addcmul_(r, v, value=-2 * group["lr"])
                effective = effective + self._sum_per_seed([r])
                entries += p[0].numel() if self.seeds is not None else p.numel()
        self._report(group["lr"] * effective / max(entries, 1) / energy)
        return loss


@register
class AEGD(StepSizeMethod):
    name = "aegd"
    hyperparameters = {
        "lr": Float(0.1, low=1e-3, high=10.0, log=True, minimum=1e-30,
                    help="step scale (the paper's eta)"),
        "c": Float(1.0, minimum=1e-12, help="energy shift: g = sqrt(f - f_lb + c) > 0"),
        "shift": Choice("lower_bound", ("lower_bound", "c"),
                        help="lower_bound: f_lb is the task's bound on the loss; c: f_lb = 0"),
    }
    reference = Reference(
        "Liu & Tian, AEGD: Adaptive gradient descent with energy", 2020,
        "github.com/txping/AEGD",
    )
    fidelity = "reference-checked"
    vectorised = True

    @classmethod
    def requirements(cls, params):
        return frozenset({"loss_lower_bound"} if params["shift"] == "lower_bound" else set())

    def build(self, params, info):
        lower = info["loss_lower_bound"] if self.hp.shift == "lower_bound" else 0.0
        return AEGDOptimizer(params, lr=self.hp.lr, c=self.hp.c, lower_bound=lower,
                             seeds=info.get("seeds"))
