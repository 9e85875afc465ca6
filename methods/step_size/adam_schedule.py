"""Adam (or AdamW) whose learning rate follows a schedule over the horizon: the policy-gradient
and language-model default.

Step k applies lr_k = lr * m(k) with m(k) the multiplier of ``schedule`` (warm-up, then
constant / step_decay / cosine / wsd; see ``methods/step_size/schedule.py``) plus ``linear``:
after the warm-up, m = f + (1 - f) * (1 - t / D) with t the steps since warm-up and D the
steps after it, f = final_fraction — CleanRL's ``anneal_lr`` (which sets
lr * (1 - (update - 1) / updates) once per rollout; here the decay is per optimizer step).
The update is ``torch.optim.Adam``'s, or ``torch.optim.AdamW``'s with ``decoupled=True``
(Loshchilov & Hutter 2019: weight decay applied to the weights, not added to the gradient).

Defaults: Adam's (Kingma & Ba 2015) with eps = 1e-5 as CleanRL's PPO uses, lr = 3e-4, shape
``linear`` (the schedule CleanRL's PPO anneals with).

``last_step_size`` is the lr applied at that step.

Fidelity: reference-checked: tests/test_control_loop.py compares the trajectory with
``torch.optim.Adam`` / ``AdamW`` driven by ``torch.optim.lr_scheduler.LambdaLR`` with the same
multiplier, number for number.
"""

from __future__ import annotations

import torch

from methods.step_size.schedule import Schedule, Scheduled
from workbench.hyperparams import Bool, Choice, Float
from workbench.registry import Reference, register


class ScheduledAdam(Scheduled, torch.optim.Adam):
    """``torch.optim.Adam`` on a schedule."""


class ScheduledAdamW(Scheduled, torch.optim.AdamW):
    """``torch.optim.AdamW`` on a schedule."""


@register
class AdamSchedule(Schedule):
    name = "adam_schedule"
    hyperparameters = {
        "lr": Float(3e-4, low=1e-5, high=1e-1, log=True, minimum=0.0, help="peak step size"),
        "beta1": Float(0.9, minimum=0.0, maximum=0.999999, help="first-moment decay"),
        "beta2": Float(0.999, minimum=0.0, maximum=0.999999, help="second-moment decay"),
        "eps": Float(1e-5, minimum=0.0, help="added to the root of the second moment"),
        "weight_decay": Float(0.0, minimum=0.0, help="L2 (Adam) or decoupled (AdamW) decay"),
        "decoupled": Bool(False, help="AdamW: decay the weights, not the gradient"),
        "shape": Choice("linear", ("constant", "linear", "step_decay", "cosine", "wsd"),
                        help="schedule after the warm-up"),
        **{k: v for k, v in Schedule.hyperparameters.items()
           if k not in ("lr", "momentum", "shape")},
    }
    reference = Reference(
        "Kingma & Ba, Adam (2015); Loshchilov & Hutter, Decoupled weight decay regularization "
        "(AdamW, 2019); Huang et al., The 37 implementation details of PPO (lr annealing)",
        2015, "torch.optim.Adam / torch.optim.AdamW with torch.optim.lr_scheduler.LambdaLR")
    fidelity = "reference-checked"
    vectorised = True  # element-wise: exact on a seed axis as it is

    def multiplier(self, step: int, total_steps: int) -> float:
        if self.hp.shape != "linear":
            return super().multiplier(step, total_steps)
        warmup = min(round(self.hp.warmup_fraction * total_steps), total_steps)
        if step < warmup:
            return (step + 1) / warmup
        span = max(total_steps - warmup, 1)
        return self.hp.final_fraction + (1 - self.hp.final_fraction) * (
            1 - min(step - warmup, span) / span)

    def build(self, params, info):
        total = int(info["total_steps"])
        optimizer = ScheduledAdamW if self.hp.decoupled else ScheduledAdam
        return optimizer(params, lr=self.hp.lr, betas=(self.hp.beta1, self.hp.beta2),
                         eps=self.hp.eps, weight_decay=self.hp.weight_decay,
                         multiplier=lambda step: self.multiplier(step, total))
