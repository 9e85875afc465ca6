"""Baseline (b) of ``benchmarks/sweep_overhead.py``: the sweep's trials written by hand with
Optuna and MLflow, as one would without the workbench.

    .venv/bin/python benchmarks/handwritten_optuna_mlflow.py PLAN.json FOLDER

``PLAN.json`` (written by ``sweep_overhead.py``) holds what the sweep ran: per study its
trials in order with their hyperparameters and, per seed, the step its run stopped at. This
script runs the same trials in a plain Optuna study per method (TPE with the spec's seed and
startup trials, the median pruner; each trial enqueued with the sweep's hyperparameters, so
it draws the same ones), on an Optuna SQLite store in FOLDER; each seed run trains the task
with the same registered methods and a ``log`` that keeps the step's metrics in memory and, at
the sweep's report points, reports the objective so far and asks the pruner; the run stops
where the sweep's stopped, so both do the same training steps. When a seed ends, it becomes
one MLflow run (SQLite, in FOLDER) with its params and tags and every metric, written with
``log_batch`` (MLflow takes at most 1,000 metrics a call); the trial is told its mean.
``--init FOLDER`` builds the two stores' tables first (untimed: MLflow's ~400 migration
statements would otherwise count against this script, while the sweep copies a cached empty
store).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import mlflow
import optuna
import torch
from mlflow.entities import Metric, Param, RunTag

from workbench import registry
from workbench.common import seeds
from workbench.common.budget import Budget
from workbench.testbeds import get_task


class Stop(Exception):
    """Ends a seed run where the sweep's run stopped."""


def report_points(steps: int, points: int) -> dict[int, int]:
    marks = sorted({max(1, round(steps * (i + 1) / points)) for i in range(points)})
    return {step: i for i, step in enumerate(marks)}


def stores(folder: str) -> tuple[str, mlflow.MlflowClient]:
    """The Optuna storage URL and an MLflow client on SQLite files in ``folder``."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{Path(folder) / 'optuna.db'}"
    optuna.storages.RDBStorage(storage)  # its tables
    return storage, mlflow.MlflowClient(tracking_uri=f"sqlite:///{Path(folder) / 'mlflow.db'}")


def main(plan_path: str, folder: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    storage, client = stores(folder)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    experiment = client.create_experiment("handwritten",
                                          artifact_location=Path(folder).as_uri())
    task_cls = get_task(plan["task"])
    params = task_cls.Params.model_validate(plan["task_params"])
    budget = Budget.model_validate(plan["budget"])
    metric, points = plan["metric"], plan["pruner"]["report_points"]
    marks = report_points(budget.steps, points)
    for study_plan in plan["studies"]:
        study = optuna.create_study(
            study_name=study_plan["name"], storage=storage, direction=plan["direction"],
            sampler=optuna.samplers.TPESampler(seed=plan["sampler"]["seed"],
                                               n_startup_trials=plan["sampler"]["startup_trials"]),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=plan["pruner"]["startup_trials"],
                                               n_warmup_steps=plan["pruner"]["warmup_steps"]))
        space = {k: optuna.distributions.json_to_distribution(v)
                 for k, v in study_plan["space"].items()}
        for entry in study_plan["trials"]:
            study.enqueue_trial(entry["params"])
            trial = study.ask()
            for name, dist in space.items():
                if isinstance(dist, optuna.distributions.FloatDistribution):
                    trial.suggest_float(name, dist.low, dist.high, log=dist.log)
                elif isinstance(dist, optuna.distributions.IntDistribution):
                    trial.suggest_int(name, dist.low, dist.high, log=dist.log)
                else:
                    trial.suggest_categorical(name, dist.choices)
            values, pruned = [], False
            for index, run in enumerate(entry["seeds"]):
                methods = {slot: registry.get(m["family"], m["name"])(**m["params"])
                           for slot, m in entry["methods"].items()}
                rows: list[Metric] = []
                last = [float("nan")]

                def log(step, step_metrics, index=index, stop_at=run["stop_at"], rows=rows,
                        last=last, trial=trial):
                    now = int(time.time() * 1000)
                    rows.extend(Metric(k, float(v), now, step) for k, v in step_metrics.items())
                    if metric in step_metrics:
                        last[0] = float(step_metrics[metric])
                        if step in marks:
                            trial.report(last[0], index * points + marks[step])
                            trial.should_prune()  # asked as the sweep asks; the plan decides
                    if stop_at is not None and step >= stop_at:
                        raise Stop

                torch.manual_seed(seeds.int_seed(run["seed"], "global"))
                run_id = client.create_run(experiment, run_name=f"{study_plan['label']} "
                                           f"t{entry['number']} s{run['seed']}").info.run_id
                try:
                    task_cls().run(params, methods, seed=run["seed"],
                                   device=torch.device("cpu"), budget=budget, log=log)
                except Stop:
                    pruned = True
                run_params = [Param("task", plan["task"]), Param("seed", str(run["seed"]))]
                run_params += [Param(f"{slot}.{k}", str(v)) for slot, m in
                               entry["methods"].items() for k, v in m["params"].items()]
                tags = [RunTag("optuna.study", study_plan["name"]),
                        RunTag("optuna.trial", str(entry["number"]))]
                for start in range(0, max(1, len(rows)), 1000):
                    client.log_batch(run_id, metrics=rows[start:start + 1000],
                                     params=run_params if start == 0 else [],
                                     tags=tags if start == 0 else [])
                client.set_terminated(run_id, "KILLED" if pruned else "FINISHED")
                values.append(last[0])
                if pruned:
                    break
            if pruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, sum(values) / len(values))


if __name__ == "__main__":
    if sys.argv[1] == "--init":  # the stores' tables, built before the timed run
        stores(sys.argv[2])[1].search_experiments()
    else:
        main(sys.argv[1], sys.argv[2])
