"""The agent testbed's task: ``keydoor``, the key-door gridworld (``keydoor``) played by the
network loop (``loop``), with the step-level advantage inputs the estimators need.

Training instances are indices 0 .. train_instances - 1 of split 0 under ``instance_seed``,
the held-out ones indices 0 .. eval_instances - 1 of split 1 (``keydoor.generate``): the same
for every run seed, so seeds differ in initial weights, instance order and actions only.
"""

from __future__ import annotations

import torch
from pydantic import Field

from workbench import seeds
from workbench.testbeds.agent.keydoor import MOVES, KeyDoor, generate
from workbench.testbeds.agent.loop import AgentSettings, train
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.base import Task, TaskParams, cpu_threads

# the advantage slot's inputs this loop gives (``loop.Episodes.advantage_inputs``); values and
# next_values come from a value head the policy gets when the advantage method reads them,
# mc_values from continuations of the states the method names (``loop.train``); tree_ids and
# node_ids describe the trees of tree sampling (independent rollouts: one leaf each)
ADVANTAGE_INPUTS = frozenset({"rewards", "mask", "group_ids", "anchor_ids", "dones",
                              "terminated", "values", "next_values", "old_log_probs",
                              "mc_values", "tree_ids", "node_ids"})


class KeyDoorParams(TaskParams, AgentSettings):
    """Flat keys: the loop's knobs (``AgentSettings``) and the task's own."""

    size: int = Field(6, ge=5, le=32, description="grid side, walls included")
    obstacle_density: float = Field(0.1, ge=0.0, le=0.5)
    max_steps: int = Field(30, ge=1, le=10_000, description="moves before an episode ends")
    train_instances: int = Field(256, ge=1, le=1_000_000)
    eval_instances: int = Field(64, ge=1, le=100_000)
    instance_seed: int = Field(0, ge=0, description="draws the instances (not the run seed)")
    hidden: int = Field(128, ge=1, le=4096)
    layers: int = Field(2, ge=1, le=8)
    cpu_threads: int | None = Field(1, ge=1, le=1024, description="torch threads on the CPU")


class KeyDoorTask(Task):
    name = "keydoor"
    description = ("key-door gridworld: G rollouts per instance, sparse reward, recurring "
                   "states for step-level advantages (critic-free)")
    slots = ("step_size", "batch_size", "entropy", "advantage")
    default_methods = {"step_size": "adam", "batch_size": "constant", "entropy": "constant",
                       "advantage": "grpo"}
    provides = frozenset({"closure", "rl_stats"}) | ADVANTAGE_INPUTS
    Params = KeyDoorParams
    metrics = {"eval/success": "maximize", "train/success": "maximize",
               "train/return": "maximize", "train/path_ratio": "maximize",
               "train/episode_length": "minimize", "train/entropy": "maximize",
               "train/policy_loss": "minimize", "train/value_loss": "minimize",
               "train/approx_kl": "minimize",
               "train/clip_frac": "minimize", "train/grad_norm": "minimize",
               "adv/std": "minimize", "adv/zero_fraction": "minimize",
               "method/step_size": "maximize", "method/entropy_coef": "minimize",
               "time/env_steps_per_second": "maximize"}
    default_objective = "eval/success"

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            train_layouts = [generate(params.instance_seed, 0, i, params.size,
                                      params.obstacle_density)
                             for i in range(params.train_instances)]
            eval_layouts = [generate(params.instance_seed, 1, i, params.size,
                                     params.obstacle_density)
                            for i in range(params.eval_instances)]
            obs_dim = KeyDoor(train_layouts[:1], params.max_steps).obs_dim
            advantage = methods["advantage"]
            critic = bool({"values", "next_values"}
                          & set(advantage.requirements(advantage.params)))
            with torch.random.fork_rng(devices=[]):  # default init draws from the global RNG
                torch.manual_seed(seeds.int_seed(seed, "init"))
                policy = Policy(obs_dim, len(MOVES), params.hidden, params.layers, critic)
            policy = policy.to(device)
            return train(train_layouts, eval_layouts, policy, methods,
                         AgentSettings.from_flat(params), max_steps=params.max_steps,
                         budget=budget, seed=seed, log=log, device=device)
