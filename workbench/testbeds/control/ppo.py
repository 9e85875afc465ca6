"""Proximal Policy Optimization (Schulman et al. 2017, "Proximal policy optimization
algorithms"), following the layout of CleanRL's ``ppo.py`` (Huang et al. 2022, "The 37
implementation details of PPO"), with the four family slots plugged in.

Per update u:

1. rollout: T steps of N environments with the current policy (``rollout``), or with
   ``policy_lag`` = k the policy of k updates before (an asynchronous actor's stale data);
   pi_old below is then that behaviour policy, whose log-probabilities the rollout stores,
   so the ratio is taken against the policy that sampled the actions;
2. advantages: ``A, R = advantage.compute(rewards, values, dones, terminated, next_values)``;
   optionally standardised over the batch (``advantage_norm="batch"``) or per minibatch;
3. entropy coefficient: ``c = entropy.coefficient(u, mean entropy of the rollout)``;
4. ``epochs`` passes over the batch in ``minibatches`` shuffled minibatches; each minibatch
   minimises, with ratio rho = exp(log pi(a|s) - log pi_old(a|s)),

       L = mean(max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high)))
           + value_coef * L_V - c * mean(H) (+ the entropy method's extra loss)

   The first term is ``shared.losses.ppo_clip_loss`` (the RLVR loop's loss, on rows
   of one token, ``token-mean``), which also gives ``approx_kl`` and the clip fractions;
   L_V = 0.5 mean(max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)) with
   ``clip_value`` (else 0.5 mean((V - R)^2)); eps_low = eps_high = ``clip`` unless the entropy
   method's ``policy_loss_hook`` sets them; each minibatch is one ``families.policy_step``:
   gradients clipped to ``max_grad_norm`` in its closure, ``optimizer.step(closure)`` (the
   step-size slot) and ``observe_rl_stats``.

``precision="bf16"`` runs the update's forward passes under ``torch.autocast`` to bfloat16
(matrix products in bf16; softmax, losses and reductions in fp32 as autocast chooses) while the
weights, gradients and optimizer state stay fp32, the master copy (Micikevicius et al. 2018,
"Mixed precision training"); bf16 needs no loss scaling. The rollout acts in fp32.

Metrics per update: their definitions are in ``workbench.common.metrics``.
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch
from pydantic import Field

from workbench.families import (
    EntropySlot,
    LossAdjustment,
    mean_over_steps,
    minibatch_epochs,
    policy_step,
)
from workbench.testbeds.control.policy import ActorCritic
from workbench.testbeds.control.rollout import Rollout
from workbench.testbeds.settings import Settings
from workbench.testbeds.shared.losses import ppo_clip_loss


class PPOSettings(Settings):
    """The update's knobs (CleanRL's defaults for CartPole)."""

    epochs: int = Field(4, ge=1, le=1000)
    minibatches: int = Field(4, ge=1, le=100_000)
    clip: float = Field(0.2, gt=0.0, le=10.0)
    clip_value: bool = True
    value_coef: float = Field(0.5, ge=0.0)
    max_grad_norm: float | None = Field(0.5, gt=0.0)
    advantage_norm: Literal["batch", "minibatch", "none"] = "minibatch"
    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="the update's forward passes: fp32, or bf16 autocast with fp32 "
        "weights and optimizer (float32 runs only)")


def autocast(precision: str, device: torch.device):
    """The context of an update's forward pass: bf16 autocast on ``device``'s type, or none."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def standardise(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + 1e-8)


def ppo_update(agent: ActorCritic, optimizer: torch.optim.Optimizer, rollout: Rollout,
               advantages: torch.Tensor, returns: torch.Tensor, entropy_coef: float,
               entropy_slot: EntropySlot, settings: PPOSettings, update: int,
               episodic_return: float, generator: torch.Generator) -> dict[str, float]:
    """Several epochs of clipped policy-gradient steps on one rollout; the update's metrics.

    ``advantages`` and ``returns`` are in the rollout's (T, N) layout.
    """
    obs = rollout.obs.flatten(0, 1)
    actions = rollout.actions.flatten(0, 1)
    old_log_probs = rollout.log_probs.flatten()
    old_values = rollout.values.flatten()
    adv = advantages.flatten()
    ret = returns.flatten()
    if settings.advantage_norm == "batch":
        adv = standardise(adv)
    per_step: list[dict[str, float]] = []
    params = list(agent.parameters())
    for idx in minibatch_epochs(adv.numel(), epochs=settings.epochs,
                                minibatches=settings.minibatches, generator=generator,
                                device=adv.device):
        mb_adv = adv[idx]
        if settings.advantage_norm == "minibatch" and idx.numel() > 1:
            mb_adv = standardise(mb_adv)

        def loss(idx=idx, mb_adv=mb_adv):
            with autocast(settings.precision, obs.device):
                return _minibatch_loss(
                    agent, obs[idx], actions[idx], old_log_probs[idx], old_values[idx],
                    mb_adv, ret[idx], entropy_coef, entropy_slot, settings)

        stats = policy_step(optimizer, loss, params=params,
                            max_grad_norm=settings.max_grad_norm, update=update,
                            episodic_return=episodic_return)
        per_step.append(stats)
    return mean_over_steps(per_step)


def _minibatch_loss(agent, obs, actions, old_log_probs, old_values, adv, ret, entropy_coef,
                    entropy_slot: EntropySlot, settings: PPOSettings):
    log_probs, entropy = agent.evaluate(obs, actions)
    row = (-1, 1)  # the loss and the hook see (B, T) tensors: one row per sample, T = 1
    adjusted = entropy_slot.adjust_policy_loss(
        log_probs=log_probs.view(row), old_log_probs=old_log_probs.view(row),
        advantages=adv.view(row), mask=torch.ones_like(adv).view(row),
        entropy=entropy.view(row), clip=settings.clip)
    loss, parts = minibatch_loss(log_probs, entropy, agent.value(obs), old_log_probs,
                                 old_values, adv, ret, entropy_coef, adjusted, settings)
    return loss, {**parts, **adjusted.metrics}


def minibatch_loss(log_probs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor,
                   old_log_probs: torch.Tensor, old_values: torch.Tensor, adv: torch.Tensor,
                   ret: torch.Tensor, entropy_coef, adjusted: LossAdjustment,
                   settings: PPOSettings) -> tuple[torch.Tensor, dict]:
    """L of one minibatch (the module docstring) from the current policy's outputs on its M
    samples, (M,) tensors, with the entropy method's ``adjusted`` answer on (M, 1) views;
    and its metrics (the hook's left to the caller). On a seed axis every tensor has a
    leading axis of S seeds (the answer stacked, ``entropy_coef`` (S,)): the S losses and
    each metric's S values."""
    row = (*log_probs.shape, 1)  # the loss sees (B, T) tensors: one row per sample, T = 1
    pg_loss, pg_stats = ppo_clip_loss(
        log_probs.view(row), old_log_probs.view(row), adv.view(row), adjusted.mask,
        clip_low=adjusted.clip_low, clip_high=adjusted.clip_high, agg="token-mean",
        weight=adjusted.weight)
    if settings.clip_value:
        clipped = old_values + (values - old_values).clamp(-settings.clip, settings.clip)
        value_loss = 0.5 * torch.max((values - ret) ** 2, (clipped - ret) ** 2).mean(-1)
    else:
        value_loss = 0.5 * ((values - ret) ** 2).mean(-1)
    loss, parts = combined_loss(pg_loss, value_loss, entropy, entropy_coef, adjusted, settings)
    return loss, {**parts, **{f"train/{k}": pg_stats[k] for k in (
        "approx_kl", "clip_frac_low", "clip_frac_high", "clip_frac")}}


def combined_loss(pg_loss: torch.Tensor, value_loss: torch.Tensor, entropy: torch.Tensor,
                  entropy_coef, adjusted: LossAdjustment,
                  settings: PPOSettings) -> tuple[torch.Tensor, dict]:
    """L = pg_loss + value_coef * L_V - c * mean(H) + extra_loss, and its three terms'
    metrics (floats, or S values each on a seed axis)."""
    entropy_mean = entropy.mean(-1)
    loss = (pg_loss + settings.value_coef * value_loss - entropy_coef * entropy_mean
            + adjusted.extra_loss)
    with torch.no_grad():
        own = torch.stack([pg_loss, value_loss, entropy_mean]).tolist()
    return loss, {"train/policy_loss": own[0], "train/value_loss": own[1],
                  "train/entropy": own[2]}

