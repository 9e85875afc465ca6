"""The language-model turn loop's training: M instances played G times per update
(``turns.play_turns``, or as trees: ``trees.play_turn_trees``), the advantage slot at the turn
level, each turn's advantage given to its action tokens, and clipped policy-gradient steps; the
whole of it is described in ``agent_lm.turns``.

For an advantage method that reads ``ref_log_probs`` (``implicit_prm``) the loop keeps a frozen
copy of the model as training began (``reference_model``: no gradients, evaluation mode; made
only for such a method) and gives each played turn the sum of its action tokens'
log-probabilities under it, at the sampling temperature (``ref_log_probs_of``): the turn is the
loop's step, as for ``old_log_probs``, so at the first update the two are equal. With
``kl_coef`` > 0 the copy is kept for any method and the loss adds ``kl_coef`` times the token
mean of ``shared.losses.kl_penalty`` to it (``train/kl_ref``)."""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from workbench.common import seeds
from workbench.families import (
    compute_advantages,
    mean_over_steps,
    minibatch_epochs,
    open_rl_slots,
    policy_step,
)
from workbench.testbeds.agent.environment import EnvFactory, Instance
from workbench.testbeds.agent_lm.settings import TurnSettings
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.loop import response_log_probs
from workbench.testbeds.shared.advantage_batch import episode_batch
from workbench.testbeds.shared.losses import aggregate, kl_penalty, ppo_clip_loss

if TYPE_CHECKING:
    from workbench.common.budget import Budget, LogFn
from workbench.testbeds.agent_lm.trees import play_turn_trees
from workbench.testbeds.agent_lm.turns import Turns, evaluate, play_turns


def train(model, tokenizer, value_head: torch.nn.Module | None,
          train_instances: Sequence[Instance], eval_instances: Sequence[Instance],
          methods: Mapping[str, Any], settings: TurnSettings, *, max_steps: int,
          budget: Budget, seed: int, log: LogFn, device: torch.device,
          make_env: EnvFactory) -> dict[str, Any]:
    """RL updates until the budget is spent; returns the last metrics."""
    m, g = settings.instances_per_update, settings.group_size
    per_update = settings.epochs * settings.minibatches
    total_updates = budget.planned_steps(m * g * max_steps)
    params = list(model.parameters()) + (list(value_head.parameters()) if value_head else [])
    slots = open_rl_slots(methods, params, updates=total_updates, per_update=per_update,
                          batch=m * g, samples=budget.samples)
    if slots.first_batch is not None:  # the batch slot sizes the instances per update
        m = max(1, slots.first_batch // g)
    backend = make_backend("hf", model, tokenizer, None, device)
    order = seeds.torch_generator(seed, "minibatches")
    evaluation = make_env(eval_instances, max_steps, device)
    sampler = settings.tree_sampler(slots.advantage)
    if sampler is not None and value_head is not None:
        raise ValueError("tree sampling gives the turn loop no value of a shared turn's state "
                         "for each row; use sampling: independent (or auto) with a method that "
                         "reads values")
    # the reference: a frozen copy of the model as training begins, only for a method that
    # reads ref_log_probs (the others cost nothing)
    reference = (reference_model(model)
                 if "ref_log_probs" in slots.advantage_inputs or settings.kl_coef > 0 else None)
    metrics = evaluate(evaluation, model, tokenizer, backend, settings, seed)
    log(0, {**metrics, "cost/env_steps": 0.0, "cost/samples": 0.0, "time/wall_seconds": 0.0})
    env_steps, tokens, seconds, update, diverged = 0, 0, 0.0, 0, False
    while update < budget.steps:
        started = time.perf_counter()
        draw = seeds.numpy_generator(seed, "prompts", update)
        chosen = draw.choice(len(train_instances), size=m, replace=len(train_instances) < m)
        if sampler is None:
            env = make_env([train_instances[i] for i in chosen for _ in range(g)], max_steps,
                           device, instance_ids=[int(i) for i in chosen for _ in range(g)])
            turns = play_turns(env, model, tokenizer, backend,
                               sample_seed=lambda turn, u=update: seeds.int_seed(
                                   seed, "rollouts", u, turn),
                               temperature=settings.temperature,
                               max_new_tokens=settings.max_new_tokens,
                               malformed_penalty=settings.malformed_penalty,
                               value_head=value_head)
            played = int(turns.mask.sum())
            group_ids = torch.arange(m, device=device).repeat_interleave(g)
        else:
            turns, group_ids, played = play_turn_trees(
                sampler, settings, [train_instances[i] for i in chosen],
                [int(i) for i in chosen], model, tokenizer, backend,
                seed_of=lambda call, turn, u=update: seeds.int_seed(seed, "rollouts", u, call,
                                                                    turn),
                branches=seeds.numpy_generator(seed, "branches", update),
                max_steps=max_steps, device=device, make_env=make_env)
        env_steps += played
        batch = episode_batch(turns, group_ids)
        if "ref_log_probs" in slots.advantage_inputs:
            batch = replace(batch, ref_log_probs=ref_log_probs_of(reference, turns,
                                                                  settings.temperature))
        advantages, returns = compute_advantages(slots.advantage, batch,
                                                 slots.advantage_inputs)
        action_mask = turns.tokens.response_mask
        entropy = float(aggregate(turns.token_entropy, action_mask, "token-mean"))
        coefficient = slots.entropy.coefficient(update, entropy)
        success = float(turns.success.float().mean())
        stats = _update(model, value_head, slots, turns, advantages,
                        returns if value_head is not None else None, coefficient, settings,
                        update, success, order, reference)
        tokens += int(turns.tokens.attention_mask.sum()) * settings.epochs
        seconds += time.perf_counter() - started
        update += 1
        valid = turns.mask != 0
        optimal = torch.tensor([train_instances[i].optimal for i in chosen],
                               device=device)[group_ids]
        won = turns.success
        metrics = {
            **stats,
            "train/success": success,
            "train/return": float((turns.rewards * turns.mask).sum(dim=1).mean()),
            "train/episode_length": float(turns.lengths.float().mean()),
            "train/path_ratio": (float((optimal[won] / turns.lengths[won]).mean())
                                 if bool(won.any()) else math.nan),
            "train/malformed_fraction": float(turns.malformed[valid].float().mean()),
            "train/rollout_entropy": entropy,
            "adv/mean": float(advantages[valid].mean()),
            "adv/std": float(advantages[valid].std()) if played > 1 else math.nan,
            "adv/zero_fraction": float((advantages[valid] == 0).float().mean()),
            "method/entropy_coef": coefficient,
            "batch/prompts": float(m), "batch/group_size": float(g),
            "cost/env_steps": float(env_steps), "cost/samples": float(env_steps),
            "cost/generated_tokens": float(turns.generated_tokens),
            "cost/tokens": float(tokens), "cost/updates": float(update),
            "time/wall_seconds": seconds,
            "time/env_steps_per_second": env_steps / seconds if seconds > 0 else math.nan,
        }
        last = update == budget.steps or budget.spent(env_steps, seconds)
        if update % settings.eval_every == 0 or last:  # the last update always
            metrics |= evaluate(evaluation, model, tokenizer, backend, settings, seed)
        log(update, metrics)
        if not math.isfinite(stats["train/policy_loss"]):
            diverged = True
            break
        if last:
            break
        wanted = slots.batch.after_step(update, loss=stats["train/policy_loss"],
                                        grad_sq=stats["train/grad_norm"] ** 2,
                                        batch_size=m * g, samples=env_steps)
        if wanted is not None:
            m = max(1, wanted // g)
    if "eval/success" not in metrics:  # stopped between evaluations: measure where it ended
        final = evaluate(evaluation, model, tokenizer, backend, settings, seed)
        metrics |= final
        log(update, final)
    return {**metrics, "steps": update, "diverged": diverged, "env_steps": env_steps,
            "device": str(device)}


def reference_model(model):
    """A frozen copy of ``model`` (no gradients, evaluation mode): the reference policy."""
    reference = copy.deepcopy(model).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference


def ref_token_log_probs(reference, turns: Turns, temperature: float,
                        chunk: int = 256) -> torch.Tensor:
    """(N, R): each played turn's action tokens' log-probabilities under ``reference`` at
    ``temperature`` (0 off the response mask), the turns scored ``chunk`` at a time."""
    tokens = turns.tokens
    parts = []
    with torch.no_grad():
        for start in range(0, len(tokens.response_mask), chunk):
            rows = torch.arange(start, min(start + chunk, len(tokens.response_mask)),
                                device=tokens.input_ids.device)
            log_probs, _, _ = response_log_probs(reference, tokens, temperature, rows=rows)
            parts.append(log_probs * tokens.response_mask[rows])
    return torch.cat(parts)


def ref_log_probs_of(reference, turns: Turns, temperature: float,
                     chunk: int = 256) -> torch.Tensor:
    """(B, T) ``ref_log_probs``: each played turn's action tokens' log-probabilities under
    ``reference`` at ``temperature``, summed over the turn's tokens (as ``turns.log_probs``
    are), 0 where the row had ended."""
    summed = ref_token_log_probs(reference, turns, temperature, chunk).sum(dim=1) \
        .to(turns.mask.dtype)
    played = turns.index >= 0
    out = torch.zeros_like(turns.mask)
    out[played] = summed[turns.index[played]]
    return out * turns.mask


def token_advantages(turns: Turns, advantages: torch.Tensor) -> torch.Tensor:
    """(N, R): each played turn's advantage on every one of its action tokens, 0 elsewhere."""
    return turns.per_turn(advantages.to(turns.token_log_probs.dtype))[:, None] \
        * turns.tokens.response_mask


def _update(model, value_head, slots, turns: Turns, advantages: torch.Tensor,
            returns: torch.Tensor | None, coefficient: float, settings: TurnSettings,
            update: int, success: float, order: torch.Generator,
            reference=None) -> dict[str, float]:
    """``epochs`` x ``minibatches`` clipped policy-gradient steps over the update's turns
    (with ``returns``: the value head regressed on them too; with a ``reference``, the KL
    penalty ``kl_coef`` * token-mean kl(log pi, log pi_ref) added and ``train/kl_ref``
    logged)."""
    tokens, old = turns.tokens, turns.token_log_probs
    ref = (None if reference is None
           else ref_token_log_probs(reference, turns, settings.temperature))
    adv = token_advantages(turns, advantages)
    targets = None if returns is None else turns.per_turn(returns.to(old.dtype))
    params = [p for group in slots.optimizer.param_groups for p in group["params"]]
    per_step: list[dict[str, float]] = []
    model.train()
    for idx in minibatch_epochs(len(adv), epochs=settings.epochs,
                                minibatches=settings.minibatches, generator=order,
                                device=adv.device):
        def loss(idx=idx):
            log_probs, entropy, values = response_log_probs(
                model, tokens, settings.temperature, value_head if targets is not None
                else None, rows=idx)
            mask = tokens.response_mask[idx]
            adjusted = slots.entropy.adjust_policy_loss(
                log_probs=log_probs, old_log_probs=old[idx], advantages=adv[idx],
                mask=mask, entropy=entropy, clip=settings.clip)
            pg_loss, pg_stats = ppo_clip_loss(
                log_probs, old[idx], adv[idx], adjusted.mask,
                clip_low=float(adjusted.clip_low), clip_high=float(adjusted.clip_high),
                agg="token-mean", weight=adjusted.weight)
            entropy_mean = aggregate(entropy, mask, "token-mean")
            value = pg_loss - coefficient * entropy_mean + adjusted.extra_loss
            parts = {"train/policy_loss": float(pg_loss.detach()),
                     "train/entropy": float(entropy_mean.detach()),
                     **{f"train/{k}": float(pg_stats[k]) for k in (
                         "approx_kl", "clip_frac_low", "clip_frac_high", "clip_frac")},
                     **adjusted.metrics}
            if ref is not None:  # tracked whenever a reference is kept, in the loss if kl_coef
                kl = aggregate(kl_penalty(log_probs, ref[idx], settings.kl_kind), mask,
                               "token-mean")
                if settings.kl_coef > 0:
                    value = value + settings.kl_coef * kl
                parts["train/kl_ref"] = float(kl.detach())
            if targets is not None:
                value_loss = 0.5 * ((values[:, 0] - targets[idx]) ** 2).mean()
                value = value + settings.value_coef * value_loss
                parts["train/value_loss"] = float(value_loss.detach())
            return value, parts

        stats = policy_step(slots.optimizer, loss, params=params,
                            max_grad_norm=settings.max_grad_norm, update=update,
                            episodic_return=success)
        per_step.append(stats)
    model.eval()
    return mean_over_steps(per_step)
