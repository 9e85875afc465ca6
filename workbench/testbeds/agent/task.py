"""The agent testbed's tasks: ``keydoor``, the key-door gridworld (``keydoor``), and
``toolcalc``, the tool-use puzzle (``toolcalc``), played by the network loop (``loop``), with
the step-level advantage inputs the estimators need. ``AgentTask`` holds what they share; each
names its environment and draws its instances.

Training instances are indices 0 .. train_instances - 1 of split 0 under ``instance_seed``,
the held-out ones indices 0 .. eval_instances - 1 of split 1 (``keydoor.generate``,
``toolcalc.generate``): the same for every run seed, so seeds differ in initial weights,
instance order and actions only.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field, model_validator

from workbench.common import seeds
from workbench.families import AdvantageBatch
from workbench.testbeds.agent import keydoor, toolcalc
from workbench.testbeds.agent.environment import EnvFactory, Instance
from workbench.testbeds.agent.keydoor import KeyDoor
from workbench.testbeds.agent.loop import AgentSettings, train
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.rubric import JudgeFactory, KeyDoorJudge
from workbench.testbeds.agent.toolcalc import ToolCalc
from workbench.testbeds.base import Task, TaskParams, cpu_threads
from workbench.testbeds.shared.advantage_batch import EPISODE_INPUTS

# the advantage slot's inputs this loop gives: what ``shared.advantage_batch.episode_batch``
# fills (values and next_values from a value head the policy gets when the advantage method
# reads them), and mc_values from continuations of the states the method names, ref_log_probs,
# hidden_states, action_ids, policy_entropy and reference_actions (a shortest solution) for a
# method that reads them (``loop.train``)
ADVANTAGE_INPUTS = EPISODE_INPUTS | AdvantageBatch.names(
    "mc_values", "ref_log_probs", "hidden_states", "action_ids", "reference_actions",
    "policy_entropy")
# a task with a rubric judge (``AgentTask.judge``) gives its annotations too
RUBRIC_INPUTS = AdvantageBatch.names("rubric", "rubric_weights")


class AgentParams(TaskParams, AgentSettings):
    """Flat keys: the loop's knobs (``AgentSettings``), the instances and the network."""

    train_instances: int = Field(256, ge=1, le=1_000_000)
    eval_instances: int = Field(64, ge=1, le=100_000)
    instance_seed: int = Field(0, ge=0, description="draws the instances (not the run seed)")
    hidden: int = Field(128, ge=1, le=4096)
    layers: int = Field(2, ge=1, le=8)
    cpu_threads: int | None = Field(1, ge=1, le=1024, description="torch threads on the CPU")


class KeyDoorParams(AgentParams):
    """The key-door task's own keys."""

    size: int = Field(6, ge=5, le=32, description="grid side, walls included")
    obstacle_density: float = Field(0.1, ge=0.0, le=0.5)
    max_steps: int = Field(30, ge=1, le=10_000, description="moves before an episode ends")


class ToolCalcParams(AgentParams):
    """The tool-use puzzle's own keys: its difficulty is the range, the number of tools and
    the optimal lengths allowed."""

    max_value: int = Field(30, ge=2, le=1000, description="values lie in 0 .. max_value")
    tools: int = Field(4, ge=1, le=64, description="tools per instance (the actions)")
    max_operand: int = Field(9, ge=2, le=100, description="largest add/sub parameter "
                                                          "(mul/div: up to 5)")
    min_optimal: int = Field(2, ge=1, le=1000, description="fewest calls an instance needs, "
                                                           "at least")
    max_optimal: int = Field(6, ge=1, le=1000, description="fewest calls an instance needs, "
                                                           "at most")
    max_steps: int = Field(12, ge=1, le=10_000, description="calls before an episode ends")

    @model_validator(mode="after")
    def _feasible(self):
        if self.min_optimal > self.max_optimal:
            raise ValueError(f"min_optimal ({self.min_optimal}) must be at most max_optimal "
                             f"({self.max_optimal})")
        if self.max_optimal > self.max_steps:
            raise ValueError(f"max_optimal ({self.max_optimal}) must be at most max_steps "
                             f"({self.max_steps}): an instance could not be solved in time")
        distinct = toolcalc.distinct_tools(self.max_operand)
        if self.tools > distinct:
            raise ValueError(f"tools ({self.tools}) must be at most {distinct}, the distinct "
                             f"tools with max_operand {self.max_operand}")
        return self


class AgentTask(Task):
    """What the agent tasks share: slots, defaults, inputs, metrics and the run. A subclass
    names its environment class (``environment``), its rubric judge if it has one (``judge``)
    and draws its instances (``instance``)."""

    environment: ClassVar[EnvFactory]
    judge: ClassVar[JudgeFactory | None] = None  # with one, provides RUBRIC_INPUTS too
    slots = ("step_size", "batch_size", "entropy", "advantage")
    default_methods = {"step_size": "adam", "batch_size": "constant", "entropy": "constant",
                       "advantage": "grpo"}
    provides = frozenset({"closure", "rl_stats"}) | ADVANTAGE_INPUTS
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

    @classmethod
    def method_problem(cls, params, method):
        """Under ``sampling: auto`` an advantage method gets its reference's tree sampler; its
        shape must then give the group (``AgentSettings.tree_sampler``)."""
        if getattr(method, "family", None) != "advantage":
            return None
        try:
            sampler = params.tree_sampler(method)
        except ValueError as err:
            return "segment_branching", f"{method.name} grows its rows by segments: {err}"
        if sampler is not None and params.batch_axis == "group_size":
            return "batch_axis", (f"{method.name} grows its rows as trees ({sampler}), whose "
                                  "shape fixes G; allowed with tree sampling: batch_axis: "
                                  "instances")
        return None

    @classmethod
    def objective_problem(cls, params, metric, methods):
        return value_loss_problem(metric, methods)

    def instance(self, params, split: int, index: int) -> Instance:
        """Instance ``index`` of ``split`` (0: train, 1: held out) under ``params``."""
        raise NotImplementedError

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            train_layouts = [self.instance(params, 0, i) for i in range(params.train_instances)]
            eval_layouts = [self.instance(params, 1, i) for i in range(params.eval_instances)]
            probe = self.environment(train_layouts[:1], params.max_steps)
            advantage = methods["advantage"]
            critic = bool(CRITIC_INPUTS & set(advantage.requirements(advantage.params)))
            with torch.random.fork_rng(devices=[]):  # default init draws from the global RNG
                torch.manual_seed(seeds.int_seed(seed, "init"))
                policy = Policy(probe.obs_dim, probe.n_actions, params.hidden, params.layers,
                                critic)
            policy = policy.to(device)
            return train(train_layouts, eval_layouts, policy, methods,
                         AgentSettings.from_flat(params), max_steps=params.max_steps,
                         budget=budget, seed=seed, log=log, device=device,
                         make_env=self.environment, make_judge=self.judge)


class KeyDoorTask(AgentTask):
    name = "keydoor"
    description = ("key-door gridworld: G rollouts per instance, sparse reward, recurring "
                   "states for step-level advantages (critic-free)")
    Params = KeyDoorParams
    environment = KeyDoor
    judge = KeyDoorJudge
    provides = AgentTask.provides | RUBRIC_INPUTS

    def instance(self, params, split, index):
        return keydoor.generate(params.instance_seed, split, index, params.size,
                                params.obstacle_density)


class ToolCalcTask(AgentTask):
    name = "toolcalc"
    description = ("tool-use puzzle: reach a target number by calling the instance's tools, "
                   "G rollouts per instance, sparse reward, recurring values")
    Params = ToolCalcParams
    environment = ToolCalc

    def instance(self, params, split, index):
        return toolcalc.generate(params.instance_seed, split, index, params.max_value,
                                 params.tools, params.max_operand, params.min_optimal,
                                 params.max_optimal)


CRITIC_INPUTS = frozenset({"values", "next_values"})  # the inputs that give the policy a value head


def value_loss_problem(metric: str, methods) -> str | None:
    """Why ``train/value_loss`` is never logged with these ``methods``: only an advantage
    method that reads ``values``/``next_values`` gives the policy a value head."""
    cls, hyperparameters = methods["advantage"]
    if metric == "train/value_loss" and not CRITIC_INPUTS & cls.requirements(hyperparameters):
        return ("only an advantage method that reads values or next_values (the policy's value "
                "head, e.g. gae) logs it")
    return None
