"""RL with verifiable rewards on a small language model (``workbench.testbeds.rlvr.loop``).

``rlvr-arith``: multi-digit addition, subtraction or multiplication (``kind``), with or without
a scratchpad; ``rlvr-countdown``: reach a target with the given numbers. Problems are generated
(``workbench.testbeds.rlvr.problems``), seeded by ``data_seed``; the held-out set never overlaps the
training prompts. The policy is, by default, a ~1 M-parameter Llama-style model trained from
scratch by a supervised warm-up on the task's solutions (cached by its settings,
``warmup``) and loaded back with ``from_pretrained``; ``model`` may instead name
any local Hugging Face model directory (e.g. a Qwen2.5-0.5B on disk) for GPU runs.
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
from pydantic import Field, model_validator

from workbench.common import seeds
from workbench.testbeds.base import Task, TaskParams, cpu_threads
from workbench.testbeds.rlvr.problems import Difficulty, splits
from workbench.testbeds.rlvr.settings import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LR,
    DEFAULT_MAX_STEPS,
    DEFAULT_TARGET,
    RLSettings,
)
from workbench.testbeds.shared.advantage_batch import COMPLETION_INPUTS


class RLVRParams(TaskParams, RLSettings):
    """Flat keys: the loop's knobs (``RLSettings``) and the task's own: the problems, the
    model and its warm-up, the rollout backend."""

    kind: Literal["add", "sub", "mul"] = "add"
    digits_min: int = Field(2, ge=1, le=12)
    digits_max: int = Field(3, ge=1, le=12)
    scratchpad: bool = False
    n_train: int = Field(4000, ge=1)
    n_eval: int = Field(200, ge=1, le=256, description="held-out prompts (greedy pass@1)")
    data_seed: int = Field(0, ge=0)
    model: str = Field("warmup", description="'warmup': the cached from-scratch model; or a "
                                             "local Hugging Face model directory")
    hidden: int = Field(128, ge=8)
    layers: int = Field(4, ge=1)
    heads: int = Field(4, ge=1)
    intermediate: int = Field(512, ge=8)
    warmup_steps: int = Field(DEFAULT_MAX_STEPS, ge=0, description="cap on the supervised "
                              "warm-up's steps (it stops earlier at warmup_target)")
    warmup_target: float | None = Field(
        DEFAULT_TARGET, gt=0, le=1, description="stop the warm-up once greedy accuracy on "
        "its validation split reaches this; None: run all warmup_steps")
    warmup_batch: int = Field(DEFAULT_BATCH_SIZE, ge=1)
    warmup_lr: float = Field(DEFAULT_LR, gt=0)
    backend: Literal["hf", "vllm"] = "hf"
    # the vllm backend's engine (vllm_backend.EngineOptions); its dtype is ``precision``'s
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="vllm: share "
                                               "of the GPU for weights and KV cache")
    vllm_max_model_len: int | None = Field(None, ge=16, description="vllm: longest prompt + "
                                           "response; None: the model config's")
    vllm_enforce_eager: bool = Field(True, description="vllm: no CUDA graphs (faster start)")
    vllm_tensor_parallel_size: int = Field(1, ge=1, description="vllm: GPUs per engine")
    vllm_sleep: bool = Field(True, description="vllm: sleep mode (level 1) while training")
    # the task's reading of the loop's knob: None derives it from the training solutions
    max_new_tokens: int | None = Field(None, ge=1, description="None: the longest training "
                                       "solution + 2 (raw), + 8 (few-shot), 256 (chat)")
    cpu_threads: int | None = Field(None, ge=1, description="torch threads on the CPU")

    def difficulty(self) -> Difficulty:
        return Difficulty(digits_min=self.digits_min, digits_max=self.digits_max,
                          scratchpad=self.scratchpad)

    @model_validator(mode="after")
    def _enough_problems(self):
        if self.digits_min > self.digits_max:
            raise ValueError(f"digits_min ({self.digits_min}) is above digits_max "
                             f"({self.digits_max})")
        if self.kind != "countdown":
            low = 0 if self.digits_min == 1 else 10 ** (self.digits_min - 1)
            distinct = (10 ** self.digits_max - low) ** 2
            if self.n_train + self.n_eval > distinct:
                raise ValueError(
                    f"n_train + n_eval = {self.n_train + self.n_eval} exceeds the {distinct} "
                    f"distinct {self.kind} problems with {self.digits_min}-{self.digits_max} "
                    "digit operands; lower n_train or raise digits_max")
        return self


def backend_options(params: RLVRParams) -> dict:
    """``make_backend``'s options for the task's backend."""
    if params.backend == "hf":
        return {"precision": params.precision}
    return {"precision": params.precision,
            "gpu_memory_utilization": params.vllm_gpu_memory_utilization,
            "max_model_len": params.vllm_max_model_len,
            "enforce_eager": params.vllm_enforce_eager,
            "tensor_parallel_size": params.vllm_tensor_parallel_size,
            "sleep": params.vllm_sleep}


class RLVRCountdownParams(RLVRParams):
    kind: Literal["countdown"] = "countdown"
    n_numbers: int = Field(3, ge=2, le=6)
    max_number: int = Field(25, ge=1, le=999)
    target_min: int = Field(1, ge=1)
    target_max: int = Field(100, ge=1)

    def difficulty(self) -> Difficulty:
        return Difficulty(scratchpad=self.scratchpad, n_numbers=self.n_numbers,
                          max_number=self.max_number, target_min=self.target_min,
                          target_max=self.target_max)


class RLVRArith(Task):
    name = "rlvr-arith"
    description = ("RL with verifiable rewards: a small LM (warm-up from scratch, or any local "
                   "HF model) on generated arithmetic; GRPO-family advantages")
    slots = ("step_size", "batch_size", "entropy", "advantage")
    default_methods = {"step_size": "adam_schedule", "batch_size": "constant",
                       "entropy": "none", "advantage": "grpo"}
    provides = frozenset({"closure", "rl_stats", "group_rewards"}) | COMPLETION_INPUTS
    Params = RLVRParams
    metrics = {"eval/accuracy": "maximize", "eval/pass@8": "maximize",
               "eval/pass@1_sampled": "maximize", "train/reward": "maximize",
               "train/accuracy": "maximize", "train/entropy": "maximize",
               "train/kl_ref": "minimize", "train/response_length": "minimize",
               "train/response_length_correct": "minimize",
               "train/response_length_incorrect": "minimize",
               "eval/response_length_correct": "minimize",
               "eval/response_length_incorrect": "minimize",
               "train/zero_variance_groups": "minimize", "train/clip_frac_low": "minimize",
               "train/clip_frac_high": "minimize", "train/clip_frac": "minimize",
               "adv/std": "minimize", "method/entropy_coef": "minimize",
               "time/rollout_tokens_per_second": "maximize",
               "time/train_tokens_per_second": "maximize", "train/rollout_kl": "minimize"}
    default_objective = "eval/accuracy"

    @classmethod
    def method_problem(cls, params, method):
        """Per-prompt group sizes (a batch-size method requiring ``group_rewards``) do not
        combine with dynamic sampling, which refills whole groups of G."""
        if (getattr(method, "family", None) == "batch_size" and params.dynamic_sampling
                and "group_rewards" in method.requirements(method.resolve({}))):
            return "dynamic_sampling", (f"{method.name} sets per-prompt group sizes, which do "
                                        "not combine with dynamic_sampling: true")
        return None

    @classmethod
    def objective_problem(cls, params, metric, methods):
        """``eval/pass@8`` is logged as ``eval/pass@{eval_k}``: only when eval_k is 8."""
        if metric == "eval/pass@8" and params.eval_k != 8:
            return (f"the held-out pass@k is logged as eval/pass@{params.eval_k} "
                    "(task.params.eval_k)")
        return None

    def run(self, params, methods, *, seed, device, budget, log):
        with cpu_threads(device, params.cpu_threads):
            return self._run(params, methods, seed=seed, device=device, budget=budget, log=log)

    def _run(self, params, methods, *, seed, device, budget, log):
        # transformers on first use: listing tasks or checking a spec never imports it
        from transformers.utils import logging as transformers_logging

        from workbench.testbeds.rlvr.backend_factory import make_backend
        from workbench.testbeds.rlvr.loop import train
        from workbench.testbeds.rlvr.model import ModelConfig, load_policy
        from workbench.testbeds.rlvr.warmup import warm_up

        transformers_logging.disable_progress_bar()  # no bars from saving or loading weights
        difficulty = params.difficulty()
        train_set, held_out = splits(params.kind, params.data_seed, params.n_train,
                                     params.n_eval, difficulty)
        path = params.model
        if path == "warmup":
            config = ModelConfig(hidden=params.hidden, layers=params.layers, heads=params.heads,
                                 intermediate=params.intermediate)
            path = warm_up(params.kind, difficulty, config, max_steps=params.warmup_steps,
                           target=params.warmup_target, batch_size=params.warmup_batch,
                           lr=params.warmup_lr, seed=params.data_seed, device=device)
        # loading and the value head's construction draw initial weights from torch's global
        # RNG (then overwritten by the checkpoint or zeroed): seed it inside fork_rng
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seeds.int_seed(seed, "init"))
            policy, tokenizer = load_policy(path, device=device)
            advantage = methods["advantage"]
            value_head = None
            if "values" in advantage.requirements(advantage.params):
                value_head = torch.nn.Linear(policy.config.hidden_size, 1).to(device)
                torch.nn.init.zeros_(value_head.weight)
                torch.nn.init.zeros_(value_head.bias)
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
        # staleness: the backend samples from a frozen copy holding older weights (loop)
        sampler = (copy.deepcopy(policy).eval().requires_grad_(False) if params.staleness
                   else policy)
        longest = max(len(tokenizer(p.solution, add_special_tokens=False)["input_ids"])
                      for p in train_set)
        default_length = {"raw": longest + 2, "few-shot": longest + 8, "chat": 256}
        settings = RLSettings.from_flat(
            params, max_new_tokens=(params.max_new_tokens
                                    or default_length[params.prompt_template]))
        backend = make_backend(params.backend, sampler, tokenizer, path, device,
                               **backend_options(params))
        try:
            return train(policy, tokenizer, backend, methods, train_set, held_out, settings,
                         budget=budget, seed=seed, log=log, reference=reference,
                         value_head=value_head, device=device,
                         sampler=sampler if params.staleness else None)
        finally:
            backend.close()


class RLVRCountdown(RLVRArith):
    name = "rlvr-countdown"
    description = "RL with verifiable rewards on countdown puzzles (reach a target)"
    Params = RLVRCountdownParams


RLVR_TASKS = (RLVRArith, RLVRCountdown)
