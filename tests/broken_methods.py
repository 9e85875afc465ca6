"""Methods for tests/test_contracts.py: deliberately broken ones, one or two per family, and a
correct minimal entropy and advantage method. Not registered at import; the tests register them
for a while and remove them from the registry afterwards."""

from __future__ import annotations

import random

import torch

from workbench.families import AdvantageMethod, BatchSizeMethod, EntropyMethod, StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Float
from workbench.registry import Reference

_NOWHERE = Reference("test fixture", 2026)


class _ShrinkingSGD(FlatOptimizer):
    """Gradient steps of size lr - 0.25 k at step k: negative from step 5 on (lr = 1)."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr, "k": 0})

    def _update(self):
        group = self.param_groups[0]
        self.last_step_size = group["lr"] - 0.25 * group["k"]
        group["k"] += 1
        self._descend(self._grads(), self.last_step_size)


class NegativeStepSize(StepSizeMethod):
    name = "broken_negative_step"
    hyperparameters = {"lr": Float(1.0, minimum=0.0)}
    reference = _NOWHERE
    fidelity = "reconstructed"

    def step_size_cap(self):
        return self.hp.lr

    def build(self, params, info):
        return _ShrinkingSGD(params, self.hp.lr)


class _ForgetfulSGD(FlatOptimizer):
    """Step size lr / (k + 1) with the counter k kept outside ``state_dict()``."""

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})
        self.k = 0

    def _update(self):
        self.last_step_size = self.param_groups[0]["lr"] / (self.k + 1)
        self.k += 1
        self._descend(self._grads(), self.last_step_size)


class ForgetfulStepSize(StepSizeMethod):
    name = "broken_forgetful_step"
    hyperparameters = {"lr": Float(0.5, minimum=0.0)}
    reference = _NOWHERE
    fidelity = "reconstructed"

    def build(self, params, info):
        return _ForgetfulSGD(params, self.hp.lr)


class ZeroBatch(BatchSizeMethod):
    """Answers 0 from step 2 on."""

    name = "broken_zero_batch"
    reference = _NOWHERE
    fidelity = "reconstructed"

    def start(self, info):
        return info["batch_size"]

    def next_batch_size(self, step, stats):
        return 0 if step >= 2 else stats["batch_size"]


class RandomBatch(BatchSizeMethod):
    """A random size in [1, n_samples] from an unseeded generator."""

    name = "broken_random_batch"
    reference = _NOWHERE
    fidelity = "reconstructed"

    def start(self, info):
        self.rng = random.Random()
        self.n_samples = info["n_samples"]
        return self.rng.randint(1, self.n_samples)

    def next_batch_size(self, step, stats):
        return self.rng.randint(1, self.n_samples)


class GrowingEntropyCoefficient(EntropyMethod):
    """Declares coefficients in [0, 0.1] but returns 0.01 * step, past 0.1 from step 11."""

    name = "broken_growing_coef"
    reference = _NOWHERE
    fidelity = "reconstructed"

    def coefficient(self, step, entropy):
        return 0.01 * step

    def coefficient_bounds(self):
        return (0.0, 0.1)


class NaNLossHook(EntropyMethod):
    """A fine constant coefficient, but its policy-loss term divides 0 by 0."""

    name = "broken_nan_hook"
    reference = _NOWHERE
    fidelity = "reconstructed"

    def coefficient(self, step, entropy):
        return 0.01

    def policy_loss_hook(self, **inputs):
        ratio = torch.exp(inputs["log_probs"] - inputs["old_log_probs"])
        return {"entropy_bonus": (ratio * 0.0) / (inputs["mask"] * 0.0)}


class InPlaceAdvantage(AdvantageMethod):
    """Declares zero mean per group, but centres rewards on the batch mean (not per group) and
    does it in place on its input."""

    name = "broken_inplace_advantage"
    requires = frozenset({"rewards", "mask", "group_ids"})
    invariants = frozenset({"zero_mean_per_group"})
    reference = _NOWHERE
    fidelity = "reconstructed"

    def compute(self, rewards, mask, group_ids):
        valid = mask.bool()
        rewards.sub_(rewards[valid].mean()).mul_(mask)
        return rewards, rewards.clone()


class LeakyReturns(AdvantageMethod):
    """Reward-to-go summed over the whole row, padding included, then masked."""

    name = "broken_leaky_returns"
    requires = frozenset({"rewards", "mask"})
    reference = _NOWHERE
    fidelity = "reconstructed"

    def compute(self, rewards, mask):
        returns = rewards.flip(-1).cumsum(-1).flip(-1) * mask
        return returns, returns


class ConstantEntropy(EntropyMethod):
    """A correct minimal entropy method: the coefficient is ``coef`` at every step."""

    name = "fixture_constant_coef"
    hyperparameters = {"coef": Float(0.01, low=1e-4, high=0.1, log=True, minimum=0.0)}
    reference = _NOWHERE
    fidelity = "reconstructed"

    def coefficient(self, step, entropy):
        return self.hp.coef

    def coefficient_bounds(self):
        return (self.hp.coef, self.hp.coef)


class GroupNormalizedReward(AdvantageMethod):
    """A correct advantage method, GRPO-style at the token level: each valid reward minus the
    mean over its group's valid positions, divided by their standard deviation + eps; padding
    gets 0. Returns are the advantages."""

    name = "fixture_group_normalized"
    hyperparameters = {"eps": Float(1e-6, minimum=0.0)}
    requires = frozenset({"rewards", "mask", "group_ids"})
    invariants = frozenset({"zero_mean_per_group"})
    reference = _NOWHERE
    fidelity = "reconstructed"

    def compute(self, rewards, mask, group_ids):
        valid = mask.bool()
        advantages = torch.zeros_like(rewards)
        for group in group_ids.unique():
            rows = group_ids == group
            in_group = valid & rows[:, None]
            picked = rewards[in_group]
            std = picked.std() if picked.numel() > 1 else picked.new_zeros(())
            advantages[in_group] = (picked - picked.mean()) / (std + self.hp.eps)
        return advantages, advantages.clone()


BROKEN = (NegativeStepSize, ForgetfulStepSize, ZeroBatch, RandomBatch,
          GrowingEntropyCoefficient, NaNLossHook, InPlaceAdvantage, LeakyReturns)
CORRECT = (ConstantEntropy, GroupNormalizedReward)
