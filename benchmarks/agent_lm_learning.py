"""Does the language-model turn loop raise held-out success above its warm-up checkpoint on
this CPU within the time limit? The ``keydoor-lm`` task with its defaults (6 x 6 grids, the
cached warm-up on noisy optimal demonstrations, stopped at 0.25 validation success) with
8 instances x G = 8 rollouts per update, ``--advantage`` (GiGPO by default) and Adam at 1e-3,
for ``--minutes`` of training (15 by default; the warm-up, when not cached yet, is not
counted). Prints held-out greedy and sampled success (64 instances, one episode each) at the
checkpoint (step 0) and along the run, then the two numbers of each, their difference and
ratio.

    python benchmarks/agent_lm_learning.py [--minutes 15] [--seed 0] [--task keydoor-lm]
                                           [--advantage gigpo] [--malformed-penalty 0]
                                           [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from workbench import registry
from workbench.testbeds import Budget, get_task

SETTINGS = {"instances_per_update": 8, "group_size": 8, "eval_every": 10, "cpu_threads": 1}
LR = 1e-3


def run(task_name: str, advantage: str, minutes: float, seed: int, steps: int = 100_000,
        **params) -> list[dict]:
    task = get_task(task_name)
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["step_size"] = registry.get("step_size", "adam")(lr=LR)
    methods["advantage"] = registry.get("advantage", advantage)()
    curve: list[dict] = []
    started = time.perf_counter()

    def log(step, metrics):
        if "eval/success" in metrics:
            point = {"step": step, "seconds": round(time.perf_counter() - started, 1),
                     "eval_success": metrics["eval/success"],
                     "eval_success_sampled": metrics["eval/success_sampled"],
                     "train_success": metrics.get("train/success"),
                     "malformed": metrics.get("eval/malformed_fraction")}
            curve.append(point)
            print(point, flush=True)

    task().run(task.Params(**{**SETTINGS, **params}), methods, seed=seed,
               device=torch.device("cpu"), budget=Budget(steps=steps, wall_seconds=60 * minutes),
               log=log)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", default="keydoor-lm", choices=["keydoor-lm", "toolcalc-lm"])
    parser.add_argument("--advantage", default="gigpo")
    parser.add_argument("--malformed-penalty", type=float, default=0.0,
                        help="reward subtracted at a turn whose text names no action")
    parser.add_argument("--json", help="write the curve here")
    args = parser.parse_args()
    curve = run(args.task, args.advantage, args.minutes, args.seed,
                malformed_penalty=args.malformed_penalty)
    first, last = curve[0], curve[-1]
    best = max(curve[1:], key=lambda p: p["eval_success"])
    ratio = (f"{last['eval_success'] / first['eval_success']:.2f}x"
             if first["eval_success"] > 0 else "n/a (checkpoint at 0)")
    print(f"held-out greedy success ({args.task}, {args.advantage}): warm-up checkpoint "
          f"{first['eval_success']:.3f} -> after {last['step']} updates ({last['seconds']:.0f} s) "
          f"{last['eval_success']:.3f} (best {best['eval_success']:.3f} at update "
          f"{best['step']}); difference {last['eval_success'] - first['eval_success']:+.3f}, "
          f"ratio {ratio}")
    sampled = (first["eval_success_sampled"], last["eval_success_sampled"])
    print(f"held-out sampled success: warm-up checkpoint {sampled[0]:.3f} -> {sampled[1]:.3f}; "
          f"difference {sampled[1] - sampled[0]:+.3f}, ratio "
          + (f"{sampled[1] / sampled[0]:.2f}x" if sampled[0] > 0 else "n/a"))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(curve, out, indent=2)


if __name__ == "__main__":
    main()
