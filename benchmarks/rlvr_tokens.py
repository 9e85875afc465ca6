"""Rollout and training tokens per second of the RLVR policy, per rollout backend and device.

    .venv/bin/python benchmarks/rlvr_tokens.py                  # CPU, + CUDA when available
    .venv/bin/python benchmarks/rlvr_tokens.py --quick          # one timed repeat
    .venv/bin/python benchmarks/rlvr_tokens.py --model DIR --device cuda --json out.json
    .venv/bin/python benchmarks/rlvr_tokens.py --device cuda --precision bf16

One RL step's work on P addition prompts (``problems.generate("add", P)``, 2-3 digit operands as
in the default task) x G samples at temperature 1, at most ``--max-new-tokens`` each:

- rollout tokens/s: generated tokens (eos included, padding not) per second of
  ``backend.generate``;
- training tokens/s: prompt + response tokens per second of one forward and backward pass of
  ``sequence_log_probs`` over the generated batch (right-padded, a token-mean loss on the
  response tokens), on the same device.

The model is the default ``ModelConfig()`` (random weights are enough for throughput; they
rarely emit eos, so responses run to the length limit) or a checkpoint given with ``--model``
(a warm-up checkpoint writes short answers, so fewer tokens per step). Each figure is the best
of ``--repeats`` timed runs after one untimed warm-up (the machine is shared: slower repeats
are other processes' time). Where vllm imports and CUDA exists, the same prompts go through the
vllm backend on the same model directory (CUDA graphs on) and the table adds the vllm/hf rollout
ratio on CUDA and the time of one ``sync_weights``.

``--precision bf16`` runs both sides as the loop's ``precision: bf16`` does: the hf backend
samples under bf16 autocast, the training pass runs under it (fp32 weights), and vllm runs in
bfloat16; ``fp32`` (the default) is float32 throughout. Each row says which.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.backends import Rollouts
from workbench.testbeds.rlvr.loop import autocast
from workbench.testbeds.rlvr.model import ModelConfig, build_model, load_policy, sequence_log_probs
from workbench.testbeds.rlvr.problems import Difficulty, generate
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer

DIFFICULTY = Difficulty(digits_min=2, digits_max=3)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def best_time(run, device: str, repeats: int) -> tuple[float, object]:
    """(best seconds, last result) of ``repeats`` timed calls after one untimed warm-up."""
    result = run(0)
    best = float("inf")
    for repeat in range(1, repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        result = run(repeat)
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best, result


def training_batch(rollouts: Rollouts, pad_token_id: int, device: str):
    """Right-padded prompt + response rows, their attention mask and response mask."""
    rows = [p + r for p, r in zip(rollouts.prompt_ids, rollouts.response_ids, strict=True)]
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros_like(input_ids)
    for i, (prompt, response) in enumerate(zip(rollouts.prompt_ids, rollouts.response_ids,
                                               strict=True)):
        end = len(prompt) + len(response)
        input_ids[i, :end] = torch.tensor(prompt + response)
        attention_mask[i, :end] = 1
        response_mask[i, len(prompt):end] = 1
    return input_ids.to(device), attention_mask.to(device), response_mask.to(device)


def measure_training(model, rollouts: Rollouts, pad_token_id: int, device: str,
                     repeats: int, precision: str = "fp32") -> dict:
    input_ids, attention_mask, response_mask = training_batch(rollouts, pad_token_id, device)
    model.train()

    def step(_: int) -> None:
        with autocast(precision, device):
            log_probs, _ = sequence_log_probs(model, input_ids, attention_mask, response_mask)
        loss = -log_probs.sum() / response_mask.sum().clamp(min=1)
        loss.backward()
        model.zero_grad(set_to_none=True)

    seconds, _ = best_time(step, device, repeats)
    tokens = int(attention_mask.sum())
    return {"train_tokens": tokens, "train_s": seconds, "train_tokens_per_s": tokens / seconds}


def measure_rollouts(backend, prompts: list[str], samples: int, max_new_tokens: int,
                     device: str, repeats: int) -> tuple[dict, Rollouts]:
    def run(repeat: int) -> Rollouts:
        return backend.generate(prompts, samples, max_new_tokens=max_new_tokens, seed=repeat)

    seconds, rollouts = best_time(run, device, repeats)
    tokens = sum(len(ids) for ids in rollouts.response_ids)
    return ({"rollout_tokens": tokens, "rollout_s": seconds,
             "rollout_tokens_per_s": tokens / seconds,
             "finished_fraction": sum(rollouts.finished) / len(rollouts.finished)}, rollouts)


def format_row(row: dict) -> str:
    def cell(key: str, width: int, spec: str) -> str:
        return format(row[key], spec).rjust(width) if key in row else "-".rjust(width)

    return (f"{row['device']:<6} {row['backend']:<7} {cell('rollout_tokens_per_s', 14, ',.0f')} "
            f"{cell('rollout_tokens', 10, ',')} {cell('train_tokens_per_s', 12, ',.0f')} "
            f"{cell('train_tokens', 12, ',')} {cell('vllm_over_hf', 8, '.2f')} "
            f"{cell('sync_s', 7, '.3f')}")


def load(model_dir: Path | None, device: str):
    if model_dir is not None:
        return load_policy(model_dir, device=device)
    tokenizer = build_char_tokenizer()
    return build_model(ModelConfig(), tokenizer).to(device), tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="a model directory (default: ModelConfig() with random weights)")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step P (16)")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt G (8)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="response limit (16)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats (3; quick 1)")
    parser.add_argument("--quick", action="store_true", help="one timed repeat")
    parser.add_argument("--device", nargs="+", default=None, choices=("cpu", "cuda"),
                        help="default: cpu, and cuda when available")
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="fp32, or bf16 autocast on both sides (fp32 weights)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    with_vllm = importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()
    prompts = [problem.prompt for problem in generate("add", args.prompts, 0, DIFFICULTY)]

    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"{platform.processor() or 'cpu'}; model {args.model or 'ModelConfig() random'}; "
          f"{args.prompts} prompts x {args.samples} samples, <= {args.max_new_tokens} new "
          f"tokens; {args.precision}; best of {repeats}")
    header = (f"{'device':<6} {'backend':<7} {'rollout tok/s':>14} {'gen tokens':>10} "
              f"{'train tok/s':>12} {'train tokens':>12} {'vllm/hf':>8} {'sync s':>7}")
    print(header)
    print("-" * len(header))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for device in devices:
            model, tokenizer = load(args.model, device)
            backends = ["hf"] + (["vllm"] if with_vllm and device == "cuda" else [])
            for name in backends:
                row = {"device": device, "backend": name, "prompts": args.prompts,
                       "samples": args.samples, "max_new_tokens": args.max_new_tokens,
                       "repeats": repeats, "precision": args.precision}
                model_dir = args.model
                options = {"precision": args.precision}
                if name == "vllm":
                    if model_dir is None:
                        model_dir = Path(scratch) / "policy"
                        model.save_pretrained(model_dir)
                        tokenizer.save_pretrained(model_dir)
                    options |= dict(enforce_eager=False)
                backend = make_backend(name, model, tokenizer, model_dir, device, **options)
                try:
                    rollout_row, rollouts = measure_rollouts(
                        backend, prompts, args.samples, args.max_new_tokens, device, repeats)
                    row |= rollout_row
                    if name == "vllm":
                        start = time.perf_counter()
                        backend.sync_weights(model)
                        row["sync_s"] = time.perf_counter() - start
                        hf = next(r for r in rows if r["device"] == device
                                  and r["backend"] == "hf")
                        row["vllm_over_hf"] = (row["rollout_tokens_per_s"]
                                               / hf["rollout_tokens_per_s"])
                finally:
                    backend.close()
                if name == "hf":  # training does not depend on the backend: once per device
                    pad = (tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                           else tokenizer.eos_token_id)
                    row |= measure_training(model, rollouts, pad, device, repeats,
                                            args.precision)
                rows.append(row)
                print(format_row(row), flush=True)
    if not with_vllm:
        print("vllm: not measured (it needs the `gpu` extra and CUDA)")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "model": str(args.model or "default"),
                                         "precision": args.precision,
                                         "torch": torch.__version__,
                                         "threads": torch.get_num_threads()}, indent=2))


if __name__ == "__main__":
    main()
