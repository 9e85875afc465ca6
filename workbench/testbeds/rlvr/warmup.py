"""Supervised warm-up: train the small policy from scratch on generated worked solutions, once.

``warm_up`` teacher-forces ``prompt + solution + <eos>`` with the cross-entropy on the
completion tokens only (solution and ``<eos>``; prompt and padding are masked), AdamW at a
constant learning rate after a linear warm-up over the first ``LR_WARMUP_STEPS`` steps,
gradients clipped at norm 1. Every ``eval_every`` steps it measures greedy accuracy on a
validation split and stops as soon as that reaches ``target`` (or after ``max_steps``, the cap;
``target=None`` always runs the cap). The schedule does not depend on the cap, so the run up to
any step is the same whatever the cap, and where it stops is decided by the model's quality, not
by a step count.

Three disjoint problem sets come from the seed's stream (``problems.splits``): the held-out set
(``N_HELD_OUT``, the first prompts of the stream, the same ones the RL stage evaluates on), the
validation set the stopping rule reads (``N_VALIDATION``) and ``max_steps x batch_size``
training problems, each seen at most once; where the problem space is smaller than that, the
training problems are drawn with repeats instead (never a held-out or validation prompt). The
result is saved with ``save_pretrained`` (model, tokenizer and ``warmup.json``: the settings,
the steps taken, whether the target was reached, the validation curve, and the held-out greedy
accuracy, sampled pass@1 and pass@8 reached) under ``$WORKBENCH_CACHE/rlvr-warmup/<key>``
(default ``~/.cache/workbench``), where ``key`` hashes everything that determines the weights:
task, difficulty, model config, cap, target, evaluation interval, batch size, learning rate,
seed, the tokenizer's vocabulary and ``VERSION`` (not the thread count, which changes only the
last bits of the arithmetic). The directory is written under a temporary name and renamed when
complete, so a killed run never leaves a half checkpoint; a later call with the same settings
returns it without training.

Why a target and not a step count: greedy accuracy on addition jumps within a few hundred
steps (the model learns to carry) after a long flat stretch whose length is decided by
last-bit numerical differences. A fixed 1,500-step cosine schedule (``VERSION`` 1) stopped on
that jump, and the same settings gave 0.08 held-out greedy accuracy on one machine, 0.32 on
another and 0.45 on a third. At a constant 1e-3 the jump comes after 550-1,000 steps (or, for
one seed, a slower climb to step 2,000) and is followed by a long plateau near 0.45 (measured
numbers next to ``DEFAULT_TARGET``), so
stopping at the first validation accuracy above the target lands in the same band wherever the
jump falls: greedy accuracy partial and sampled pass@8 clearly higher, so the RL stage has
reward variance to exploit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    get_constant_schedule_with_warmup,
)

from workbench.common import seeds
from workbench.testbeds.rlvr.checker import is_correct
from workbench.testbeds.rlvr.model import ModelConfig, build_model, generate_completions
from workbench.testbeds.rlvr.problems import Difficulty, Problem, generate, splits
from workbench.testbeds.rlvr.settings import (  # noqa: F401  (re-exported: warmup's defaults)
    DEFAULT_BATCH_SIZE,
    DEFAULT_LR,
    DEFAULT_MAX_STEPS,
    DEFAULT_TARGET,
)
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer, char_vocab

VERSION = 3  # bump when the training procedure changes, so old cache entries are not reused
# 1: 1,500 steps of cosine decay from 3e-3; 2: constant lr, stop at a validation target;
# 3: initial weights and batch order from named seed streams (workbench.common.seeds)
DEFAULT_DIFFICULTY = Difficulty(digits_min=2, digits_max=3)
# Measured on the default model (2-3 digit addition, batch 64, constant 1e-3 after 75 steps).
# VERSION 3, 1 thread on the loaded 2-core machine: seed 0 stops after 1,000 steps (held-out
# greedy 0.320, sampled pass@1 0.220, pass@8 0.590; validation jumps from 0.05 to 0.36 over steps
# 800-1,000), seed 1 (data and initialisation) after 2,000 (0.383, 0.293, 0.840; a slow climb
# from 0.06 at step 750 to 0.37 at step 2,000), so the cap is 1.5x the longest of these.
# VERSION 2 (the same procedure before named seed streams):
# validation greedy accuracy stays under 5 % for 550-800 steps, then jumps to ~0.35 within 100-200
# steps and plateaus near 0.45 (0.40-0.51 up to step 2,100 with seed 0, 0.48-0.52 to 1,200 with
# seed 1). Stopping at 0.35: seed 0 stops after 750 steps (held-out greedy 0.344, sampled pass@1
# 0.26, pass@8 0.63), seed 1 (data and initialisation) after 850 (0.371, 0.26, 0.54), bit for bit
# the same with 1 and 2 threads; seed 0 with its initial weights perturbed by 1e-6 relative
# noise (other last bits) after 900 / 800 steps (0.328 / 0.328). Seed 0 took 100 s on one idle core
# (about 0.13 s a step, checks included; 3-8 minutes on the loaded 2-core machine).
DEFAULT_EVAL_EVERY = 50
LR_WARMUP_STEPS = 75
N_HELD_OUT = 256
N_VALIDATION = 256
METADATA_FILE = "warmup.json"

LogFn = Callable[[int, Mapping[str, float]], None]


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir``, else ``$WORKBENCH_CACHE``, else ``~/.cache/workbench``."""
    if cache_dir is not None:
        return Path(cache_dir)
    return Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench"))


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


def warmup_key(settings: Mapping[str, Any]) -> str:
    """A short stable hash of the settings that determine a warm-up checkpoint."""
    text = json.dumps({k: _plain(v) for k, v in settings.items()}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _completion_batch(
    tokenizer: PreTrainedTokenizerBase, problems: Sequence[Problem], device: torch.device,
) -> dict[str, torch.Tensor]:
    """Right-padded ``<bos> prompt solution <eos>`` with labels only on ``solution <eos>``."""
    prompts = tokenizer([p.prompt for p in problems])["input_ids"]
    solutions = tokenizer([p.solution for p in problems], add_special_tokens=False)["input_ids"]
    rows = [(prompt, solution + [tokenizer.eos_token_id])
            for prompt, solution in zip(prompts, solutions, strict=True)]
    width = max(len(prompt) + len(completion) for prompt, completion in rows)
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (prompt, completion) in enumerate(rows):
        end = len(prompt) + len(completion)
        input_ids[i, :end] = torch.tensor(prompt + completion)
        labels[i, len(prompt):end] = torch.tensor(completion)
        attention_mask[i, :end] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device),
            "labels": labels.to(device)}


def problem_sets(
    task_kind: str, difficulty: Difficulty, seed: int, n_train: int, n_validation: int = 0,
) -> tuple[list[Problem], list[Problem], list[Problem]]:
    """(train, validation, held-out): ``N_HELD_OUT`` distinct held-out problems (the first of
    the seed's stream), ``n_validation`` distinct validation problems after them, and
    ``n_train`` training problems with no held-out or validation prompt, distinct when the
    problem space has enough of them."""
    try:
        rest, held_out = splits(task_kind, seed, n_validation + n_train, N_HELD_OUT, difficulty)
        return rest[n_validation:], rest[:n_validation], held_out
    except ValueError:  # fewer distinct prompts than asked for: train with repeats
        validation, held_out = splits(task_kind, seed, n_validation, N_HELD_OUT, difficulty)
    excluded = {p.prompt for p in held_out} | {p.prompt for p in validation}
    train: list[Problem] = []
    stream_length = n_train
    while len(train) < n_train:
        stream = generate(task_kind, stream_length, seed, difficulty)
        train = [p for p in stream if p.prompt not in excluded][:n_train]
        if not train:
            raise ValueError(f"every {task_kind} problem of this difficulty is in the held-out "
                             f"set of {N_HELD_OUT} or the validation set of {n_validation}; "
                             "raise the difficulty")
        stream_length *= 2
    return train, validation, held_out


def train_supervised(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Sequence[Problem],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    log: LogFn | None = None,
    check_every: int = 0,
    stop: Callable[[int], bool] | None = None,
) -> tuple[int, float]:
    """Teacher-forced training on ``train`` (cycled, reshuffled each pass with ``seed``) for at
    most ``steps`` steps at ``lr`` after a linear warm-up over ``LR_WARMUP_STEPS``; every
    ``check_every`` steps (0: never) ``stop(step)`` is asked whether to end here. Returns the
    steps taken and the last step's loss. ``log(step, {"train/loss", "train/lr"})`` after each
    step."""
    device = model.device
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    schedule = get_constant_schedule_with_warmup(optimizer, min(LR_WARMUP_STEPS, steps))
    generator = seeds.torch_generator(seed, "batches")
    order: list[int] = []
    loss_value = float("nan")
    step = 0
    for step in range(1, steps + 1):
        if len(order) < batch_size:
            order += torch.randperm(len(train), generator=generator).tolist()
        indices, order = order[:batch_size], order[batch_size:]
        loss = model(**_completion_batch(tokenizer, [train[i] for i in indices], device)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = float(loss.detach())
        if log is not None:
            log(step, {"train/loss": loss_value, "train/lr": schedule.get_last_lr()[0]})
        if stop is not None and check_every and step % check_every == 0:
            model.eval()
            done = stop(step)
            model.train()
            if done:
                break
    model.eval()
    return step, loss_value


def max_completion_tokens(problems: Sequence[Problem]) -> int:
    """Room for the longest worked solution plus ``<eos>`` and a little slack."""
    return max(len(p.solution) for p in problems) + 4


def greedy_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[Problem],
    device: str | torch.device | None = None,
    max_new_tokens: int | None = None,
) -> float:
    """Fraction of ``problems`` whose greedy completion the checker accepts (batched
    ``model.generate`` with KV cache and left padding)."""
    return pass_at_k(model, tokenizer, problems, k=1, device=device,
                     max_new_tokens=max_new_tokens, temperature=None)


def pass_at_k(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[Problem],
    k: int,
    device: str | torch.device | None = None,
    max_new_tokens: int | None = None,
    temperature: float | None = 1.0,
    seed: int = 0,
) -> float:
    """Fraction of ``problems`` with at least one of ``k`` completions accepted: sampled at
    ``temperature`` (seeded), or greedy when ``temperature`` is None (then ``k`` must be 1)."""
    if temperature is None and k != 1:
        raise ValueError("greedy decoding gives one completion per problem: use k=1")
    if device is not None:
        model.to(device)
    completions = generate_completions(
        model, tokenizer, [p.prompt for p in problems],
        max_new_tokens=max_new_tokens or max_completion_tokens(problems),
        do_sample=temperature is not None, temperature=temperature or 1.0,
        num_return_sequences=k, seed=seed,
    )
    solved = [any(is_correct(p, c) for c in completions[i * k:(i + 1) * k])
              for i, p in enumerate(problems)]
    return sum(solved) / len(problems)


def sampled_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: Sequence[Problem],
    k: int,
    seed: int = 0,
) -> tuple[float, float]:
    """(pass@1, pass@k) of ``k`` completions per problem sampled at temperature 1 (seeded):
    the fraction of all completions accepted, and of problems with at least one accepted."""
    completions = generate_completions(
        model, tokenizer, [p.prompt for p in problems],
        max_new_tokens=max_completion_tokens(problems), do_sample=True, temperature=1.0,
        num_return_sequences=k, seed=seed,
    )
    solved = [[is_correct(p, c) for c in completions[i * k:(i + 1) * k]]
              for i, p in enumerate(problems)]
    return (sum(map(sum, solved)) / (k * len(problems)),
            sum(map(any, solved)) / len(problems))


def warm_up(
    task_kind: str = "add",
    difficulty: Difficulty = DEFAULT_DIFFICULTY,
    model_config: ModelConfig | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    target: float | None = DEFAULT_TARGET,
    eval_every: int = DEFAULT_EVAL_EVERY,
    batch_size: int = DEFAULT_BATCH_SIZE,
    lr: float = DEFAULT_LR,
    seed: int = 0,
    cache_dir: str | Path | None = None,
    device: str | torch.device = "cpu",
    log: LogFn | None = None,
) -> Path:
    """The directory of the warm-up checkpoint for these settings, training it first if the
    cache does not hold it yet (load it with ``model.load_policy``). Training stops at the
    first check (every ``eval_every`` steps) where greedy accuracy on the validation split is
    at least ``target``, or after ``max_steps``; a run that ends at the cap short of the
    target warns, and ``warmup.json`` says so (``reached_target``)."""
    if target is not None and not 0 < target <= 1:
        raise ValueError(f"target must be in (0, 1] or None, got {target}")
    if target is not None and eval_every < 1:
        raise ValueError(f"eval_every must be >= 1 with a target, got {eval_every}")
    model_config = model_config or ModelConfig()
    difficulty = difficulty or Difficulty()
    settings = {
        "version": VERSION, "task_kind": task_kind, "difficulty": difficulty,
        "model_config": model_config, "max_steps": max_steps, "target": target,
        "eval_every": eval_every if target is not None else None, "batch_size": batch_size,
        "lr": lr, "lr_warmup_steps": LR_WARMUP_STEPS, "seed": seed,
        "n_validation": N_VALIDATION if target is not None else 0, "vocab": char_vocab(),
    }
    path = cache_root(cache_dir) / "rlvr-warmup" / warmup_key(settings)
    if (path / METADATA_FILE).is_file():
        return path

    started = time.perf_counter()
    train, validation, held_out = problem_sets(task_kind, difficulty, seed,
                                               max_steps * batch_size, settings["n_validation"])
    tokenizer = build_char_tokenizer()
    model = build_model(model_config, tokenizer).to(device)
    curve: list[dict[str, float]] = []

    def reached(step: int) -> bool:
        accuracy = greedy_accuracy(model, tokenizer, validation)
        curve.append({"step": step, "validation_greedy_accuracy": accuracy})
        if log is not None:
            log(step, {"warmup/validation_accuracy": accuracy})
        return target is not None and accuracy >= target

    steps_taken, final_loss = train_supervised(
        model, tokenizer, train, steps=max_steps, batch_size=batch_size, lr=lr, seed=seed,
        log=log, check_every=eval_every if target is not None else 0, stop=reached)
    train_seconds = time.perf_counter() - started
    if target is not None and not (curve and curve[-1]["step"] == steps_taken):
        reached(steps_taken)  # the cap fell between checks: measure where it ended
    reached_target = target is None or curve[-1]["validation_greedy_accuracy"] >= target
    metadata = {
        **{k: _plain(v) for k, v in settings.items()},
        "steps_taken": steps_taken, "reached_target": reached_target,
        "validation_greedy_accuracy": curve[-1]["validation_greedy_accuracy"] if curve else None,
        "held_out_greedy_accuracy": greedy_accuracy(model, tokenizer, held_out),
        **dict(zip(("held_out_pass@1_sampled", "held_out_pass@8"),
                   sampled_accuracy(model, tokenizer, held_out, k=8,
                                    seed=seeds.int_seed(seed, "eval")), strict=True)),
        "n_held_out": len(held_out), "n_validation": len(validation),
        "final_train_loss": final_loss, "train_seconds": train_seconds,
        "torch_threads": torch.get_num_threads(),  # recorded, not part of the key
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "validation_curve": curve,
    }
    if not reached_target:
        warnings.warn(
            f"the {task_kind} warm-up stopped at its cap of {max_steps} steps with validation "
            f"greedy accuracy {metadata['validation_greedy_accuracy']:.3f}, short of its target "
            f"{target}; the checkpoint is weaker than intended (raise the cap or lower the "
            "target)", RuntimeWarning, stacklevel=2)

    save_checkpoint(path, model, tokenizer, metadata)
    return path


def save_checkpoint(path: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    metadata: Mapping[str, Any]) -> None:
    """Write ``model``, ``tokenizer`` and ``metadata`` (``METADATA_FILE``, written last) to
    ``path`` atomically: under a temporary name in the same folder, renamed when complete, so
    a killed run never leaves a half checkpoint; when another process completed ``path``
    first, its checkpoint is kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=2, default=str))
        try:
            staging.rename(path)
        except OSError:  # another process finished the same checkpoint first
            if not (path / METADATA_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
