"""Supervised warm-up of the turn loop's language model on noisy optimal demonstrations, cached.

Demonstrations (``demonstrations``): every training instance is played once by a noisy expert
in a batched environment; at each turn, with probability ``noise`` the expert takes a uniformly
random action, otherwise the first action of a shortest plan from the state reached
(``optimal_actions``: breadth-first search, re-planned every turn, so a random step is
followed by the best way on from where it led). Each turn gives one example: the turn's prompt
(``turns.prompt_text``) and the action's text. The noisy actions are kept as examples, so the
warm-up policy imitates the noisy expert: its samples explore.

``warm_up`` teacher-forces ``<bos> prompt action <eos>`` with the cross-entropy on the action
tokens and ``<eos>`` only (``rlvr.warmup.train_supervised``: AdamW, constant learning rate
after a linear warm-up, clipped gradients, batches from a named seed stream), and every
``eval_every`` steps measures the greedy policy's success on ``N_VALIDATION`` validation
instances (split 2, never trained or evaluated on by the RL stage); it stops at the first
check where that reaches ``target``, or after ``max_steps``. A low target gives what the RL
stage needs: a weak but non-zero starting policy.

The checkpoint is saved under ``$WORKBENCH_CACHE/agent-lm-warmup/<key>``, where ``key``
hashes everything that determines the weights (``VERSION``, the task and its instance
parameters, the demonstrations' noise and seed, the model config, the cap, target, check
interval, batch size, learning rate and the tokenizer's vocabulary), written atomically
(``rlvr.warmup.save_checkpoint``); a later call with the same settings loads it without
training (``rlvr.warmup.cache_root``, ``warmup_key``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workbench.common import seeds
from workbench.testbeds.agent.environment import EnvFactory, Instance
from workbench.testbeds.agent_lm.settings import TurnSettings
from workbench.testbeds.agent_lm.turns import evaluate, prompt_text
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.model import ModelConfig, build_model
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer, char_vocab
from workbench.testbeds.rlvr.warmup import (
    LR_WARMUP_STEPS,
    METADATA_FILE,
    LogFn,
    cache_root,
    save_checkpoint,
    train_supervised,
    warmup_key,
)

VERSION = 1  # bump when the demonstrations or the training procedure change
N_VALIDATION = 32
VALIDATION_SPLIT = 2


@dataclass(frozen=True)
class Demonstration:
    """One teacher-forced example: what ``train_supervised`` reads."""

    prompt: str
    solution: str


def demonstrations(instances: Sequence[Instance], make_env: EnvFactory, max_steps: int,
                   noise: float, rng: np.random.Generator) -> list[Demonstration]:
    """One noisy expert episode on each instance (see the module docstring), turn by turn."""
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be in [0, 1], got {noise}")
    env = make_env(instances, max_steps)
    examples: list[Demonstration] = []
    while not bool(env.done.all()):
        actions = torch.zeros(env.num_envs, dtype=torch.long)
        for row in (~env.done).nonzero().squeeze(1).tolist():
            best = env.optimal_actions(row)
            if rng.random() < noise or not best:
                action = int(rng.integers(env.n_actions))
            else:
                action = best[0]
            actions[row] = action
            examples.append(Demonstration(prompt_text(env, row), env.action_text(row, action)))
        env.step(actions)
    return examples


def warm_up(task: str, instance_params: Mapping[str, Any], train_instances: Sequence[Instance],
            validation_instances: Sequence[Instance], make_env: EnvFactory, *, max_steps: int,
            model_config: ModelConfig, noise: float, steps: int, target: float | None,
            eval_every: int, batch_size: int, lr: float, seed: int,
            cache_dir: str | Path | None = None, device: str | torch.device = "cpu",
            log: LogFn | None = None) -> Path:
    """The directory of the warm-up checkpoint for these settings, training it first when the
    cache does not hold it (``instance_params``: whatever determines ``train_instances`` and
    ``validation_instances``, for the key)."""
    if target is not None and not 0 < target <= 1:
        raise ValueError(f"target must be in (0, 1] or None, got {target}")
    settings = {
        "version": VERSION, "task": task, "instances": dict(instance_params),
        "max_steps": max_steps, "model_config": model_config, "noise": noise, "steps": steps,
        "target": target, "eval_every": eval_every if target is not None else None,
        "batch_size": batch_size, "lr": lr, "lr_warmup_steps": LR_WARMUP_STEPS, "seed": seed,
        "n_train": len(train_instances), "n_validation": len(validation_instances),
        "vocab": char_vocab(),
    }
    path = cache_root(cache_dir) / "agent-lm-warmup" / warmup_key(settings)
    if (path / METADATA_FILE).is_file():
        return path

    started = time.perf_counter()
    examples = demonstrations(train_instances, make_env, max_steps, noise,
                              seeds.numpy_generator(seed, "demonstrations"))
    tokenizer = build_char_tokenizer()
    model = build_model(model_config, tokenizer).to(device)
    backend = make_backend("hf", model, tokenizer, None, device)
    validation = make_env(validation_instances, max_steps, device)
    curve: list[dict[str, float]] = []

    def reached(step: int) -> bool:
        success = evaluate(validation, model, tokenizer, backend,
                           TurnSettings())["eval/success"]
        curve.append({"step": step, "validation_success": success})
        if log is not None:
            log(step, {"warmup/validation_success": success})
        return target is not None and success >= target

    steps_taken, final_loss = train_supervised(
        model, tokenizer, examples, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
        log=log, check_every=eval_every if target is not None else 0, stop=reached)
    if not curve or curve[-1]["step"] != steps_taken:
        reached(steps_taken)
    reached_target = target is None or curve[-1]["validation_success"] >= target
    if not reached_target:
        warnings.warn(f"the {task} language-model warm-up stopped at its cap of {steps} steps "
                      f"with validation success {curve[-1]['validation_success']:.3f}, short "
                      f"of its target {target} (raise the cap or lower the target)",
                      RuntimeWarning, stacklevel=2)
    metadata = {
        **{k: v.model_dump(mode="json") if hasattr(v, "model_dump") else v
           for k, v in settings.items()},
        "steps_taken": steps_taken, "reached_target": reached_target,
        "validation_success": curve[-1]["validation_success"], "validation_curve": curve,
        "n_examples": len(examples), "final_train_loss": final_loss,
        "train_seconds": time.perf_counter() - started,
        "n_parameters": sum(p.numel() for p in model.parameters()),
    }
    save_checkpoint(path, model, tokenizer, metadata)
    return path
