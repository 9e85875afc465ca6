"""The fixed policy a credit study measures: trained by the key-door network loop exactly as
``workbench run keydoor`` trains it (the same instances, initial weights, streams and slots),
for ``updates`` updates, or the initial policy at 0; and its action probabilities as a table.

Retrained on every call (tens of updates take seconds on a CPU), so nothing stale is reused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from workbench import seeds
from workbench.credit.plan import CreditPlan
from workbench.testbeds import Budget
from workbench.testbeds.agent.keydoor import MOVES, KeyDoor, Layout, generate
from workbench.testbeds.agent.loop import AgentSettings, train
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.base import cpu_threads


@dataclass
class Checkpoint:
    policy: Policy
    metrics: dict  # the training's final metrics (empty for the initial policy)


def train_checkpoint(plan: CreditPlan, device: torch.device) -> Checkpoint:
    """The policy after ``checkpoint.updates`` updates of the checkpoint's methods (the body
    of ``KeyDoorTask.run``, keeping the policy; global RNG state is left as it was)."""
    params, seed = plan.task_params, plan.spec.checkpoint.seed
    with cpu_threads(device, params.cpu_threads), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeds.int_seed(seed, "global"))  # as the engine and `run` do
        train_layouts = [generate(params.instance_seed, 0, i, params.size,
                                  params.obstacle_density)
                         for i in range(params.train_instances)]
        eval_layouts = [generate(params.instance_seed, 1, i, params.size,
                                 params.obstacle_density)
                        for i in range(params.eval_instances)]
        obs_dim = KeyDoor(train_layouts[:1], params.max_steps).obs_dim
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seeds.int_seed(seed, "init"))
            policy = Policy(obs_dim, len(MOVES), params.hidden, params.layers, plan.critic)
        policy = policy.to(device)
        metrics: dict = {}
        if plan.spec.checkpoint.updates > 0:
            metrics = train(train_layouts, eval_layouts, policy, plan.checkpoint_methods,
                            AgentSettings.from_flat(params), max_steps=params.max_steps,
                            budget=Budget(steps=plan.spec.checkpoint.updates), seed=seed,
                            log=lambda step, values: None, device=device)
    policy.eval()
    return Checkpoint(policy, metrics)


def held_out(plan: CreditPlan) -> list[Layout]:
    """The study's instances: indices 0 .. instances - 1 of the held-out split."""
    p = plan.task_params
    return [generate(p.instance_seed, 1, i, p.size, p.obstacle_density)
            for i in range(plan.spec.instances)]


def probability_table(policy: Policy, layouts: list[Layout], device: torch.device
                      ) -> torch.Tensor:
    """(instances, 2, size, size, 4): pi's probabilities in every (key held, row, column) of
    every instance (what a row observes is exactly that: ``KeyDoor.observe``)."""
    size = layouts[0].size
    cells = [(key, r, c) for key in (0, 1) for r in range(size) for c in range(size)]
    env = KeyDoor([layout for layout in layouts for _ in cells], 1, device)
    state = torch.tensor([[r, c, key, 0, 0] for _ in layouts for key, r, c in cells])
    env.set_state(state)
    with torch.no_grad():
        probs = policy.distribution(env.observe()).probs
    return probs.view(len(layouts), 2, size, size, len(MOVES))


def table_policy(table: torch.Tensor) -> Callable[[KeyDoor], torch.Tensor]:
    """probs_of(env) for ``ground_truth``: each row's probabilities looked up by its instance
    id (an index into ``table``), key flag and cell."""

    def probs_of(env: KeyDoor) -> torch.Tensor:
        return table[env.instance_ids, env.has_key.long(), env.pos[:, 0], env.pos[:, 1]]

    return probs_of
