"""One group size G of a credit study, for one sampler: the checkpoint's rows of every
held-out instance, the advantages of the estimators measured on them, sampled steps, and each
sampled step's Monte Carlo advantage for every N.

Each estimator is measured on steps of the sampler it trains with (``plan.sampler_of``), so
the estimators are grouped by sampler and each sampler's rows, sampled steps and Monte Carlo
continuations are played once per G (``sample_groups``: one ``GroupSample`` per sampler):

- ``independent`` (every estimator without a tree sampler): the checkpoint plays each
  of the I instances G times (``episodes.play``);
- ``segments`` (an estimator whose reference grows SPO-tree's trees: ``spo_tree``): the rows
  of an instance are the leaves of one tree branching every ``segment_length`` steps
  (``tree.play_segment_trees``, the task's ``segment_branching``, whose product must be G; at
  most G rows, fewer where episodes end early);
- ``tree`` (an estimator whose reference grows Tree-GRPO's trees: ``tree_grpo``): the G rows
  of an instance are the kept leaves' paths of Tree-GRPO's trees (``tree.play_trees``, shape
  ``TreeShape.of`` the task's tree_count, tree_expansions and tree_rounds at G), a step on a
  shared prefix in each row through it, as the loss counts it under ``tree_shared_steps: per_leaf``.

1. Every estimator of the sampler gets the loop's inputs (``episode_batch``, group
   = instance; the task's rubric judge's annotations where an estimator reads them, independent
   rows only) through the advantage family's caller side: ``compute_advantages`` (the inputs it
   requires). One that reads ``mc_values`` (``spo_chain``) first gets them as the training
   loop gives them (``episodes.mc_values_of``: its ``value_request``'s states restored and played
   on by the checkpoint), actions from its own stream. The environment steps each estimator
   costs (``env_steps``) are the sampler's played steps (a tree's shared prefix once, pruned
   branches too) plus its own continuations.
2. From each instance's (row, step) pairs, K (``steps_per_instance``) are drawn uniformly
   without replacement (with replacement only where the instance played fewer than K).
3. Each drawn step's state (``Episodes.states``: the environment's state before the step) is
   restored in 2 x max(N) rows (``ground_truth.q_and_v_returns``): max(N) continuations take the
   step's action, max(N) follow pi. For each N, the first N of each give A_MC = mean(Q returns)
   - mean(V returns) and its standard error (the N are nested, so the estimates for different N
   share their draws).
4. How far A_MC itself is from the truth at N: its split-half reliability, the Spearman
   correlation r of the A_MC of the first and of the next N // 2 continuations over the
   sampled steps, stepped up to N by Spearman-Brown (2 r / (1 + r); 0 where r <= 0). A
   perfect estimator's rank correlation with A_MC is about its square root at most.

Streams, ``stream(seed, "rollouts", G, *keys)`` (``STREAMS``): independent rows 0, their steps 1,
their continuations 2; tree rows' actions 5, their branches 6, their steps 7, their
continuations 8; segment-tree rows' actions 9, their steps 10, their continuations 11; the
``mc_values`` continuations of the estimator at position e of ``estimators`` (4, e). (3, N)
is the bootstrap's (``entry``). A sampler's draws do not depend on which other estimators the
spec lists.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from workbench.common import seeds
from workbench.credit import measures
from workbench.credit.checkpoint import agent_task, memo_policy
from workbench.credit.plan import (
    INDEPENDENT,
    RUBRIC_INPUTS,
    SEGMENTS,
    TREE,
    CreditPlan,
    Estimator,
    tree_settings,
)
from workbench.families import AdvantageBatch, compute_advantages
from workbench.testbeds.agent.environment import Instance
from workbench.testbeds.agent.episodes import Episodes, mc_values_of, play
from workbench.testbeds.agent.ground_truth import q_and_v_returns
from workbench.testbeds.agent.loop import with_step_inputs
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.tree import (
    SegmentShape,
    TreeShape,
    play_segment_trees,
    play_trees,
)
from workbench.testbeds.shared.advantage_batch import episode_batch

# sampler -> purpose -> the keys after G of its stream(seed, "rollouts", G, ...)
STREAMS: dict[str, dict[str, tuple[int, ...]]] = {
    INDEPENDENT: {"rollouts": (0,), "steps": (1,), "continuations": (2,)},
    TREE: {"rollouts": (5,), "branches": (6,), "steps": (7,), "continuations": (8,)},
    SEGMENTS: {"rollouts": (9,), "steps": (10,), "continuations": (11,)},
}
MC_VALUES = 4  # stream(seed, "rollouts", G, 4, e): estimator e's mc_values continuations


@dataclass
class GroupSample:
    """The K sampled steps of each of I instances for one G and one sampler, as (I, K)
    arrays, and the rows they were drawn from."""

    group_size: int
    sampler: str
    estimates: dict[str, np.ndarray]  # estimator label -> its advantage of each step
    monte_carlo: dict[int, np.ndarray]  # N -> A_MC of each step
    standard_error: dict[int, np.ndarray]  # N -> A_MC's standard error
    reliability: dict[int, float]  # N -> A_MC's split-half reliability (step 4)
    states: np.ndarray  # (I, K, S): the environment's get_state before each step
    actions: np.ndarray  # (I, K)
    played: int  # steps the sampler played for the I instances
    success: float  # its rows' success rate
    env_steps: dict[str, int]  # estimator label -> played + its own continuations
    episodes: Episodes  # the rows, I x G, instance by instance
    rows: np.ndarray  # (I, K) the row of each sampled step
    steps: np.ndarray  # (I, K) its step within the row


def sample_groups(plan: CreditPlan, policy: Policy, instances: list[Instance],
                  group_size: int, device: torch.device) -> list[GroupSample]:
    """One ``GroupSample`` per sampler the plan's estimators are measured on."""
    samplers = dict.fromkeys(e.sampler for e in plan.estimators)
    return [sample_group(plan, policy, instances, group_size, device, sampler)
            for sampler in samplers]


def sample_group(plan: CreditPlan, policy: Policy, instances: list[Instance],
                 group_size: int, device: torch.device, sampler: str = INDEPENDENT
                 ) -> GroupSample:
    """The estimators measured on ``sampler``'s rows, on its rows at G = ``group_size``."""
    s, g, count = plan.spec, group_size, len(instances)
    task, max_steps = agent_task(plan), plan.task_params.max_steps
    mine = [(e, i) for i, e in enumerate(plan.estimators) if e.sampler == sampler]
    stream = STREAMS[sampler]

    def torch_stream(purpose: str) -> torch.Generator:
        return seeds.torch_generator(s.seed, "rollouts", g, *stream[purpose], device=device)

    if sampler == TREE:
        episodes, played = play_trees(
            instances, list(range(count)), TreeShape.of(tree_settings(plan.task_params, g)),
            policy, torch_stream("rollouts"),
            seeds.numpy_generator(s.seed, "rollouts", g, *stream["branches"]),
            max_steps=max_steps, device=device, make_env=task.environment, values=plan.critic)
    elif sampler == SEGMENTS:
        episodes, played = play_segment_trees(
            instances, list(range(count)),
            SegmentShape.of(tree_settings(plan.task_params, g, SEGMENTS)), policy,
            torch_stream("rollouts"), max_steps=max_steps, device=device,
            make_env=task.environment, values=plan.critic)
    else:
        env = task.environment([instance for instance in instances for _ in range(g)],
                               max_steps, device,
                               instance_ids=[i for i in range(count) for _ in range(g)])
        judged = any(RUBRIC_INPUTS & e.method.requirements(e.method.params) for e, _ in mine)
        episodes = play(env, policy, torch_stream("rollouts"), values=plan.critic,
                        judge=task.judge if judged else None)
        played = int(episodes.mask.sum())
    groups = (episodes.groups if episodes.groups is not None  # row -> instance
              else torch.arange(count, device=device).repeat_interleave(g))
    batch = episode_batch(episodes, groups)
    advantages, env_steps = {}, {}
    for estimator, position in mine:
        advantages[estimator.label], continued = _advantages(
            plan, estimator, position, episodes, batch, instances, policy, g, device)
        env_steps[estimator.label] = played + continued

    rows, steps = _draw_steps(episodes.mask.cpu().numpy() != 0, groups.cpu().numpy(), count,
                              s.steps_per_instance,
                              seeds.numpy_generator(s.seed, "rollouts", g, *stream["steps"]))
    rows_t, steps_t = torch.as_tensor(rows), torch.as_tensor(steps)
    states = episodes.states.cpu()[rows_t, steps_t]
    actions = episodes.actions.cpu()[rows_t, steps_t]
    instance = groups.cpu().numpy()[rows]
    n = max(s.continuations)
    probs_of = memo_policy(policy, instances, task.environment, max_steps, device)
    q, v = q_and_v_returns([instances[i] for i in instance], probs_of, max_steps,
                           states, actions, n, torch_stream("continuations"),
                           instance_ids=instance.tolist(), device=device,
                           make_env=task.environment)
    shape = (count, s.steps_per_instance)
    monte_carlo, standard_error, reliability = {}, {}, {}
    for k in s.continuations:
        qk, vk = q[:, :k], v[:, :k]
        monte_carlo[k] = (qk.mean(dim=1) - vk.mean(dim=1)).numpy().reshape(shape)
        standard_error[k] = torch.sqrt(qk.var(dim=1) / k + vk.var(dim=1) / k).numpy() \
            .reshape(shape)
        reliability[k] = split_half_reliability(q[:, :k].numpy(), v[:, :k].numpy())
    return GroupSample(
        g, sampler,
        {label: a[rows_t, steps_t].numpy().reshape(shape) for label, a in advantages.items()},
        monte_carlo, standard_error, reliability, states.numpy().reshape(*shape, -1),
        actions.numpy().reshape(shape), played, float(episodes.success.float().mean()),
        env_steps, episodes, rows.reshape(shape), steps.reshape(shape))


def _advantages(plan: CreditPlan, estimator: Estimator, position: int, episodes: Episodes,
                batch: AdvantageBatch, instances: list[Instance], policy: Policy,
                g: int, device: torch.device, keys: tuple[int, ...] = ()
                ) -> tuple[torch.Tensor, int]:
    """The estimator's advantages of every row (on the CPU, float64) and the environment
    steps its ``mc_values`` took (0 for one that reads none; their stream ``(4, e, *keys)``
    after G)."""
    method = estimator.method
    needs = method.requirements(method.params)
    continued = 0
    if "mc_values" in needs:
        generator = seeds.torch_generator(plan.spec.seed, "rollouts", g, MC_VALUES, position,
                                          *keys, device=device)
        mc_values, continued = mc_values_of(
            method, episodes, batch.group_ids, instances, list(range(len(instances))),
            policy, generator, max_steps=plan.task_params.max_steps, device=device,
            make_env=agent_task(plan).environment)
        batch = replace(batch, mc_values=mc_values)
    batch = with_step_inputs(batch, needs, policy, episodes, agent_task(plan).environment,
                             instances, max_steps=plan.task_params.max_steps, device=device)
    out, _ = compute_advantages(method, batch, needs)
    return out.detach().double().cpu(), continued


def _draw_steps(valid: np.ndarray, groups: np.ndarray, count: int, k: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(row, step) of K played steps of each instance (the rows whose group is i), instance
    by instance: uniformly without replacement among its (row, step) pairs, with replacement
    where fewer than K were played."""
    rows, steps = [], []
    for i in range(count):
        mine = np.nonzero(groups == i)[0]
        r, t = np.nonzero(valid[mine])
        picks = rng.choice(len(r), size=k, replace=len(r) < k)
        rows.append(mine[r[picks]])
        steps.append(t[picks])
    return np.concatenate(rows), np.concatenate(steps)


def split_half_reliability(q: np.ndarray, v: np.ndarray) -> float:
    """Spearman-Brown stepped-up Spearman correlation r between the A_MC of the first and of
    the next n // 2 of the (steps, n) returns ``q`` and ``v``: 2 r / (1 + r), 0 where r <= 0
    (the halves do not agree in rank), NaN where either half is constant."""
    half = q.shape[1] // 2
    first = q[:, :half].mean(axis=1) - v[:, :half].mean(axis=1)
    second = q[:, half:2 * half].mean(axis=1) - v[:, half:2 * half].mean(axis=1)
    r = float(measures.spearman(first[None], second[None])[0])
    if r != r:  # NaN: a constant half
        return r
    return 2 * r / (1 + r) if r > 0 else 0.0
