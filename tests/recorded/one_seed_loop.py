"""Record what ``Task.run`` logs for a set of optimisation configurations into
``one_seed_loop.json`` (every metric but the timed one, every step, and the final result).

Recorded on the sequential loop (``loop.train``, before ``Task.run`` became the seed-axis
loop with one seed: run at commit da2cb06), to keep its numbers; ``tests/test_one_seed_loop.py``
holds ``Task.run`` to them. Usage: ``python -m tests.recorded.one_seed_loop`` from the
repository root (rewrites the file: only to record a new case on a checkout of that commit).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from workbench import registry
from workbench.common.budget import Budget
from workbench.testbeds import get_task

HERE = Path(__file__).resolve().parent
TIMED = {"time/wall_seconds"}
LOGREG = {"n_samples": 96, "dim": 6, "batch_size": 16}
LSQ = {"n_samples": 80, "dim": 6, "batch_size": 20, "condition_number": 30.0}
CONSTANT = ("constant", {})
# (label, task, params, {slot: (method, hyperparameters)}, budget keywords, seed)
CASES = [
    ("logreg-constant", "logreg", LOGREG,
     {"step_size": ("constant", {}), "batch_size": CONSTANT}, {"steps": 25}, 3),
    ("logreg-constant-200-steps", "logreg",
     {"n_samples": 512, "dim": 20, "margin": 0.1, "batch_size": 64},
     {"step_size": ("constant", {}), "batch_size": CONSTANT}, {"steps": 200}, 7),
    ("logreg-polyak", "logreg", LOGREG,
     {"step_size": ("polyak", {}), "batch_size": CONSTANT}, {"steps": 25}, 4),
    ("logreg-armijo", "logreg", LOGREG,
     {"step_size": ("armijo", {"eta0": 50.0, "reset_option": 2}), "batch_size": CONSTANT},
     {"steps": 15}, 5),
    ("logreg-adam-float32-target", "logreg",
     {**LOGREG, "dtype": "float32", "target_metric": "train/accuracy",
      "target_value": 0.5},
     {"step_size": ("adam", {"lr": 0.1}), "batch_size": CONSTANT}, {"steps": 25}, 6),
    ("logreg-normalized_lr-margins", "logreg", LOGREG,
     {"step_size": ("normalized_lr", {}), "batch_size": CONSTANT}, {"steps": 20}, 7),
    ("logreg-aicn-hvp-fullbatch", "logreg", {**LOGREG, "batch_size": None},
     {"step_size": ("aicn", {}), "batch_size": CONSTANT}, {"steps": 20}, 8),
    ("logreg-softmax_radius-logit_jvp", "logreg", LOGREG,
     {"step_size": ("softmax_radius", {}), "batch_size": CONSTANT}, {"steps": 20}, 9),
    ("logreg-noise_scale-per_sample", "logreg", LOGREG,
     {"step_size": ("constant", {}), "batch_size": ("noise_scale", {})}, {"steps": 25}, 10),
    ("logreg-norm_test-samples_budget", "logreg", LOGREG,
     {"step_size": ("sgd_momentum", {}), "batch_size": ("norm_test", {})},
     {"samples": 600}, 11),
    ("least_squares-linear_ramp", "least_squares", LSQ,
     {"step_size": ("dog", {}),
      "batch_size": ("linear_ramp", {"start_size": 8, "increment": 4, "trigger": "steps",
                                     "ramp_steps": 5})}, {"steps": 20}, 12),
    ("quadratic-polyak", "quadratic", {"dim": 8, "condition_number": 50.0},
     {"step_size": ("polyak", {})}, {"steps": 25}, 13),
    ("quadratic-diverges", "quadratic",
     {"dim": 1, "condition_number": 1.0, "init_scale": 1.0},
     {"step_size": ("constant", {"lr": 1000.0})}, {"steps": 2000}, 14),
    ("simplex-fw_short_step-backtracking", "simplex",
     {"problem": "portfolio", "dim": 10, "n_samples": 40},
     {"step_size": ("fw_short_step", {"l_estimate": "backtracking"})}, {"steps": 20}, 15),
    ("simplex-fw_open_loop", "simplex",
     {"problem": "l1_least_squares", "dim": 10, "n_samples": 40, "radius": 3.0},
     {"step_size": ("fw_open_loop", {})}, {"steps": 20}, 16),
    ("mlp-sgd_momentum-eval3", "mlp", {"width": 16, "batch_size": 32, "eval_every": 3},
     {"step_size": ("sgd_momentum", {}), "batch_size": CONSTANT}, {"steps": 12}, 17),
    ("cnn-armijo", "mlp", {"model": "cnn", "width": 16, "batch_size": 32},
     {"step_size": ("armijo", {}), "batch_size": CONSTANT}, {"steps": 8}, 18),
    ("mlp-adam-60-steps", "mlp", {"width": 64, "batch_size": 64},
     {"step_size": ("adam", {}), "batch_size": CONSTANT}, {"steps": 60}, 20),
    ("mlp-noise_scale-per_sample", "mlp", {"width": 16, "batch_size": 32},
     {"step_size": ("adam", {}), "batch_size": ("noise_scale", {})}, {"steps": 10}, 19),
]


def run_case(task_name, params, chosen, budget, seed):
    """``Task.run``'s logged rows (timed metric dropped) and its final result."""
    task = get_task(task_name)()
    methods = {slot: registry.get(slot, name)(**hp) for slot, (name, hp) in chosen.items()}
    rows: list = []
    final = task.run(task.Params(**params), methods, seed=seed, device=torch.device("cpu"),
                     budget=Budget(**budget),
                     log=lambda step, m: rows.append(
                         [step, {k: v for k, v in m.items() if k not in TIMED}]))
    return rows, {k: v for k, v in final.items() if k not in TIMED}


def main() -> None:
    recorded = {}
    for label, task_name, params, chosen, budget, seed in CASES:
        rows, final = run_case(task_name, params, chosen, budget, seed)
        recorded[label] = {"rows": rows, "final": final}
    (HERE / "one_seed_loop.json").write_text(json.dumps(recorded, indent=None) + "\n")


if __name__ == "__main__":
    main()
