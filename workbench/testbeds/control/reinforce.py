"""REINFORCE with a learned value baseline (Williams 1992; Sutton & Barto 2018, section 13.4):
one gradient step per rollout on

    L = - mean(A * log pi(a|s)) + value_coef * 0.5 mean((V(s) - R)^2) - c * mean(H)

where A and R come from the advantage slot (``reward_to_go`` with ``baseline="value"`` gives
A = G - V(s), R = G; with ``baseline="none"`` the value head is still fitted but unused), c from
the entropy slot, and the step from the step-size slot (gradients clipped to
``max_grad_norm`` in the closure). The entropy method's ``loss_mask``, ``loss_weight`` and
``extra_loss`` apply as in PPO; clip bounds have no meaning here and are ignored.
``train/approx_kl`` (``workbench.testbeds.shared.losses.approx_kl``) is measured after the step, so
``observe`` sees how far the step moved.
"""

from __future__ import annotations

import torch

from workbench.families import EntropySlot, LossAdjustment, policy_step
from workbench.testbeds.control.policy import ActorCritic
from workbench.testbeds.control.ppo import (
    PPOSettings,
    autocast,
    combined_loss,
    standardise,
)
from workbench.testbeds.control.rollout import Rollout
from workbench.testbeds.shared.losses import approx_kl


def reinforce_update(agent: ActorCritic, optimizer: torch.optim.Optimizer, rollout: Rollout,
                     advantages: torch.Tensor, returns: torch.Tensor, entropy_coef: float,
                     entropy_slot: EntropySlot, settings: PPOSettings, update: int,
                     episodic_return: float) -> dict[str, float]:
    """One policy-gradient step on the whole rollout; the update's metrics."""
    obs = rollout.obs.flatten(0, 1)
    actions = rollout.actions.flatten(0, 1)
    old_log_probs = rollout.log_probs.flatten()
    adv = advantages.flatten()
    if settings.advantage_norm != "none":  # one batch: per batch and per minibatch coincide
        adv = standardise(adv)
    ret = returns.flatten()

    def loss():
        with autocast(settings.precision, obs.device):
            log_probs, entropy = agent.evaluate(obs, actions)
            row = (-1, 1)
            adjusted = entropy_slot.adjust_policy_loss(
                log_probs=log_probs.view(row), old_log_probs=old_log_probs.view(row),
                advantages=adv.view(row), mask=torch.ones_like(adv).view(row),
                entropy=entropy.view(row), clip=settings.clip)
            value, parts = reinforce_loss(log_probs, entropy, agent.value(obs), adv, ret,
                                          entropy_coef, adjusted, settings)
        return value, {**parts, **adjusted.metrics}

    def kl_moved(stats: dict[str, float]) -> None:
        with torch.no_grad():  # one step from the sampling policy: measure the KL it moved
            log_probs = agent.evaluate(obs, actions)[0]
            stats["train/approx_kl"] = float(approx_kl(log_probs, old_log_probs,
                                                       torch.ones_like(log_probs)))

    return policy_step(optimizer, loss, params=list(agent.parameters()),
                       max_grad_norm=settings.max_grad_norm, update=update,
                       episodic_return=episodic_return, after_step=kl_moved)


def reinforce_loss(log_probs: torch.Tensor, entropy: torch.Tensor, values: torch.Tensor,
                   adv: torch.Tensor, ret: torch.Tensor, entropy_coef, adjusted: LossAdjustment,
                   settings: PPOSettings) -> tuple[torch.Tensor, dict]:
    """L (the module docstring) from the current policy's outputs on the rollout's M samples,
    (M,) tensors, with the entropy method's ``adjusted`` answer on (M, 1) views; and its
    metrics (the hook's left to the caller). On a seed axis every tensor has a leading axis
    of S seeds: the S losses and each metric's S values (as ``ppo.minibatch_loss``)."""
    terms = -adv * log_probs
    if adjusted.weight is not None:
        terms = terms * adjusted.weight.reshape(terms.shape)
    pg_mask = adjusted.mask.reshape(terms.shape)
    pg_loss = (terms * pg_mask).sum(-1) / pg_mask.sum(-1).clamp_min(1.0)
    value_loss = 0.5 * ((values - ret) ** 2).mean(-1)
    return combined_loss(pg_loss, value_loss, entropy, entropy_coef, adjusted, settings)
