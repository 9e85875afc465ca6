"""The agent testbed's network loop: G rollouts of each of M task instances per update, the
advantage slot on the (episodes x steps) batch, and clipped policy-gradient steps.

Each update draws M training instances (``seeds.stream(seed, "prompts", update)``) from the
pool of ``train_instances``, plays each G times to the end (goal or ``max_steps``) with the
sampled policy, and hands the advantage method its inputs in the family's (B = M * G rows, T
steps) layout: ``rewards`` (1 at the step that reaches the goal), ``mask`` (the steps played),
``group_ids`` (the instance of each row), ``anchor_ids`` (each step's observed state),
``old_log_probs`` and, when the method reads them and the task has a rubric judge
(``make_judge``, ``rubric.Judge``), ``rubric`` / ``rubric_weights`` (its per-step
annotations); for a method that reads ``mc_values``, the states its ``value_request`` names
are restored and played on by the sampling policy (``mc_values_of``), and those
environment steps count in ``cost/env_steps`` like the episodes' own; for a method that reads
``ref_log_probs``, each step's action's log-probability under a frozen copy of the policy as
training began (``reference_policy``; kept only for such a method, or for a KL penalty to it:
``kl_coef`` > 0 adds ``kl_coef`` times the step mean of ``shared.losses.kl_penalty`` to the
loss, ``train/kl_ref``); for a method that reads
``hidden_states`` or ``action_ids``, the sampling policy's last hidden layer at each step's
observation (``hidden_states_of``), each step's action and the policy's entropy at each
step's state (``policy_entropy``); for one that reads
``reference_actions``, a shortest solution of each row's instance (``reference_actions_of``).
With ``sampling: tree`` the G rows of an instance are instead the kept leaves of
``tree_count`` trees grown by restoring the environment at chosen steps (``tree.play_trees``:
Tree-GRPO's sampler); with ``sampling: segments`` the leaves of one tree branching every
``segment_length`` steps (``tree.play_segment_trees``: SPO-tree's, at most G rows per instance);
``auto`` takes the advantage method's own ``tree_sampler`` (none: independent rollouts). Each
row is a leaf's whole path, and ``tree_ids``/``node_ids`` pass the trees on; ``cost/env_steps``
counts the steps played, a shared prefix once; the loss counts a shared step in each row through it
(``tree_shared_steps: per_leaf``, the reference's) or once (``once``). Independent rollouts
are trees of one leaf each.
The policy is then updated on every played step with the PPO-clip loss
(``testbeds.shared.losses``) and the entropy slot's coefficient and hook, ``epochs`` x
``minibatches`` optimizer steps of the step-size slot. Every ``eval_every`` updates and at the
last one (whichever budget ends the run) the greedy policy plays each held-out instance once:
``eval/success``.

Stops at ``budget.steps`` updates, ``budget.samples`` environment steps or
``budget.wall_seconds``, or a non-finite loss (reported as diverged).

The environment is the task's (``make_env``: ``KeyDoor``, ``ToolCalc``; any
``environment.AgentEnv``); its instances' ``optimal`` lengths give ``train/path_ratio``.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import torch
from pydantic import Field

from workbench.common import seeds
from workbench.families import (
    AdvantageBatch,
    compute_advantages,
    mean_over_steps,
    minibatch_epochs,
    open_rl_slots,
    policy_step,
)
from workbench.testbeds.agent.environment import EnvFactory, Instance
from workbench.testbeds.agent.episodes import Episodes, mc_values_of, play
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.rubric import JudgeFactory
from workbench.testbeds.agent.sampling import TreeSampling
from workbench.testbeds.agent.tree import (
    SegmentShape,
    TreeShape,
    once_per_node,
    play_segment_trees,
    play_trees,
)
from workbench.testbeds.settings import Settings
from workbench.testbeds.shared.advantage_batch import episode_batch
from workbench.testbeds.shared.losses import kl_penalty, ppo_clip_loss

if TYPE_CHECKING:
    from workbench.common.budget import Budget, LogFn


class AgentSettings(TreeSampling, Settings):
    """The loop's knobs (how rollouts are sampled: ``TreeSampling``)."""

    instances_per_update: int = Field(16, ge=1, le=65_536, description="M: task instances "
                                                                        "per update")
    group_size: int = Field(8, ge=1, le=1024, description="G: rollouts of each instance")
    epochs: int = Field(2, ge=1, le=100)
    minibatches: int = Field(2, ge=1, le=1024)
    clip: float = Field(0.2, gt=0.0, le=10.0)
    max_grad_norm: float | None = Field(0.5, gt=0.0)
    value_coef: float = Field(0.5, ge=0.0, description="weight of the value loss (estimators "
                                                         "that read values: GAE)")
    eval_every: int = Field(10, ge=1, le=1_000_000, description="updates between held-out "
                                                                 "evaluations")
    batch_axis: Literal["instances", "group_size"] = Field(
        "instances", description="what the batch_size slot changes: M (instances per update) "
        "or G (rollouts per instance; independent rollouts only)")
    kl_coef: float = Field(0.0, ge=0.0, le=100.0, description="weight of the KL penalty to the "
                           "reference policy (a frozen copy of the initial one) in the loss; "
                           "0: off (train/kl_ref is logged whenever a reference is kept)")
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k3", description="the per-step KL estimator (shared.losses.kl_penalty; k3 as verl's "
                          "low_var_kl and TRL's GRPO)")


def reference_policy(policy: Policy) -> Policy:
    """A frozen copy of ``policy`` (no gradients, evaluation mode): the reference policy."""
    reference = copy.deepcopy(policy).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference


def ref_log_probs_of(reference: Policy, episodes: Episodes) -> torch.Tensor:
    """(B, T) ``ref_log_probs``: each played step's action's log-probability under
    ``reference``, 0 at padding."""
    with torch.no_grad():
        found = reference.distribution(episodes.obs).log_prob(episodes.actions.clamp(min=0))
    return found * episodes.mask


def hidden_states_of(policy: Policy, episodes: Episodes) -> torch.Tensor:
    """(B, T, hidden) ``hidden_states``: the policy's last hidden layer at each played step's
    observation, 0 at padding."""
    with torch.no_grad():
        found = policy.features(episodes.obs)
    return found * episodes.mask[:, :, None]


def reference_actions_of(make_env: EnvFactory, instances: Sequence[Instance],
                         group_ids: torch.Tensor, *, max_steps: int,
                         device: torch.device) -> torch.Tensor:
    """(B, K) ``reference_actions``: the environment's shortest solution (``optimal_actions``
    from the start) of instance ``instances[group_ids[r]]`` for row r, -1 after its end."""
    env = make_env(list(instances), max_steps, device)
    env.reset()
    traces = [env.optimal_actions(i) for i in range(len(instances))]
    width = max(1, max(len(t) for t in traces))
    table = torch.full((len(traces), width), -1, dtype=torch.long)
    for i, trace in enumerate(traces):
        table[i, :len(trace)] = torch.tensor(trace, dtype=torch.long)
    return table.to(group_ids.device)[group_ids]


def with_step_inputs(batch: AdvantageBatch, needs: frozenset[str], policy: Policy,
                     episodes: Episodes, make_env: EnvFactory, instances: Sequence[Instance],
                     *, max_steps: int, device: torch.device) -> AdvantageBatch:
    """``batch`` with the per-step inputs the episodes do not fill until a method ``needs``
    them: the sampling policy's (not yet updated) hidden states (``hidden_states_of``), each
    step's action and the policy's entropy at its state, and a shortest solution of each row's
    instance, ``instances[group_ids[r]]`` (``reference_actions_of``). The training loop and
    ``workbench credit`` both fill them here."""
    if "hidden_states" in needs:
        batch = replace(batch, hidden_states=hidden_states_of(policy, episodes))
    if "action_ids" in needs:
        batch = replace(batch, action_ids=episodes.actions)
    if "policy_entropy" in needs:
        batch = replace(batch, policy_entropy=episodes.entropy)
    if "reference_actions" in needs:
        batch = replace(batch, reference_actions=reference_actions_of(
            make_env, instances, batch.group_ids, max_steps=max_steps, device=device))
    return batch


def train(train_layouts: Sequence[Instance], eval_layouts: Sequence[Instance], policy: Policy,
          methods: Mapping[str, Any], settings: AgentSettings, *, max_steps: int,
          budget: Budget, seed: int, log: LogFn, device: torch.device,
          make_env: EnvFactory, make_judge: JudgeFactory | None = None) -> dict[str, Any]:
    """``make_env`` builds the environment of the instances (``KeyDoor``, ``ToolCalc``);
    ``make_judge`` its rubric judge, if the task has one (``KeyDoorJudge``)."""
    m, g = settings.instances_per_update, settings.group_size
    per_update = settings.epochs * settings.minibatches
    total_updates = budget.planned_steps(m * g * max_steps)
    slots = open_rl_slots(methods, policy.parameters(), updates=total_updates,
                          per_update=per_update, batch=m * g, samples=budget.samples)
    if slots.first_batch is not None:  # the batch slot sizes the batch along batch_axis
        m, g = _reshape(slots.first_batch, m, g, settings.batch_axis)
    rollouts = seeds.torch_generator(seed, "actions", device=device)
    order = seeds.torch_generator(seed, "minibatches")
    evaluation = make_env(eval_layouts, max_steps, device)
    critic = policy.critic is not None
    trees = settings.tree_sampler(slots.advantage)
    # the reference policy: a frozen copy of the policy as training begins, only for a method
    # that reads ref_log_probs or a KL penalty to it (the others cost nothing)
    reference = (reference_policy(policy)
                 if "ref_log_probs" in slots.advantage_inputs or settings.kl_coef > 0 else None)
    judge = make_judge if {"rubric", "rubric_weights"} & slots.advantage_inputs else None
    if trees is not None and judge is not None:
        raise ValueError("sampling: tree cannot carry the rubric judge's memory of an episode "
                         "across a restored state; use sampling: independent or auto with a "
                         "method that reads rubric")
    env_steps, seconds, update, diverged = 0, 0.0, 0, False
    metrics: dict[str, float] = {}
    while update < budget.steps:
        started = time.perf_counter()
        draw = seeds.numpy_generator(seed, "prompts", update)
        chosen = draw.choice(len(train_layouts), size=m, replace=len(train_layouts) < m)
        # row r plays instance chosen[r // g] (tree sampling: row r is a leaf of one of its trees)
        env = make_env([train_layouts[i] for i in chosen for _ in range(g)], max_steps, device,
                       instance_ids=[int(i) for i in chosen for _ in range(g)])
        if trees is None:
            episodes = play(env, policy, rollouts, values=critic, judge=judge)
            played = int(episodes.mask.sum())
        elif trees == "expansion":
            episodes, played = play_trees(
                [train_layouts[i] for i in chosen], [int(i) for i in chosen],
                TreeShape.of(settings), policy, rollouts,
                seeds.numpy_generator(seed, "branches", update), max_steps=max_steps,
                device=device, make_env=make_env, values=critic)
        else:
            episodes, played = play_segment_trees(
                [train_layouts[i] for i in chosen], [int(i) for i in chosen],
                SegmentShape.of(settings), policy, rollouts, max_steps=max_steps,
                device=device, make_env=make_env, values=critic)
        env_steps += played
        group_ids = (episodes.groups if episodes.groups is not None
                     else torch.arange(m, device=device).repeat_interleave(g))
        batch = episode_batch(episodes, group_ids)
        if "mc_values" in slots.advantage_inputs:
            mc_values, continued = mc_values_of(
                slots.advantage, episodes, group_ids, [train_layouts[i] for i in chosen],
                [int(i) for i in chosen], policy, rollouts, max_steps=max_steps,
                device=device, make_env=make_env)
            batch = replace(batch, mc_values=mc_values)
            env_steps += continued
        if "ref_log_probs" in slots.advantage_inputs:
            batch = replace(batch, ref_log_probs=ref_log_probs_of(reference, episodes))
        batch = with_step_inputs(batch, slots.advantage_inputs, policy, episodes, make_env,
                                 [train_layouts[i] for i in chosen], max_steps=max_steps,
                                 device=device)
        advantages, returns = compute_advantages(slots.advantage, batch, slots.advantage_inputs)
        entropy = float(episodes.entropy[episodes.mask != 0].mean())
        coefficient = slots.entropy.coefficient(update, entropy)
        success = float(episodes.success.float().mean())
        learned = (episodes, advantages, returns if critic else None)
        if trees is not None and settings.tree_shared_steps == "once":
            learned = once_per_node(*learned)
        stats = _update(policy, slots, *learned, coefficient, settings, update, success, order,
                        reference)
        seconds += time.perf_counter() - started
        update += 1
        valid = episodes.mask != 0
        optimal = torch.tensor([train_layouts[i].optimal for i in chosen],
                               device=device)[group_ids]
        won = episodes.success
        metrics = {
            **stats,
            "train/success": success,
            "train/return": float(episodes.rewards.sum(dim=1).mean()),
            "train/episode_length": float(episodes.lengths.float().mean()),
            "train/path_ratio": (float((optimal[won] / episodes.lengths[won]).mean())
                                 if bool(won.any()) else math.nan),
            "train/rollout_entropy": entropy,
            "adv/mean": float(advantages[valid].mean()),
            "adv/std": float(advantages[valid].std()) if played > 1 else math.nan,
            "adv/zero_fraction": float((advantages[valid] == 0).float().mean()),
            "method/entropy_coef": coefficient,
            "batch/prompts": float(m), "batch/group_size": float(g),
            "cost/env_steps": float(env_steps), "cost/samples": float(env_steps),
            "cost/updates": float(update), "time/wall_seconds": seconds,
            "time/env_steps_per_second": env_steps / seconds if seconds > 0 else math.nan,
        }
        last = update == budget.steps or budget.spent(env_steps, seconds)
        if update % settings.eval_every == 0 or last:  # the last update always
            metrics["eval/success"] = float(play(evaluation, policy, None).success.float()
                                            .mean())
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
            m, g = _reshape(wanted, m, g, settings.batch_axis)
    if "eval/success" not in metrics:  # stopped between evaluations: measure where it ended
        final = {"eval/success": float(play(evaluation, policy, None).success.float().mean())}
        metrics |= final
        log(update, final)
    return {**metrics, "steps": update, "diverged": diverged, "env_steps": env_steps,
            "device": str(device)}


def _reshape(samples: int, m: int, g: int, axis: str) -> tuple[int, int]:
    """(M, G) for a batch of about ``samples`` rollouts, changing only ``axis``: the instances
    (M = samples // G, at least 1) or the group size (G = samples // M, at least 1)."""
    if axis == "group_size":
        return m, max(1, samples // m)
    return max(1, samples // g), g


def _update(policy: Policy, slots, episodes: Episodes, advantages: torch.Tensor,
            returns: torch.Tensor | None, coefficient: float, settings: AgentSettings,
            update: int, success: float, order: torch.Generator,
            reference: Policy | None = None) -> dict[str, float]:
    """``epochs`` x ``minibatches`` clipped policy-gradient steps over the played steps (with
    ``returns``: the value head regressed on them too; with a ``reference``, the KL penalty
    ``kl_coef`` * mean_t kl(log pi(a_t|s_t), log pi_ref(a_t|s_t)) added and ``train/kl_ref``
    logged)."""
    valid = episodes.mask != 0
    obs, actions = episodes.obs[valid], episodes.actions[valid]
    old = episodes.log_probs[valid]
    ref = None if reference is None else ref_log_probs_of(reference, episodes)[valid]
    adv = advantages[valid].to(old.dtype)
    targets = None if returns is None else returns[valid].to(old.dtype)
    per_step: list[dict[str, float]] = []
    for idx in minibatch_epochs(len(adv), epochs=settings.epochs,
                                minibatches=settings.minibatches, generator=order,
                                device=adv.device):
        def loss(idx=idx):
            value, parts = _loss(policy, obs[idx], actions[idx], old[idx], adv[idx],
                                 coefficient, slots.entropy, settings,
                                 None if ref is None else ref[idx])
            if targets is not None:
                value_loss = 0.5 * ((policy.value(obs[idx]) - targets[idx]) ** 2).mean()
                value = value + settings.value_coef * value_loss
                parts["train/value_loss"] = float(value_loss.detach())
            return value, parts

        stats = policy_step(slots.optimizer, loss, params=list(policy.parameters()),
                            max_grad_norm=settings.max_grad_norm, update=update,
                            episodic_return=success)
        per_step.append(stats)
    return mean_over_steps(per_step)


def _loss(policy, obs, actions, old, adv, coefficient, entropy_slot,
          settings: AgentSettings, ref=None):
    clip = settings.clip
    log_probs, entropy = policy.evaluate(obs, actions)
    row = (-1, 1)  # the loss and the hook see (B, T) tensors: one row per step, T = 1
    adjusted = entropy_slot.adjust_policy_loss(
        log_probs=log_probs.view(row), old_log_probs=old.view(row), advantages=adv.view(row),
        mask=torch.ones_like(adv).view(row), entropy=entropy.view(row), clip=clip)
    pg_loss, pg_stats = ppo_clip_loss(
        log_probs.view(row), old.view(row), adv.view(row), adjusted.mask,
        clip_low=float(adjusted.clip_low), clip_high=float(adjusted.clip_high),
        agg="token-mean", weight=adjusted.weight)
    entropy_mean = entropy.mean()
    loss = pg_loss - coefficient * entropy_mean + adjusted.extra_loss
    with torch.no_grad():
        parts = {"train/policy_loss": float(pg_loss), "train/entropy": float(entropy_mean),
                 **{f"train/{k}": pg_stats[k] for k in ("approx_kl", "clip_frac_low",
                                                        "clip_frac_high", "clip_frac")},
                 **adjusted.metrics}
    if ref is not None:  # tracked whenever a reference is kept, in the loss when kl_coef > 0
        kl = kl_penalty(log_probs, ref, settings.kl_kind).mean()
        if settings.kl_coef > 0:
            loss = loss + settings.kl_coef * kl
        parts["train/kl_ref"] = float(kl.detach())
    return loss, parts
