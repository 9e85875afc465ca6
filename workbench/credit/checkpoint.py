"""The fixed policy a credit study measures: trained by the agent network loop exactly as
``workbench run TASK`` trains it (the same instances, initial weights, streams, slots and
environment), for ``updates`` updates, or the initial policy at 0; and its action
probabilities looked up once per observed state.

Retrained on every call (tens of updates take seconds on a CPU), so nothing stale is reused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from workbench.common import seeds
from workbench.credit.plan import CreditPlan
from workbench.testbeds import Budget, get_task
from workbench.testbeds.agent.environment import AgentEnv, EnvFactory, Instance
from workbench.testbeds.agent.loop import AgentSettings, train
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.task import AgentTask
from workbench.testbeds.base import cpu_threads


@dataclass
class Checkpoint:
    policy: Policy
    metrics: dict  # the training's final metrics (empty for the initial policy)


def agent_task(plan: CreditPlan) -> AgentTask:
    return get_task(plan.spec.task.name)()


def train_checkpoint(plan: CreditPlan, device: torch.device) -> Checkpoint:
    """The policy after ``checkpoint.updates`` updates of the checkpoint's methods (the body
    of ``AgentTask.run``, keeping the policy; global RNG state is left as it was)."""
    task, params, seed = agent_task(plan), plan.task_params, plan.spec.checkpoint.seed
    with cpu_threads(device, params.cpu_threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeds.int_seed(seed, "global"))  # as the engine and `run` do
        train_instances = [task.instance(params, 0, i) for i in range(params.train_instances)]
        eval_instances = [task.instance(params, 1, i) for i in range(params.eval_instances)]
        probe = task.environment(train_instances[:1], params.max_steps)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seeds.int_seed(seed, "init"))
            policy = Policy(probe.obs_dim, probe.n_actions, params.hidden, params.layers,
                            plan.critic)
        policy = policy.to(device)
        metrics: dict = {}
        if plan.spec.checkpoint.updates > 0:
            metrics = train(train_instances, eval_instances, policy, plan.checkpoint_methods,
                            AgentSettings.from_flat(params), max_steps=params.max_steps,
                            budget=Budget(steps=plan.spec.checkpoint.updates), seed=seed,
                            log=lambda step, values: None, device=device,
                            make_env=task.environment, make_judge=task.judge)
    policy.eval()
    return Checkpoint(policy, metrics)


def held_out(plan: CreditPlan) -> list[Instance]:
    """The study's instances: indices 0 .. instances - 1 of the held-out split."""
    task = agent_task(plan)
    return [task.instance(plan.task_params, 1, i) for i in range(plan.spec.instances)]


def memo_policy(policy: Policy, instances: Sequence[Instance], make_env: EnvFactory,
                max_steps: int, device: torch.device) -> Callable[[AgentEnv], torch.Tensor]:
    """probs_of(env) for ``ground_truth``: pi's probabilities of every row, the network run
    once per observed state and remembered by its anchor key (rows with equal anchor keys
    observe the same: ``AgentEnv.anchor_keys``). A state not seen before is observed in a
    small environment of one row per such state (``instances[id]``, ``id`` the row's instance
    id), restored there, so a million continuation rows cost neither a million observations
    nor a million forward passes per step."""
    known = torch.empty(0, dtype=torch.long, device=device)  # sorted anchor keys
    table = torch.empty(0, device=device)  # their probabilities, in that order

    def probs_of(env: AgentEnv) -> torch.Tensor:
        nonlocal known, table
        keys, where = torch.unique(env.anchor_keys(), return_inverse=True)
        new = ~torch.isin(keys, known)
        if bool(new.any()):
            first = torch.full((len(keys),), len(where), device=where.device)
            first = first.scatter_reduce(0, where, torch.arange(len(where), device=where.device),
                                         reduce="amin")
            rows = first[new]
            ids = env.instance_ids[rows].tolist()  # the index into ``instances`` of each row
            probe = make_env([instances[i] for i in ids], max_steps, device, instance_ids=ids)
            probe.set_state(env.get_state()[rows])
            with torch.no_grad():
                found = policy.distribution(probe.observe()).probs
            merged = torch.cat([known, keys[new]])
            order = torch.argsort(merged)
            known = merged[order]
            table = torch.cat([table.view(-1, found.shape[1]), found])[order]
        return table[torch.searchsorted(known, keys)][where]

    return probs_of
