"""Schedule-Free SGD: no learning-rate schedule; the iterate x is an online average of SGD steps.

Three sequences share one gradient per step, taken at y:

    y_k     = (1 - beta) * z_k + beta * x_k
    z_{k+1} = z_k - lr_k * grad f_i(y_k)
    c_{k+1} = w_k / sum_{j<=k} w_j,   w_k = (k+1)**r * lr_max_k**weight_lr_power
    x_{k+1} = (1 - c_{k+1}) * x_k + c_{k+1} * z_{k+1}

with z_0 = x_0 = y_0 the starting point, lr_k = lr * min(1, (k+1)/warmup_steps) (linear warmup)
and lr_max_k the largest lr_j so far. ``last_step_size`` is lr_k, the step of the SGD sequence z.

Evaluation point (``eval_at``). The reference computes gradients at y and expects the model to be
switched to x (``optimizer.eval()``) before it is evaluated; the task measures its full-data
metrics at the parameters as ``step()`` leaves them. ``eval_at="x"`` (default, the reference's
train/eval protocol) leaves the parameters at x after every step and moves them to y before the
next gradient, as the reference's ``SGDScheduleFreeClosure`` does; ``eval_at="y"`` leaves them at
y, the reference's train mode. Both give the same x, y, z sequences (they are computed from the
stored x and z, not by moving the parameters back and forth); only where metrics are read
differs.

Defaults follow the reference: lr = 1, momentum (beta) = 0.9, warmup_steps = 0, r = 0,
weight_lr_power = 2. Its weight decay (default 0) is left out: the tasks carry their own
regularisation.

Reference: Defazio, Yang, Mehta, Mishchenko, Khaled & Cutkosky, "The Road Less Scheduled",
NeurIPS 2024; implementation github.com/facebookresearch/schedule_free (``SGDScheduleFree``,
schedulefree/sgd_schedulefree.py). Reference-checked:
tests/test_step_size_momentum_adaptive.py compares 40-step trajectories (parameters and step
sizes, float64, a quadratic and a logistic regression) with a re-derivation of that update.
"""

from __future__ import annotations

import torch

from workbench.families import StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float, Int
from workbench.registry import Reference, register


class ScheduleFreeSGDOptimizer(FlatOptimizer):
    def __init__(self, params, *, lr, momentum, warmup_steps, r, weight_lr_power, eval_at):
        defaults = {
            "lr": lr, "momentum": momentum, "warmup_steps": warmup_steps, "r": r,
            "weight_lr_power": weight_lr_power, "eval_at": eval_at,
            "k": 0, "weight_sum": 0.0, "lr_max": -1.0,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def _move_to_y(self) -> None:
        beta = self.param_groups[0]["momentum"]
        for p in self._params():
            state = self.state[p]
            if "z" in state:
                torch.add(state["z"] * (1.0 - beta), state["x"], alpha=beta, out=p)

    def step(self, closure):
        group = self.param_groups[0]
        if group["eval_at"] == "x":
            self._move_to_y()
        loss = closure()
        with torch.no_grad():
            self._update(group)
        return loss

    def _update(self, group) -> None:
        k, beta = group["k"], group["momentum"]
        warmup = group["warmup_steps"]
        lr = group["lr"] * ((k + 1) / warmup if k < warmup else 1.0)
        group["lr_max"] = max(lr, group["lr_max"])
        weight = (k + 1) ** group["r"] * group["lr_max"] ** group["weight_lr_power"]
        group["weight_sum"] += weight
        average = weight / group["weight_sum"] if group["weight_sum"] > 0 else 0.0
        for p in self._params():
            state = self.state[p]
            if "z" not in state:
                state["z"] = p.detach().clone()
                state["x"] = p.detach().clone()
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            z, x = state["z"], state["x"]
            z.add_(grad, alpha=-lr)
            x.mul_(1.0 - average).add_(z, alpha=average)
            if group["eval_at"] == "x":
                p.copy_(x)
            else:
                torch.add(z * (1.0 - beta), x, alpha=beta, out=p)
        group["k"] = k + 1
        self.last_step_size = lr


@register
class ScheduleFreeSGD(StepSizeMethod):
    name = "schedule_free_sgd"
    hyperparameters = {
        "lr": Float(1.0, low=1e-2, high=10.0, log=True, minimum=0.0,
                    help="step size of the SGD sequence z"),
        "momentum": Float(0.9, minimum=1e-6, maximum=0.999999,
                          help="beta: y interpolates between z (weight 1-beta) and x"),
        "warmup_steps": Int(0, minimum=0, help="linear warmup of lr over this many steps"),
        "r": Float(0.0, minimum=0.0, help="polynomial weighting (k+1)**r of the average"),
        "weight_lr_power": Float(2.0, minimum=0.0,
                                 help="average weights grow with lr_max**weight_lr_power"),
        "eval_at": Choice("x", ("x", "y"),
                          help="where the parameters sit after step(): x (reference eval "
                               "point) or y (reference train mode)"),
    }
    reference = Reference(
        "Defazio et al., The Road Less Scheduled", 2024,
        "github.com/facebookresearch/schedule_free",
    )
    fidelity = "reference-checked"
    vectorised = True  # element-wise, its scalars follow the step count: exact on a seed axis

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        return ScheduleFreeSGDOptimizer(
            params, lr=self.hp.lr, momentum=self.hp.momentum, warmup_steps=self.hp.warmup_steps,
            r=self.hp.r, weight_lr_power=self.hp.weight_lr_power, eval_at=self.hp.eval_at,
        )
