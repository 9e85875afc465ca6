"""Whole-report time against scripts on MLflow's client, at two scales.

    .venv/bin/python benchmarks/report_speed.py              # both cases
    .venv/bin/python benchmarks/report_speed.py --case small # the quickstart only
    .venv/bin/python benchmarks/report_speed.py --case large --runs 200

Small: the quickstart sweep (30 trials, 3 seeds) run into a fresh store; then, alternately,
``workbench report sweeps/quickstart.yaml`` (every figure as PNG and PDF, the tables, the
provenance) and the naive script ``benchmarks/naive_curves.py`` (its learning curves through
``MlflowClient.get_metric_history``, one PNG per metric and x-axis), each a fresh process as a
user runs it, REPEATS times; the ratio of the medians.

Large: a synthetic sweep in the workbench's tracking layout (one study, trials of 4 seeds,
every seed run with 4 metrics at every step, written through the metric sink) goes into a fresh
SQLite store. Then, in one run: ``workbench.report.build`` (every figure and table; its reads are a
handful of SQL queries) against only *reading* the same runs the way a script on MLflow's client
would: ``get_run`` and ``get_metric_history`` per run and metric (timed on a sample of runs and
scaled to all of them, as the output says).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

logging.getLogger("mlflow").setLevel(logging.ERROR)
logging.getLogger("alembic").setLevel(logging.ERROR)

METRICS = ["train/loss", "cost/samples", "cost/grad_evals", "time/wall_seconds"]
SEEDS = 4


def make_sweep(folder: Path, runs: int, steps: int):
    from workbench.engine.studies import setup
    from workbench.spec import sweep as spec
    from workbench.store import runs as layout
    from workbench.store.database import Store
    from workbench.store.sink import MetricSink

    trials = runs // SEEDS
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump({
        "name": "bench", "task": {"name": "logreg"}, "methods": {"step_size": ["constant"]},
        "seeds": SEEDS, "trials": trials, "budget": {"steps": steps},
        "storage": f"sqlite:///{folder / 'bench.db'}"}))
    sweep = spec.load(path)
    store = Store.from_url(sweep.storage)
    setup(sweep, store)
    client = store.mlflow_client()
    experiment = layout.ensure_experiment(client, sweep.name, store)
    plan = sweep.studies[0]
    import optuna

    study = optuna.load_study(study_name=plan.name, storage=sweep.storage)
    rng = np.random.default_rng(0)
    tags = {"workbench.sweep": "bench", "workbench.study": plan.name,
            "workbench.method": plan.label, "workbench.fidelity": "reference-checked",
            **layout.provenance()}
    seed_ids = []
    with MetricSink(store.mlflow_url) as sink:
        for number in range(trials):
            lr = float(10 ** rng.uniform(-3, 1))
            trial_run = layout.start_run(
                client, experiment, f"t{number}", parent=study.user_attrs["mlflow_run_id"],
                tags={**tags, "workbench.kind": "trial", "optuna.trial_number": number},
                params={"step_size.lr": lr})
            values = []
            for seed in range(SEEDS):
                run = layout.start_run(client, experiment, f"t{number} s{seed}",
                                       parent=trial_run, params={"step_size.lr": lr},
                                       tags={**tags, "workbench.kind": "seed",
                                             "workbench.seed": seed})
                loss = np.exp(-lr * np.arange(steps) / steps) + rng.uniform(0, 0.01)
                for step in range(steps):
                    sink.log(run, step, {"train/loss": loss[step], "cost/samples": 64.0 * step,
                                         "cost/grad_evals": float(step),
                                         "time/wall_seconds": 1e-3 * step})
                values.append(float(loss[-1]))
                sink.flush()
                layout.finish_run(client, run, "complete", metrics={"objective": loss[-1]})
                seed_ids.append(run)
            layout.finish_run(client, trial_run, "complete",
                              metrics={"objective": float(np.mean(values))})
    return sweep, client, seed_ids


ROOT = Path(__file__).resolve().parent.parent
REPEATS = 3


def small_case() -> None:
    python = sys.executable
    quickstart = ROOT / "sweeps" / "quickstart.yaml"
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "WORKBENCH_CACHE": str(Path(folder) / "cache"),
               "PYTHONWARNINGS": "ignore"}
        storage = f"sqlite:///{Path(folder) / 'store.db'}"
        subprocess.run([python, "-m", "workbench", "sweep", str(quickstart), "--storage",
                        storage, "--quiet"], env=env, check=True, capture_output=True)
        report = [python, "-m", "workbench", "report", str(quickstart), "--storage", storage,
                  "--out", str(Path(folder) / "report")]
        (Path(folder) / "naive").mkdir()
        naive = [python, str(ROOT / "benchmarks" / "naive_curves.py"),
                 f"sqlite:///{Path(folder) / 'store.mlflow.db'}", "quickstart",
                 str(Path(folder) / "naive"), "train/loss", "train/accuracy"]
        times: dict[str, list[float]] = {"report": [], "naive": []}
        for _ in range(REPEATS):
            for name, command in (("report", report), ("naive", naive)):
                started = time.perf_counter()
                subprocess.run(command, env=env, check=True, capture_output=True)
                times[name].append(time.perf_counter() - started)
        ours, theirs = statistics.median(times["report"]), statistics.median(times["naive"])
        files = len(list((Path(folder) / "report").iterdir()))
        print(f"small (quickstart): workbench report ({files} files) {ours:.1f} s, naive "
              f"script (8 PNGs through MlflowClient) {theirs:.1f} s, medians of {REPEATS}, "
              f"{len(os.sched_getaffinity(0))} CPUs")
        print(f"ratio: the report takes {ours / theirs:.2f}x the naive script's time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=["small", "large", "both"], default="both")
    parser.add_argument("--runs", type=int, default=1000, help="large: seed runs (1000)")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=40, help="runs read by the client")
    args = parser.parse_args()
    if args.case in ("small", "both"):
        small_case()
    if args.case in ("large", "both"):
        large_case(args)


def large_case(args) -> None:
    from workbench import report

    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        sweep, client, seed_ids = make_sweep(Path(folder), args.runs, args.steps)
        print(f"wrote {len(seed_ids)} runs x {args.steps} steps x {len(METRICS)} metrics "
              f"in {time.perf_counter() - started:.0f} s")
        started = time.perf_counter()
        written = report.build(report.SweepRef(sweep.name, sweep.storage),
                               Path(folder) / "out")
        ours = time.perf_counter() - started
        started = time.perf_counter()
        for run_id in seed_ids[: args.sample]:
            client.get_run(run_id)
            for key in METRICS:
                client.get_metric_history(run_id, key)
        theirs = (time.perf_counter() - started) * len(seed_ids) / args.sample
        print(f"whole report ({len(written)} files): {ours:.1f} s")
        print(f"MlflowClient run by run, reading only: {theirs:.1f} s (timed on {args.sample} "
              f"runs, scaled x{len(seed_ids) / args.sample:.0f})")
        print(f"ratio: the whole report is {theirs / ours:.1f}x faster than reading the data "
              "through the client")


if __name__ == "__main__":
    main()
