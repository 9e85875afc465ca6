"""The RL-with-verifiable-rewards loop: per step, P prompts x G completions, verify, compute
advantages with the slot's method, then clipped policy-gradient epochs on the batch.

Per step k:

1. rollout: the backend samples G completions for each of P training prompts, each at most
   the batch-size slot's ``sequence_length`` tokens (``max_new_tokens`` unless the method
   ramps it; the held-out evaluation keeps ``max_new_tokens``) (with
   ``dynamic_sampling``, DAPO's rule: groups whose rewards are all equal are dropped and new
   prompts are drawn until P groups are kept or ``max_refills`` draws are spent; with a
   batch-size method's per-prompt group sizes, ``first_group_size`` completions each, then
   the rest of each prompt's ``group_sizes`` answer, within P x G);
2. rewards: 1 for a verified answer, else ``format_reward`` if well formed, else 0, placed at
   the last response token (token-level rewards, as verl);
3. log-probabilities of the responses under the sampling policy (``old``) and, with a KL term,
   under the frozen reference (the starting checkpoint); against the rollout backend's own
   log-probabilities of the same tokens, the mismatch metrics and, with ``tis_cap``, the
   truncated importance weights (``mismatch``);
4. advantages ``A, R = advantage.compute(rewards, mask, group_ids, ...)``; methods needing
   ``values`` (PPO with GAE) get them from a value head on the policy's last hidden state,
   trained with ``value_coef * 0.5 (V - R)^2``; ReMax's ``reward_baselines`` are the rewards of
   greedy answers;
5. ``epochs`` passes over ``minibatches`` minibatches, each minimising

       L = agg(max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))) + beta * agg(KL_t)
           - c * agg(H_t) + value loss (+ the entropy method's extra loss)

   with token-, sequence- (GSPO) or prefix-level (PNPO) ratios r (``ratio_level``;
   ``shared.losses.ppo_clip_loss``), the aggregation ``loss_agg``
   (``shared.losses.aggregate``; ``seq-mean-token-sum-norm`` divides by ``loss_constant``'s
   constant), KL estimator ``kl_kind`` to the reference with weight
   ``kl_coef``; c, eps_low/eps_high and the token mask come from the entropy slot; each
   minibatch is one ``families.policy_step`` (gradients clipped to ``max_grad_norm``, the
   optimizer's step, then its ``observe`` with the minibatch's KL, the batch's mean reward as
   the episodic return and k as the update: ``rl_stats``);
6. ``backend.sync_weights(policy)`` so the next rollout samples from the updated weights.

With ``staleness`` = k > 0 the backend samples from ``sampler``, a frozen copy of the policy
that holds its parameters of k updates before (``staleness.StalePolicy``, an asynchronous
actor's stale policy; step 6 then loads and syncs those); ``old`` stays the learner's, so the
PPO ratio is taken against the current policy, and the sampler's log-probabilities give the
mismatch metrics and, with ``tis_cap``, the truncated importance weights, which then correct the
staleness. The advantage batch's ``old_log_probs`` are the sampler's (recomputed by the trainer,
only for a method that reads them) and ``target_log_probs`` the learner's (``vtrace``); with k =
0 both are ``old``. Held-out evaluation measures the current policy. k = 0 runs the code of
before.

``precision: bf16`` runs every forward pass of the policy (and the reference) under bf16
autocast, the weights, gradients and optimizer state staying fp32; the hf backend samples under
the same autocast and the vllm backend in bfloat16 (``fp32``: float32 on both sides).

Held-out evaluation (greedy pass@1 and sampled pass@k) runs at step 0, every ``eval_every``
steps and at the last step (whichever budget ends the run).
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from workbench.common import seeds
from workbench.families import (
    BatchSlot,
    EntropySlot,
    compute_advantages,
    mean_over_steps,
    minibatch_epochs,
    open_rl_slots,
    policy_step,
)
from workbench.testbeds.rlvr.backends import RolloutBackend, Rollouts
from workbench.testbeds.rlvr.checker import is_correct, reward
from workbench.testbeds.rlvr.lengths import lengths_by_correctness
from workbench.testbeds.rlvr.mismatch import mismatch_metrics, tis_weights
from workbench.testbeds.rlvr.model import position_ids_from_mask
from workbench.testbeds.rlvr.problems import Problem
from workbench.testbeds.rlvr.prompting import DEFAULT_STOP, PromptFormat
from workbench.testbeds.rlvr.settings import RLSettings
from workbench.testbeds.rlvr.staleness import StalePolicy
from workbench.testbeds.shared.advantage_batch import completion_batch
from workbench.testbeds.shared.batch_shape import reshape_batch
from workbench.testbeds.shared.losses import aggregate, kl_penalty, ppo_clip_loss

if TYPE_CHECKING:  # workbench.testbeds imports this module
    from workbench.common.budget import Budget, LogFn


@dataclass
class Batch:
    """One step's training batch: prompt + response token ids, left-padded prompts and
    right-padded responses, so response token t of every row sits in column ``prompt_width + t``.
    """

    input_ids: torch.Tensor  # (B, Lp + T)
    attention_mask: torch.Tensor  # (B, Lp + T)
    response_mask: torch.Tensor  # (B, T) float
    prompt_width: int
    scores: torch.Tensor  # (B,) reward of each completion
    correct: torch.Tensor  # (B,) bool
    group_ids: torch.Tensor  # (B,) long
    problems: list[Problem]  # the problem each row answers
    rollout_log_probs: torch.Tensor | None = None  # (B, T) the sampler's, 0 off the mask

    @property
    def rewards(self) -> torch.Tensor:
        """Token-level rewards: the score at each row's last response token."""
        lengths = self.response_mask.sum(1).long()
        rewards = torch.zeros_like(self.response_mask)
        rows = torch.arange(len(lengths), device=rewards.device)
        last = (lengths - 1).clamp(min=0)
        rewards[rows, last] = self.scores.to(rewards.dtype) * (lengths > 0)
        return rewards


def build_batch(rollouts: Rollouts, problems: Sequence[Problem], group_ids: Sequence[int],
                pad_id: int, format_reward: float, device, rule: str = "whole") -> Batch:
    """Tensors for the completions of ``rollouts`` (completion i answers ``problems[i]``)."""
    width = max(len(p) for p in rollouts.prompt_ids)
    horizon = max(1, max(len(r) for r in rollouts.response_ids))
    rows = len(problems)
    ids = torch.full((rows, width + horizon), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width + horizon), dtype=torch.long)
    response_mask = torch.zeros((rows, horizon))
    for i, (prompt, response) in enumerate(zip(rollouts.prompt_ids, rollouts.response_ids,
                                               strict=True)):
        ids[i, width - len(prompt):width] = torch.tensor(prompt)
        ids[i, width:width + len(response)] = torch.tensor(response, dtype=torch.long)
        attention[i, width - len(prompt):width + len(response)] = 1
        response_mask[i, :len(response)] = 1
    scores = torch.tensor([reward(p, text, format_reward, rule)
                           for p, text in zip(problems, rollouts.texts, strict=True)])
    correct = torch.tensor([is_correct(p, text, rule)
                            for p, text in zip(problems, rollouts.texts, strict=True)])
    sampler = None
    if rollouts.log_probs is not None:
        sampler = torch.zeros((rows, horizon))
        for i, values in enumerate(rollouts.log_probs):
            sampler[i, :len(values)] = torch.tensor(values, dtype=torch.float32)
        sampler = sampler.to(device)
    return Batch(ids.to(device), attention.to(device), response_mask.to(device), width,
                 scores.to(device), correct.to(device),
                 torch.tensor(list(group_ids), dtype=torch.long, device=device), list(problems),
                 sampler)


def response_log_probs(model, batch: Batch, temperature: float, value_head=None,
                       rows: torch.Tensor | None = None):
    """(log-probs, entropies, values or None) of the response tokens, each (B, T); values
    (B, T + 1): V of the state before each response token and after the last one.

    Logits at position i predict token i + 1, so response token t (column Lp + t) is scored
    by the logits at column Lp + t - 1.
    """
    ids, attention = batch.input_ids, batch.attention_mask
    mask = batch.response_mask
    if rows is not None:
        ids, attention, mask = ids[rows], attention[rows], mask[rows]
    out = model(input_ids=ids, attention_mask=attention,
                position_ids=position_ids_from_mask(attention), use_cache=False,
                output_hidden_states=value_head is not None)
    start = batch.prompt_width - 1
    logits = out.logits[:, start:start + mask.shape[1]].float() / temperature
    targets = ids[:, start + 1:start + 1 + mask.shape[1]]
    log_norm = torch.logsumexp(logits, dim=-1)
    log_probs = (logits.gather(-1, targets[..., None]).squeeze(-1) - log_norm) * mask
    entropy = (log_norm - (torch.softmax(logits, dim=-1) * logits).sum(-1)) * mask
    values = None
    if value_head is not None:
        hidden = out.hidden_states[-1][:, start:start + mask.shape[1] + 1].float()
        values = value_head(hidden).squeeze(-1).float()  # float32 under bf16 autocast too
        values = torch.cat([values[:, :-1] * mask, values[:, -1:] * 0], dim=1)
    return log_probs, entropy, values


def sample_batch(backend: RolloutBackend, train: Sequence[Problem], rng: random.Random,
                 settings: RLSettings, prompts: int, group_size: int, pad_id: int, seed: int,
                 device, step: int = 0,
                 batch_slot: BatchSlot | None = None) -> tuple[Batch, dict[str, float]]:
    """Generate, verify and (with dynamic sampling) filter groups; returns the batch and
    rollout statistics. Draw d of ``step`` samples from the run's ``("rollouts", step, d)``
    stream. With per-prompt group sizes (``batch_slot``'s ``first_group_size`` and
    ``group_sizes``; not with dynamic sampling), each prompt first gets its first count, then
    the rest of its size from further draws, one per extra count."""
    first = group_size if batch_slot is None else batch_slot.first_group_size(group_size)
    if settings.dynamic_sampling and first != group_size:
        raise ValueError("per-prompt group sizes do not combine with dynamic_sampling")
    kept_problems: list[Problem] = []
    kept: list[Rollouts] = []
    first_scores: list[list[float]] = []
    zero_var, groups_seen, tokens, seconds = 0, 0, 0, 0.0
    draws = 0
    while True:
        chosen = rng.sample(range(len(train)), min(prompts, len(train)))
        problems = [train[i] for i in chosen]
        started = time.perf_counter()
        out = backend.generate([p.prompt for p in problems], first,
                               max_new_tokens=settings.max_new_tokens,
                               temperature=settings.temperature, stop=stop_strings(settings),
                               seed=seeds.int_seed(seed, "rollouts", step, draws))
        seconds += time.perf_counter() - started
        tokens += sum(len(r) for r in out.response_ids)
        draws += 1
        for g, problem in enumerate(problems):
            rows = range(g * first, (g + 1) * first)
            scores = [reward(problem, out.texts[i], settings.format_reward,
                             answer_rule(settings)) for i in rows]
            groups_seen += 1
            if len(set(scores)) == 1:
                zero_var += 1
                if settings.dynamic_sampling:
                    continue
            kept_problems.append(problem)
            kept.append(_group(out, rows))
            first_scores.append(scores)
        if not settings.dynamic_sampling or len(kept) >= prompts or draws > settings.max_refills:
            break
    kept, kept_problems = kept[:prompts], kept_problems[:prompts]
    if not kept:  # dynamic sampling found no group with signal: train on the last draw
        kept_problems = problems
        kept = [_group(out, range(g * group_size, (g + 1) * group_size))
                for g in range(len(problems))]
    prompt_draws = draws
    sizes = None if batch_slot is None or settings.dynamic_sampling else \
        batch_slot.group_sizes(first_scores, prompts * group_size)
    if sizes is not None:  # the extra completions, one draw per extra count
        extra = {g: n - len(kept[g].texts) for g, n in enumerate(sizes) if n > len(kept[g].texts)}
        for more in sorted(set(extra.values())):
            groups = [g for g in sorted(extra) if extra[g] == more]
            started = time.perf_counter()
            out = backend.generate([kept_problems[g].prompt for g in groups], more,
                                   max_new_tokens=settings.max_new_tokens,
                                   temperature=settings.temperature, stop=stop_strings(settings),
                                   seed=seeds.int_seed(seed, "rollouts", step, draws))
            seconds += time.perf_counter() - started
            tokens += sum(len(r) for r in out.response_ids)
            draws += 1
            for i, g in enumerate(groups):
                kept[g] = _join(kept[g], _group(out, range(i * more, (i + 1) * more)))
    merged = Rollouts(
        [ids for r in kept for ids in r.prompt_ids], [ids for r in kept for ids in r.response_ids],
        [t for r in kept for t in r.texts], [f for r in kept for f in r.finished],
        None if any(r.log_probs is None for r in kept)
        else [lp for r in kept for lp in r.log_probs])
    row_problems = [p for p, r in zip(kept_problems, kept, strict=True) for _ in r.texts]
    group_ids = [g for g, r in enumerate(kept) for _ in r.texts]
    batch = build_batch(merged, row_problems, group_ids, pad_id, settings.format_reward, device,
                        answer_rule(settings))
    if sizes is not None:  # groups with all rewards equal, counted on the whole groups
        zero_var = sum(int(batch.scores[batch.group_ids == g].unique().numel() == 1)
                       for g in range(len(kept)))
    stats = {"train/zero_variance_groups": zero_var / max(groups_seen, 1),
             "train/rollout_draws": float(prompt_draws),
             "train/truncated_fraction": 1.0 - sum(merged.finished) / len(merged.finished),
             "time/rollout_seconds": seconds,
             "time/rollout_tokens_per_second": tokens / seconds if seconds > 0 else math.nan,
             "cost/generated_tokens": float(tokens),
             "cost/completions": float(len(merged.texts) if not settings.dynamic_sampling
                                       else prompt_draws * prompts * group_size)}
    return batch, stats


def _group(out: Rollouts, rows: range) -> Rollouts:
    """The rows ``rows`` of ``out``."""
    return Rollouts([out.prompt_ids[i] for i in rows], [out.response_ids[i] for i in rows],
                    [out.texts[i] for i in rows], [out.finished[i] for i in rows],
                    None if out.log_probs is None else [out.log_probs[i] for i in rows])


def _join(a: Rollouts, b: Rollouts) -> Rollouts:
    """The rows of ``a`` then those of ``b``."""
    return Rollouts(a.prompt_ids + b.prompt_ids, a.response_ids + b.response_ids,
                    a.texts + b.texts, a.finished + b.finished,
                    None if a.log_probs is None or b.log_probs is None
                    else a.log_probs + b.log_probs)


def autocast(precision: str, device):
    """bf16 autocast on ``device`` for ``precision`` bf16 (the weights, gradients and optimizer
    state stay fp32: master weights), else nothing."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


@torch.no_grad()
def evaluate(backend: RolloutBackend, held_out: Sequence[Problem], settings: RLSettings,
             seed: int) -> dict[str, float]:
    """Greedy pass@1 on the held-out set and sampled pass@k on its first prompts (from the
    run's ``"eval"`` stream, the same at every evaluation)."""
    eval_seed = seeds.int_seed(seed, "eval")
    rule, stop = answer_rule(settings), stop_strings(settings)
    greedy = backend.generate([p.prompt for p in held_out], 1, greedy=True, stop=stop,
                              max_new_tokens=settings.max_new_tokens, seed=eval_seed)
    greedy_correct = [is_correct(p, t, rule) for p, t in zip(held_out, greedy.texts,
                                                              strict=True)]
    greedy_lengths = [len(r) for r in greedy.response_ids]
    subset = list(held_out[:settings.eval_k_prompts])
    k = settings.eval_k
    sampled = backend.generate([p.prompt for p in subset], k, temperature=settings.temperature,
                               max_new_tokens=settings.max_new_tokens, seed=eval_seed,
                               stop=stop)
    solved = [any(is_correct(p, t, rule) for t in sampled.texts[i * k:(i + 1) * k])
              for i, p in enumerate(subset)]
    per_sample = sum(is_correct(p, t, rule) for p, t in zip(
        (p for p in subset for _ in range(k)), sampled.texts, strict=True))
    return {"eval/accuracy": sum(greedy_correct) / len(held_out),
            f"eval/pass@{k}": sum(solved) / len(subset),
            "eval/pass@1_sampled": per_sample / (k * len(subset)),
            "eval/response_length": sum(greedy_lengths) / len(held_out),
            **lengths_by_correctness(greedy_lengths, greedy_correct, "eval")}


def train(policy, tokenizer, backend: RolloutBackend, methods: Mapping[str, Any],
          train_set: Sequence[Problem], held_out: Sequence[Problem], settings: RLSettings, *,
          budget: Budget, seed: int, log: LogFn, reference=None, value_head=None,
          device, sampler=None) -> dict[str, Any]:
    """Run RL steps until the budget is spent; returns the last metrics. The problems'
    prompts are rendered here with ``settings.prompt_template`` (``prompting``). With
    ``staleness`` > 0, ``sampler`` is the copy of ``policy`` the backend samples from."""
    prompt_format = PromptFormat.build(settings.prompt_template, train_set, settings.shots,
                                       settings.stop)
    train_set = prompt_format.apply(train_set, tokenizer)
    held_out = prompt_format.apply(held_out, tokenizer)
    prompts, group_size = settings.prompts, settings.group_size
    per_step = settings.epochs * settings.minibatches
    total_steps = budget.planned_steps(prompts * group_size)
    params = list(policy.parameters()) + (list(value_head.parameters()) if value_head else [])
    slots = open_rl_slots(methods, params, updates=total_steps, per_update=per_step,
                          batch=prompts * group_size, samples=budget.samples)
    optimizer, entropy_slot, batch_slot = slots.optimizer, slots.entropy, slots.batch
    advantage_method, needs = slots.advantage, slots.advantage_inputs
    if slots.first_batch is not None:
        prompts, group_size = _reshape(slots.first_batch, prompts, group_size,
                                       settings.batch_axis)
    rng = random.Random(seeds.int_seed(seed, "prompts"))
    generator = seeds.torch_generator(seed, "minibatches")
    pad_id = tokenizer.pad_token_id
    stale = StalePolicy(policy, sampler, settings.staleness) if settings.staleness else None

    def evaluate_learner() -> dict[str, float]:
        if stale is None:
            return evaluate(backend, held_out, settings, seed)
        with stale.learner(backend):
            return evaluate(backend, held_out, settings, seed)

    metrics = evaluate(backend, held_out, settings, seed)
    log(0, {**metrics, "cost/samples": 0.0, "cost/tokens": 0.0, "time/wall_seconds": 0.0})
    samples, tokens, seconds, step, diverged = 0, 0, 0.0, 0, False
    while step < budget.steps:
        started = time.perf_counter()
        # 1-2. rollout and rewards, responses capped at the batch slot's sequence length
        cap = batch_slot.sequence_length(step, settings.max_new_tokens)
        rollout_settings = (settings if cap == settings.max_new_tokens
                            else settings.model_copy(update={"max_new_tokens": cap}))
        batch, rollout_stats = sample_batch(backend, train_set, rng, rollout_settings, prompts,
                                            group_size, pad_id, seed, device, step, batch_slot)
        # 3. log-probs of the sampling policy (and the reference)
        policy.eval()
        with torch.no_grad(), autocast(settings.precision, device):
            old_log_probs, old_entropy, values = response_log_probs(
                policy, batch, settings.temperature, value_head)
            ref_log_probs = None
            if reference is not None:
                ref_log_probs = response_log_probs(reference, batch, settings.temperature)[0]
            behaviour_log_probs = old_log_probs  # the sampler's (staleness)
            if stale is not None and needs & {"old_log_probs", "target_log_probs"}:
                behaviour_log_probs = response_log_probs(sampler, batch,
                                                         settings.temperature)[0]
        policy.train()
        mask = batch.response_mask
        mismatch, tis = {}, None
        if batch.rollout_log_probs is not None:
            mismatch = mismatch_metrics(old_log_probs, batch.rollout_log_probs, mask,
                                        settings.tis_cap)
            if settings.tis_cap is not None:
                tis = tis_weights(old_log_probs, batch.rollout_log_probs, mask,
                                  settings.tis_cap)
        elif settings.tis_cap is not None:
            raise ValueError("tis_cap needs the sampler's log-probabilities, which this "
                             "rollout backend did not return")
        mean_reward = float(batch.scores.mean())
        # 4. advantages
        baselines = (_greedy_baselines(batch, backend, rollout_settings,
                                       seeds.int_seed(seed, "baselines", step))
                     if "reward_baselines" in needs else None)
        advantages, returns = compute_advantages(
            advantage_method, completion_batch(batch.rewards, mask, batch.group_ids, values,
                                               baselines, behaviour_log_probs, old_log_probs),
            needs)
        advantages, returns = advantages * mask, returns * mask
        mean_entropy = float(aggregate(old_entropy, mask, "token-mean"))
        coefficient = entropy_slot.coefficient(step, mean_entropy)
        # 5. policy-gradient epochs (the backend may free its memory meanwhile)
        backend.idle()
        train_started = time.perf_counter()
        with autocast(settings.precision, device):
            stats = _update(policy, value_head, optimizer, entropy_slot, batch, old_log_probs,
                            ref_log_probs, advantages, returns, values, coefficient, settings,
                            generator, tis, update=step, mean_reward=mean_reward)
        train_seconds = time.perf_counter() - train_started
        # 6. the next rollout samples from the new weights
        sync_started = time.perf_counter()
        backend.sync_weights(policy if stale is None else stale.advance())
        sync_seconds = time.perf_counter() - sync_started
        step += 1
        seconds += time.perf_counter() - started
        samples += int(rollout_stats["cost/completions"])
        step_tokens = int(batch.attention_mask.sum())
        tokens += step_tokens
        lengths = mask.sum(1)
        valid = mask.bool()
        group_counts = torch.bincount(batch.group_ids).float()
        metrics = {
            **rollout_stats, **stats, **mismatch,
            "train/precision_bits": 16.0 if settings.precision == "bf16" else 32.0,
            "train/reward": mean_reward,
            "train/accuracy": float(batch.correct.float().mean()),
            "train/response_length": float(lengths.mean()),
            **lengths_by_correctness(lengths, batch.correct, "train"),
            "train/entropy": mean_entropy,
            "adv/mean": float(advantages[valid].mean()), "adv/std": float(advantages[valid].std()),
            "adv/abs_max": float(advantages[valid].abs().max()),
            "adv/zero_fraction": float((advantages[valid] == 0).float().mean()),
            "method/entropy_coef": coefficient,
            "batch/prompts": float(prompts), "batch/group_size": float(group_counts.mean()),
            "batch/group_size_max": float(group_counts.max()),
            "batch/size": float(len(batch.scores)),
            "batch/sequence_length": float(cap),
            "time/train_tokens_per_second": step_tokens * settings.epochs / train_seconds,
            "time/weight_sync_seconds": sync_seconds,
            "cost/samples": float(samples), "cost/tokens": float(tokens),
            "time/wall_seconds": seconds,
        }
        last = step == budget.steps or budget.spent(samples, seconds)
        if step % settings.eval_every == 0 or last:  # the last step always
            metrics.update(evaluate_learner())
        log(step, metrics)
        if not math.isfinite(stats["train/policy_loss"]):
            diverged = True
            break
        if last:
            break
        wanted = batch_slot.after_step(
            step, loss=stats["train/policy_loss"], grad_sq=stats["train/grad_norm"] ** 2,
            batch_size=len(batch.scores), samples=samples)
        if wanted is not None:
            prompts, group_size = _reshape(wanted, prompts, group_size, settings.batch_axis)
    if "eval/accuracy" not in metrics:  # stopped between evaluations: measure where it ended
        final = evaluate_learner()
        metrics.update(final)
        log(step, final)
    return {**metrics, "steps": step, "diverged": diverged}


def answer_rule(settings: RLSettings) -> str:
    """The checker's rule for the prompt template: ``whole`` (raw) or ``marked``."""
    return "whole" if settings.prompt_template == "raw" else "marked"


def stop_strings(settings: RLSettings) -> tuple[str, ...]:
    """The stop strings: the settings' own, else the template's default."""
    return tuple(DEFAULT_STOP[settings.prompt_template] if settings.stop is None
                 else settings.stop)


def _greedy_baselines(batch: Batch, backend, settings, seed) -> torch.Tensor:
    """ReMax: the reward of the greedy answer to each row's prompt (one greedy rollout per
    group)."""
    first = {}
    for row, group in enumerate(batch.group_ids.tolist()):
        first.setdefault(group, row)
    groups = list(first)
    problems = [batch.problems[first[g]] for g in groups]
    out = backend.generate([p.prompt for p in problems], 1, greedy=True,
                           max_new_tokens=settings.max_new_tokens, seed=seed,
                           stop=stop_strings(settings))
    by_group = {g: reward(p, t, settings.format_reward, answer_rule(settings))
                for g, p, t in zip(groups, problems, out.texts, strict=True)}
    return torch.tensor([by_group[g] for g in batch.group_ids.tolist()],
                        dtype=batch.response_mask.dtype, device=batch.response_mask.device)


def _update(policy, value_head, optimizer, entropy_slot: EntropySlot, batch: Batch,
            old_log_probs, ref_log_probs, advantages, returns, old_values, coefficient,
            settings: RLSettings, generator, tis=None, *, update: int,
            mean_reward: float) -> dict[str, float]:
    """``epochs`` x ``minibatches`` policy steps (``policy_step``) on the batch; ``mean_reward``
    (the batch's mean reward, each completion an episode) and ``update`` (the rollout's
    index) are the ``rl_stats`` a step-size method observes after each."""
    mask = batch.response_mask
    constant = loss_constant(settings, mask)
    per_step: list[dict[str, float]] = []
    for idx in minibatch_epochs(len(batch.scores), epochs=settings.epochs,
                                minibatches=settings.minibatches, generator=generator,
                                device=mask.device):
        def loss(idx=idx):
            return _loss(policy, value_head, entropy_slot, batch, idx, old_log_probs,
                         ref_log_probs, advantages, returns, old_values, coefficient, settings,
                         constant, tis)

        stats = policy_step(optimizer, loss, params=optimizer.param_groups[0]["params"],
                            max_grad_norm=settings.max_grad_norm, update=update,
                            episodic_return=mean_reward)
        per_step.append(stats)
    return mean_over_steps(per_step)


def loss_constant(settings: RLSettings, mask: torch.Tensor) -> float:
    """The constant of ``seq-mean-token-sum-norm`` (Dr. GRPO): the width T of the step's
    response mask (its longest response) or ``max_new_tokens`` (``loss_constant``; the
    configured cap, not a batch-size method's per-step ``sequence_length``, so the scale stays
    fixed)."""
    if settings.loss_constant == "max_new_tokens":
        return float(settings.max_new_tokens)
    return float(mask.shape[1])


def _loss(policy, value_head, entropy_slot: EntropySlot, batch, idx, old_log_probs, ref_log_probs,
          advantages, returns, old_values, coefficient, settings: RLSettings, constant,
          tis=None):
    log_probs, entropy, values = response_log_probs(policy, batch, settings.temperature,
                                                    value_head, rows=idx)
    mask = batch.response_mask[idx]
    old, adv = old_log_probs[idx], advantages[idx]
    adjusted = entropy_slot.adjust_policy_loss(log_probs=log_probs, old_log_probs=old,
                                               advantages=adv, mask=mask, entropy=entropy,
                                               clip=settings.clip)
    weight = adjusted.weight
    if tis is not None:  # truncated importance sampling, per token (mismatch)
        weight = tis[idx] if weight is None else weight * tis[idx]
    pg_loss, pg_stats = ppo_clip_loss(
        log_probs, old, adv, adjusted.mask, clip_low=adjusted.clip_low,
        clip_high=adjusted.clip_high, dual_clip=settings.dual_clip,
        ratio_level=settings.ratio_level, agg=settings.loss_agg, constant=constant,
        weight=weight)
    entropy_term = aggregate(entropy, mask, settings.loss_agg, constant)
    loss = pg_loss - coefficient * entropy_term
    parts = {"train/policy_loss": float(pg_loss.detach()),
             "train/entropy_loss": float(entropy_term.detach()),
             **{f"train/{k}": float(v) for k, v in pg_stats.items()}}
    if ref_log_probs is not None:  # tracked always, in the loss when kl_coef > 0
        kl = aggregate(kl_penalty(log_probs, ref_log_probs[idx], settings.kl_kind), mask,
                       settings.loss_agg, constant)
        if settings.kl_coef > 0:
            loss = loss + settings.kl_coef * kl
        parts["train/kl_ref"] = float(kl.detach())
    if values is not None:
        value_loss = 0.5 * aggregate((values[:, :-1] - returns[idx]) ** 2, mask, "token-mean")
        loss = loss + settings.value_coef * value_loss
        parts["train/value_loss"] = float(value_loss.detach())
    loss = loss + adjusted.extra_loss
    parts.update(adjusted.metrics)
    return loss, parts


def _reshape(samples: int, prompts: int, group_size: int, axis: str) -> tuple[int, int]:
    """(P, G) with P * G close to ``samples``, changing only ``axis``."""
    return reshape_batch(samples, prompts, group_size,
                         "columns" if axis == "group_size" else "rows")
