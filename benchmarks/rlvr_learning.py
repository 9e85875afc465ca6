"""Does GRPO raise held-out accuracy above the warm-up checkpoint on this CPU within the time
limit? The ``rlvr-arith`` task with its defaults (2-3 digit addition, the cached 1 M-parameter
warm-up, 8 completions per prompt, GRPO, token-mean PPO-clip) with 32 prompts per step and
DAPO's dynamic sampling, and AdamW at a constant 5e-5, for ``--minutes`` of training (15 by
default; the warm-up, when not cached yet, is not counted). Prints held-out greedy accuracy
(pass@1 over 200 problems) and sampled pass@1 (8 samples on each of the 200) at the
checkpoint and along the run, and the change.

    python benchmarks/rlvr_learning.py [--minutes 15] [--seed 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from workbench import registry
from workbench.testbeds import Budget, get_task

STEP_SIZE = {"lr": 5e-5, "shape": "constant", "decoupled": True}
SETTINGS = {"prompts": 32, "dynamic_sampling": True}


def run(minutes: float, seed: int, steps: int = 100_000, eval_every: int = 50,
        **params) -> list[dict]:
    task = get_task("rlvr-arith")
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["step_size"] = registry.get("step_size", "adam_schedule")(**STEP_SIZE)
    curve: list[dict] = []
    started = time.perf_counter()

    def log(step, metrics):
        if "eval/accuracy" in metrics:
            point = {"step": step, "seconds": round(time.perf_counter() - started, 1),
                     "greedy": metrics["eval/accuracy"],
                     "sampled": metrics["eval/pass@1_sampled"],
                     "pass@8": metrics["eval/pass@8"]}
            curve.append(point)
            print(point, flush=True)

    settings = {"eval_every": eval_every, "eval_k_prompts": 200, "cpu_threads": 1,
                **SETTINGS, **params}
    task().run(task.Params(**settings), methods, seed=seed, device=torch.device("cpu"),
               budget=Budget(steps=steps, wall_seconds=60 * minutes), log=log)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the curve here")
    args = parser.parse_args()
    curve = run(args.minutes, args.seed)
    first, last = curve[0], curve[-1]
    best = max(curve[1:], key=lambda p: p["greedy"])
    print(f"held-out greedy accuracy: checkpoint {first['greedy']:.3f} -> after "
          f"{last['step']} steps ({last['seconds']:.0f} s) {last['greedy']:.3f} "
          f"(best {best['greedy']:.3f} at step {best['step']}); change "
          f"{last['greedy'] - first['greedy']:+.3f}")
    print(f"held-out sampled pass@1: {first['sampled']:.3f} -> {last['sampled']:.3f} "
          f"({last['sampled'] / first['sampled']:.2f}x); pass@8 {first['pass@8']:.3f} -> "
          f"{last['pass@8']:.3f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(curve, out, indent=2)


if __name__ == "__main__":
    main()
