"""SGD (optional heavy-ball momentum) whose learning rate follows a schedule over the horizon.

With T = ``info["total_steps"]``, W = round(warmup_fraction * T) warm-up steps and k = 0, 1, ...
the step index, step k applies lr_k = lr * m(k):

- warm-up (k < W): m = (k + 1) / W, linear, reaching lr at the last warm-up step;
- then, with t = k - W the steps since warm-up and D = T - W:
  - ``constant``:   m = 1;
  - ``step_decay``: m = decay_factor ** floor(t / S), S = round(decay_every_fraction * T)
    (``torch.optim.lr_scheduler.StepLR``; defaults 0.1 every 30% of the horizon);
  - ``cosine``:     m = f + (1 - f) * (1 + cos(pi * min(t, D) / D)) / 2, f = final_fraction
    (SGDR without restarts, Loshchilov & Hutter 2017; ``CosineAnnealingLR`` with T_max = D,
    so the last step's lr is still slightly above f * lr);
  - ``wsd``:        warm-up, stable (m = 1), then over the last Dd = round(decay_fraction * T)
    steps, with p = (k - (T - Dd)) / Dd in [0, 1): m = f + (1 - f) * (1 - p) (``linear``),
    f + (1 - f) * (1 - sqrt(p)) (``sqrt``) or f + (1 - f) * (1 + cos(pi p)) / 2 (``cosine``).

Warm-up-stable-decay: Hu et al. 2024 (MiniCPM) decay exponentially in the last stage (not
offered here); Hägele et al. 2024 ("Scaling laws and compute-optimal training beyond fixed
training durations") use a linear cool-down as their default, find the (1 - sqrt) cool-down
better, and cool down over about 20% of the steps. Both warm up first; this method's
``warmup_fraction`` defaults to 0 for every shape, so set it for a faithful WSD.

``last_step_size`` is the lr applied at that step; it never exceeds ``lr``. Steps past the
horizon keep the final multiplier (step_decay keeps decaying).

Fidelity: reference-checked. tests/test_step_size_baselines.py compares the trajectories of the
constant, step_decay, cosine and linear/cosine wsd shapes, with warm-up, number for number
against ``torch.optim.SGD`` driven by ``torch.optim.lr_scheduler`` (LinearLR, StepLR,
CosineAnnealingLR, ConstantLR composed with SequentialLR); ``sqrt`` has no torch counterpart
and is checked against its formula only.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


class Scheduled:
    """Mixin for a torch optimizer whose lr at step k is ``base_lr * multiplier(k)``.

    The step counter ``step_index`` lives in ``param_groups`` so it survives ``state_dict()``.
    """

    def __init__(self, params, *, multiplier, **kwargs):
        super().__init__(params, **kwargs)
        self._multiplier = multiplier
        for group in self.param_groups:
            group.setdefault("base_lr", kwargs["lr"])
            group.setdefault("step_index", 0)
        self.last_step_size = math.nan

    def step(self, closure):
        for group in self.param_groups:
            group["lr"] = group["base_lr"] * self._multiplier(group["step_index"])
            group["step_index"] += 1
        self.last_step_size = float(self.param_groups[0]["lr"])
        return super().step(closure)


class ScheduledSGD(Scheduled, torch.optim.SGD):
    """``torch.optim.SGD`` (heavy-ball ``momentum``) on a schedule."""


@register
class Schedule(StepSizeMethod):
    name = "schedule"
    hyperparameters = {
        "lr": Float(0.1, low=1e-3, high=10.0, log=True, minimum=0.0, help="peak step size"),
        "momentum": Float(0.0, minimum=0.0, maximum=0.999, help="heavy-ball momentum"),
        "shape": Choice("cosine", ("constant", "step_decay", "cosine", "wsd"),
                        help="schedule after the warm-up"),
        "warmup_fraction": Float(0.0, minimum=0.0, maximum=1.0,
                                 help="fraction of total_steps spent in linear warm-up"),
        "decay_factor": Float(0.1, minimum=0.0, maximum=1.0, help="step_decay: lr factor"),
        "decay_every_fraction": Float(0.3, minimum=1e-6, maximum=1.0,
                                      help="step_decay: period, as a fraction of total_steps"),
        "final_fraction": Float(0.0, minimum=0.0, maximum=1.0,
                                help="cosine/wsd: final lr as a fraction of lr"),
        "decay_fraction": Float(0.2, minimum=0.0, maximum=1.0,
                                help="wsd: fraction of total_steps spent decaying"),
        "wsd_decay": Choice("linear", ("linear", "sqrt", "cosine"), help="wsd: decay shape"),
    }
    reference = Reference(
        "Loshchilov & Hutter, SGDR: stochastic gradient descent with warm restarts (cosine); "
        "Hu et al., MiniCPM and Hägele et al., Scaling laws and compute-optimal training "
        "beyond fixed training durations (WSD, 2024)",
        2017,
        "torch.optim.lr_scheduler (LinearLR, StepLR, CosineAnnealingLR, SequentialLR)",
    )
    fidelity = "reference-checked"
    vectorised = True  # element-wise: exact on a seed axis as it is

    def step_size_cap(self):
        return self.hp.lr

    def multiplier(self, step: int, total_steps: int) -> float:
        """m(k): the factor on ``lr`` at step ``step`` (0-based) of a ``total_steps`` run."""
        warmup = min(round(self.hp.warmup_fraction * total_steps), total_steps)
        if step < warmup:
            return (step + 1) / warmup
        since, final = step - warmup, self.hp.final_fraction
        if self.hp.shape == "constant":
            return 1.0
        if self.hp.shape == "step_decay":
            period = max(1, round(self.hp.decay_every_fraction * total_steps))
            return self.hp.decay_factor ** (since // period)
        if self.hp.shape == "cosine":
            span = max(total_steps - warmup, 1)
            return final + (1 - final) * (1 + math.cos(math.pi * min(since, span) / span)) / 2
        decay_start = max(warmup, total_steps - round(self.hp.decay_fraction * total_steps))
        if step < decay_start:
            return 1.0
        progress = min((step - decay_start) / max(total_steps - decay_start, 1), 1.0)
        shrink = {
            "linear": 1 - progress,
            "sqrt": 1 - math.sqrt(progress),
            "cosine": (1 + math.cos(math.pi * progress)) / 2,
        }[self.hp.wsd_decay]
        return final + (1 - final) * shrink

    def build(self, params, info):
        total = int(info["total_steps"])
        return ScheduledSGD(params, lr=self.hp.lr, momentum=self.hp.momentum,
                            multiplier=lambda step: self.multiplier(step, total))
