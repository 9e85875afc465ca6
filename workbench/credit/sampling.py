"""One group size G of a credit study: G rollouts of every held-out instance with the
checkpoint, every estimator's advantages on them, sampled steps, and each sampled step's Monte
Carlo advantage for every N.

1. The checkpoint plays each of the I instances G times (``loop.play``, actions from
   ``stream(seed, "rollouts", G, 0)``), and every estimator gets the loop's inputs
   (``Episodes.advantage_inputs``, group = instance; the task's rubric judge's annotations
   where an estimator reads them) through the advantage family's caller side:
   ``method.compute(**inputs it requires)``.
2. From each instance's played steps, K (``steps_per_instance``) are drawn uniformly without
   replacement (with replacement only where the instance played fewer than K steps), from
   ``stream(seed, "rollouts", G, 1)``.
3. Each drawn step's state (``Episodes.states``: the environment's state before the step) is
   restored in 2 x max(N) rows (``ground_truth.q_and_v_returns``, actions from
   ``stream(seed, "rollouts", G, 2)``): max(N) continuations take the step's action, max(N)
   follow pi. For each N, the first N of each give A_MC = mean(Q returns) - mean(V returns)
   and its standard error (the N are nested, so the estimates for different N share their
   draws).
4. How far A_MC itself is from the truth at N: its split-half reliability, the Spearman
   correlation r of the A_MC of the first and of the next N // 2 continuations over the
   sampled steps, stepped up to N by Spearman-Brown (2 r / (1 + r); 0 where r <= 0). A
   perfect estimator's rank correlation with A_MC is about its square root at most.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workbench import seeds
from workbench.credit import measures
from workbench.credit.checkpoint import agent_task, memo_policy
from workbench.credit.plan import RUBRIC_INPUTS, CreditPlan
from workbench.testbeds.agent.environment import Instance
from workbench.testbeds.agent.ground_truth import q_and_v_returns
from workbench.testbeds.agent.loop import play
from workbench.testbeds.agent.policy import Policy


@dataclass
class GroupSample:
    """The K sampled steps of each of I instances for one G, as (I, K) arrays."""

    group_size: int
    estimates: dict[str, np.ndarray]  # estimator label -> its advantage of each step
    monte_carlo: dict[int, np.ndarray]  # N -> A_MC of each step
    standard_error: dict[int, np.ndarray]  # N -> A_MC's standard error
    reliability: dict[int, float]  # N -> A_MC's split-half reliability (step 4)
    states: np.ndarray  # (I, K, S): the environment's get_state before each step
    actions: np.ndarray  # (I, K)
    played: int  # steps played by the I x G rollouts
    success: float  # the rollouts' success rate


def sample_group(plan: CreditPlan, policy: Policy, instances: list[Instance],
                 group_size: int, device: torch.device) -> GroupSample:
    s, g, count = plan.spec, group_size, len(instances)
    task, max_steps = agent_task(plan), plan.task_params.max_steps
    env = task.environment([instance for instance in instances for _ in range(g)], max_steps,
                           device, instance_ids=[i for i in range(count) for _ in range(g)])
    judged = any(RUBRIC_INPUTS & e.method.requirements(e.method.params)
                 for e in plan.estimators)
    episodes = play(env, policy, seeds.torch_generator(s.seed, "rollouts", g, 0, device=device),
                    values=plan.critic, judge=task.judge if judged else None)
    inputs = episodes.advantage_inputs(torch.arange(count, device=device).repeat_interleave(g))
    advantages = {}
    for estimator in plan.estimators:
        needs = estimator.method.requirements(estimator.method.params)
        out, _ = estimator.method.compute(**{k: v for k, v in inputs.items() if k in needs})
        advantages[estimator.label] = out.detach().double().cpu()

    rows, steps = _draw_steps(episodes.mask.cpu().numpy() != 0, count, g,
                              s.steps_per_instance, seeds.numpy_generator(s.seed, "rollouts",
                                                                          g, 1))
    rows_t, steps_t = torch.as_tensor(rows), torch.as_tensor(steps)
    states = episodes.states.cpu()[rows_t, steps_t]
    actions = episodes.actions.cpu()[rows_t, steps_t]
    instance = rows // g
    n = max(s.continuations)
    probs_of = memo_policy(policy, instances, task.environment, max_steps, device)
    q, v = q_and_v_returns([instances[i] for i in instance], probs_of, max_steps,
                           states, actions, n,
                           seeds.torch_generator(s.seed, "rollouts", g, 2, device=device),
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
        g, {label: a[rows_t, steps_t].numpy().reshape(shape) for label, a in advantages.items()},
        monte_carlo, standard_error, reliability, states.numpy().reshape(*shape, -1),
        actions.numpy().reshape(shape), int(episodes.mask.sum()),
        float(episodes.success.float().mean()))


def _draw_steps(valid: np.ndarray, count: int, g: int, k: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(row, step) of K played steps of each instance (rows i G .. (i + 1) G - 1), instance by
    instance: uniformly without replacement, with replacement where fewer than K were played."""
    rows, steps = [], []
    for i in range(count):
        r, t = np.nonzero(valid[i * g:(i + 1) * g])
        picks = rng.choice(len(r), size=k, replace=len(r) < k)
        rows.append(r[picks] + i * g)
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
