"""Adam whose learning rate adapts to the measured KL divergence of the policy update.

After every optimizer step the policy-gradient loop calls ``observe(stats)`` with
``approx_kl``, the KL(old || new) estimate on that minibatch (measured before the step). Then

    if approx_kl > 2 * kl_target:    lr <- max(lr / factor, lr_min)
    if approx_kl < kl_target / 2:    lr <- min(lr * factor, lr_max)

and the next step uses the new lr (a non-finite KL leaves it unchanged). The parameters move
by Adam (torch.optim.Adam, eps 1e-8 and betas (0.9, 0.999) as rl_games builds it).
``last_step_size`` is the current base lr; the lr lives in ``param_groups`` and survives
``state_dict()``. Without ``observe`` (a task that gives no KL) this is plain Adam at ``lr``.

Reference: rl_games ``AdaptiveScheduler`` (Makoviichuk & Makoviychuk 2021; the adaptive
learning rate of Isaac Gym's PPO, Rudin et al. 2022's legged_gym/rsl_rl): kl_threshold 0.008,
min_lr 1e-6, max_lr 1e-2, lr_multiplier 1.5, the defaults here, applied after every minibatch
on that minibatch's KL (its default ``schedule_type`` 'per_minibatch'). rl_games' per-epoch
variant ('standard', on the epoch's mean KL) is not offered: ``observe`` sees minibatches.

Fidelity: reference-checked. tests/test_control_methods.py re-derives the scheduler's rule and
drives a separately built torch.optim.Adam with it; over 30 steps with a KL sequence that
crosses both thresholds and hits both clamps, the learning rates and parameters match
number for number.
"""

from __future__ import annotations

import math

import torch

from workbench.families import StepSizeMethod
from workbench.hyperparams import Float, HyperparameterError
from workbench.registry import Reference, register


class KLAdaptiveAdam(torch.optim.Adam):
    """``torch.optim.Adam`` with ``observe(stats)`` adapting the lr of every group.

    On a seed axis each seed has its own lr (``seed_lr``, (S,)), adapted from its own KL.
    Adam's displacement is linear in lr (no weight decay), so the step is taken at lr 1 and
    each seed's displacement scaled by its own lr.
    """

    def __init__(self, params, *, lr, betas, eps, kl_target, factor, lr_min, lr_max,
                 seeds=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps)
        self.seeds = seeds
        for group in self.param_groups:
            group.update(kl_target=kl_target, factor=factor, lr_min=lr_min, lr_max=lr_max)
            if seeds is not None:
                group.update(lr=1.0, seed_lr=torch.full((seeds,), float(lr),
                                                        dtype=torch.float64))

    @property
    def last_step_size(self):
        if self.seeds is None:
            return float(self.param_groups[0]["lr"])
        return self.param_groups[0]["seed_lr"].clone()

    def observe(self, stats) -> None:
        if self.seeds is not None:
            self._observe_per_seed(torch.as_tensor(stats["approx_kl"], dtype=torch.float64))
            return
        kl = float(stats["approx_kl"])
        if not math.isfinite(kl):
            return
        for group in self.param_groups:
            if kl > 2.0 * group["kl_target"]:
                group["lr"] = max(group["lr"] / group["factor"], group["lr_min"])
            elif kl < 0.5 * group["kl_target"]:
                group["lr"] = min(group["lr"] * group["factor"], group["lr_max"])

    def _observe_per_seed(self, kl: torch.Tensor) -> None:
        """The rule above for each seed's lr (a NaN KL matches neither test)."""
        for group in self.param_groups:
            lr = group["seed_lr"]
            shrunk = torch.clamp(lr / group["factor"], min=group["lr_min"])
            grown = torch.clamp(lr * group["factor"], max=group["lr_max"])
            group["seed_lr"] = torch.where(kl > 2.0 * group["kl_target"], shrunk,
                                           torch.where(kl < 0.5 * group["kl_target"], grown,
                                                       lr))

    def step(self, closure=None):
        if self.seeds is None:
            return super().step(closure)
        before = [[p.detach().clone() for p in group["params"]] for group in self.param_groups]
        loss = super().step(closure)  # every group at lr 1
        with torch.no_grad():
            for group, origins in zip(self.param_groups, before, strict=True):
                for p, origin in zip(group["params"], origins, strict=True):
                    lr = group["seed_lr"].to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))
                    p.copy_(origin + (p - origin) * lr)
        return loss


@register
class KLAdaptive(StepSizeMethod):
    name = "kl_adaptive"
    hyperparameters = {
        "lr": Float(3e-4, low=1e-5, high=1e-2, log=True, minimum=0.0,
                    help="initial learning rate"),
        "kl_target": Float(0.008, low=0.002, high=0.05, log=True, minimum=1e-12,
                           help="KL threshold: lr shrinks above 2x, grows below 1/2x"),
        "factor": Float(1.5, minimum=1.0, help="lr multiplier per adjustment"),
        "lr_min": Float(1e-6, minimum=0.0, help="smallest learning rate"),
        "lr_max": Float(1e-2, minimum=0.0, help="largest learning rate"),
        "beta1": Float(0.9, minimum=0.0, maximum=0.999999, help="Adam first-moment decay"),
        "beta2": Float(0.999, minimum=0.0, maximum=0.999999, help="Adam second-moment decay"),
        "eps": Float(1e-8, minimum=0.0, help="Adam epsilon"),
    }
    requires = frozenset({"rl_stats"})
    reference = Reference(
        "Makoviichuk & Makoviychuk, rl-games: a high-performance framework for reinforcement "
        "learning (AdaptiveScheduler)", 2021,
        "Denys88/rl_games rl_games/common/schedulers.py AdaptiveScheduler",
    )
    fidelity = "reference-checked"
    vectorised = True

    @classmethod
    def resolve(cls, params):
        resolved = super().resolve(params)
        if resolved["lr_min"] > resolved["lr_max"]:
            raise HyperparameterError(
                f"{cls.key()}.lr_min: {resolved['lr_min']!r} is above lr_max "
                f"{resolved['lr_max']!r}; it must not be")
        return resolved

    def step_size_cap(self):
        return max(self.hp.lr, self.hp.lr_max)

    def build(self, params, info):
        return KLAdaptiveAdam(params, lr=self.hp.lr, betas=(self.hp.beta1, self.hp.beta2),
                              eps=self.hp.eps, kl_target=self.hp.kl_target,
                              factor=self.hp.factor, lr_min=self.hp.lr_min,
                              lr_max=self.hp.lr_max, seeds=info.get("seeds"))
