"""The checkout against an earlier commit, in one run: the same numbers and the same speed.

For a refactor that must change nothing a user measures (issue 34: the packages, the launchers,
the loops), each measurement runs in a fresh child process on the earlier commit's code (its
files extracted with ``git archive`` into a temporary folder) and on this checkout's,
alternately, ``--repeats`` times:

1. **sweep overhead**: ``python -m workbench sweep`` on a small logistic-regression spec
   (3 step-size studies x 4 trials x 2 seeds x 100 steps, TPE, median pruner) on a fresh
   SQLite store: CPU seconds of the whole command (user + system of the child), start-up,
   engine, MLflow and Optuna included;
2. **seed axis**: one ``Task.run_seeds`` of the quickstart's logistic regression (512 x 20,
   minibatch 64, 200 steps) on 10 seeds with ``adam``: wall seconds of the call;
3. **control PPO**: one ``Task.run`` of ``cartpole`` (PPO, N = 1,024 environments, T = 32,
   8 updates, one torch thread): environment steps per second.

Each prints the median of each side, after / before (1.00: no change; below 1: faster now),
and whether the numbers agree: the sweep's best value of each study, the seed axis's final
loss of every seed and PPO's final return must be bitwise equal (the same seeds, the same
code path). Exit code 1 when a number differs.

Usage::

    .venv/bin/python benchmarks/before_after.py --ref 4d3dbd8 [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

SPEC = {"name": "before-after", "task": {"name": "logreg", "params": {"n_samples": 512,
                                                                      "dim": 20}},
        "methods": {"step_size": ["constant", "adam", "polyak"]}, "seeds": 2, "trials": 4,
        "budget": {"steps": 100}, "sampler": {"name": "tpe", "seed": 0},
        "pruner": {"name": "median"}}

# the best value of each study after the sweep (the store's own numbers)
SWEEP_RESULT = """
import json, sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
url = sys.argv[1]
values = {s.study_name.split(".")[1]: s.best_trial.value
          for s in optuna.get_all_study_summaries(url, include_best_trial=True)}
print(json.dumps(values, sort_keys=True))
"""

SEED_AXIS = """
import json, sys, time, torch
from workbench import registry
from workbench.testbeds import Budget, get_task
torch.set_num_threads(1)
task = get_task("logreg")()
params = task.Params(n_samples=512, dim=20, margin=0.1, batch_size=64)
methods = {"step_size": registry.get("step_size", "adam")(),
           "batch_size": registry.get("batch_size", "constant")()}
start = time.perf_counter()
finals = task.run_seeds(params, methods, seeds=list(range(10)), device=torch.device("cpu"),
                        budget=Budget(steps=200), log=lambda step, metrics: None)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "numbers": [f["train/loss"] for f in finals]}))
"""

CONTROL_PPO = """
import json, time, torch
from workbench import registry
from workbench.testbeds import Budget, get_task
torch.set_num_threads(1)
task = get_task("cartpole")()
params = task.Params(num_envs=1024, rollout_len=32)
methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
start = time.perf_counter()
final = task.run(params, methods, seed=0, device=torch.device("cpu"), budget=Budget(steps=8),
                 log=lambda step, metrics: None)
seconds = time.perf_counter() - start
print(json.dumps({"rate": 1024 * 32 * 8 / seconds, "numbers": final.get("train/return")}))
"""


def child(tree: Path, args: list[str], cwd: Path) -> tuple[str, float, float]:
    """(stdout, CPU seconds, wall seconds) of ``python ARGS`` on ``tree``'s code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(args[:3])} failed:\n{out.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.stdout, cpu, wall


def sweep(tree: Path, work: Path) -> tuple[float, str]:
    work.mkdir(parents=True)
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    url = f"sqlite:///{work / 'store.db'}"
    _, cpu, _ = child(tree, ["-m", "workbench", "sweep", str(spec), "--storage", url,
                             "--quiet"], work)
    values, _, _ = child(tree, ["-c", SWEEP_RESULT, url], work)
    return cpu, values.strip()


def snippet(tree: Path, code: str, key: str, work: Path) -> tuple[float, str]:
    work.mkdir(parents=True)
    out, _, _ = child(tree, ["-c", code], work)
    found = json.loads(out.strip().splitlines()[-1])
    return found[key], json.dumps(found["numbers"])


MEASURES = [
    ("sweep overhead (CPU s of `workbench sweep`)", lambda t, w: sweep(t, w), "lower"),
    ("seed axis (s of one run_seeds, 10 seeds)", lambda t, w: snippet(t, SEED_AXIS, "seconds",
                                                                        w), "lower"),
    ("control PPO (env steps / s, N = 1,024)", lambda t, w: snippet(t, CONTROL_PPO, "rate", w),
     "higher"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", required=True, help="the earlier commit (e.g. 4d3dbd8)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    differ = False
    with tempfile.TemporaryDirectory() as folder:
        before = Path(folder) / "before"
        before.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref, "workbench",
                                  "methods"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        trees = {"before": before, "after": ROOT}
        print(f"before: {args.ref}; after: this checkout; medians of {args.repeats} "
              "alternating fresh processes")
        for name, measure, better in MEASURES:
            values: dict[str, list[float]] = {"before": [], "after": []}
            numbers: dict[str, set[str]] = {"before": set(), "after": set()}
            for i in range(args.repeats):
                for side, tree in trees.items():
                    value, found = measure(tree, Path(folder) / f"{name[:5]}-{side}-{i}")
                    values[side].append(value)
                    numbers[side].add(found)
            b, a = (statistics.median(values[s]) for s in ("before", "after"))
            same = numbers["before"] == numbers["after"] and len(numbers["after"]) == 1
            differ |= not same
            print(f"{name:46s} before {b:10.3f}  after {a:10.3f}  after/before {a / b:5.2f} "
                  f"({better} is better; min..max before {min(values['before']):.3f}.."
                  f"{max(values['before']):.3f}, after {min(values['after']):.3f}.."
                  f"{max(values['after']):.3f})  numbers {'equal' if same else 'DIFFER'}")
            if not same:
                print(f"  before: {sorted(numbers['before'])}")
                print(f"  after:  {sorted(numbers['after'])}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
