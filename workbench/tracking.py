"""Writing a sweep to MLflow, in the layout ``workbench.layout`` defines (DESIGN.md,
"Tracking layout").

One experiment per sweep; a parent run per study, a child run per trial, a run per seed under
its trial. Params hold every resolved hyperparameter; tags hold provenance (git commit, dirty
flag, package versions, device, host), the method, its fidelity, the seed and the Optuna ids.
Step metrics go through ``workbench.sink.MetricSink``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag

from workbench.layout import STATUS


@functools.cache
def provenance() -> dict[str, str]:
    """Tags that say which code ran where: git commit and dirty flag, package versions, host."""
    root = Path(__file__).resolve().parent.parent
    tags = {"host": platform.node(), "python": platform.python_version()}
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        known = commit.returncode == 0 and dirty.returncode == 0
        tags["git.commit"] = commit.stdout.strip() if known else "unknown"
        tags["git.dirty"] = str(bool(dirty.stdout.strip())).lower() if known else "unknown"
    except (OSError, subprocess.SubprocessError):
        tags["git.commit"], tags["git.dirty"] = "unknown", "unknown"
    for package in ("workbench", "torch", "mlflow", "optuna", "numpy"):
        try:
            tags[f"version.{package}"] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            tags[f"version.{package}"] = "not installed"
    return tags


def ensure_experiment(client, name: str, artifact_root: Path) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        return experiment.experiment_id
    location = (artifact_root / name).resolve().as_uri()
    # the UI opens it in its model-training view (runs, metric charts), not the GenAI one
    return client.create_experiment(name, artifact_location=location,
                                    tags={"mlflow.experimentKind": "custom_model_development"})


def start_run(client, experiment_id: str, name: str, *, tags: Mapping[str, Any],
              params: Mapping[str, Any] | None = None, parent: str | None = None) -> str:
    all_tags = {k: str(v) for k, v in tags.items()}
    if parent:
        all_tags["mlflow.parentRunId"] = parent
    run = client.create_run(experiment_id, run_name=name, tags=all_tags)
    run_id = run.info.run_id
    if params:
        items = [Param(k, _param_value(v)) for k, v in params.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
    return run_id


def _param_value(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 6000 else text[:5997] + "..."


def finish_run(client, run_id: str, state: str, *, tags: Mapping[str, Any] | None = None,
               metrics: Mapping[str, float] | None = None, name: str | None = None) -> None:
    """End a run with the MLflow status of an Optuna state (complete, pruned or fail)."""
    now = int(time.time() * 1000)
    items = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
    if name:
        items.append(RunTag("mlflow.runName", name))
    values = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()]
    if items or values:
        client.log_batch(run_id, metrics=values, tags=items)
    client.set_terminated(run_id, STATUS[state])
