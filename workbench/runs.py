"""The MLflow layout of a sweep, owned here: run kinds, tag keys, outcome <-> status, and the
functions that open and close its runs (DESIGN.md, "Tracking layout").

One experiment per sweep; a run per study (kind ``study``), a child run per trial (``trial``)
and a run per seed under its trial (``seed``). Params hold every resolved hyperparameter; tags
hold provenance (git commit, dirty flag, package versions, host), the method, its fidelity, the
seed and the Optuna ids. The engine writes runs through this module; the report and
``workbench.results`` read them back with its names; neither spells them itself. Step metrics go
through ``workbench.sink.MetricSink``. Importing this module imports nothing heavy (MLflow's
entities load on the first write).
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

# run kinds (the value of the KIND tag)
STUDY, TRIAL, SEED = "study", "trial", "seed"

# tag keys
KIND = "workbench.kind"
SWEEP = "workbench.sweep"
STUDY_NAME = "workbench.study"
METHOD = "workbench.method"  # the study's label; METHOD + ".SLOT": the slot's method name
TASK = "workbench.task"
FIDELITY = "workbench.fidelity"  # one fidelity or "mixed"; FIDELITY + ".SLOT": per slot
SEED_TAG = "workbench.seed"
FAIL_REASON = "workbench.fail_reason"
PRUNE_REASON = "workbench.prune_reason"
PRUNE_DETAIL = "workbench.prune_detail"
UNUSED_KNOBS = "workbench.unused_knobs"
# on a study run: what the report reads back instead of the spec, as JSON
# (workbench.study_record); a long one continues in STUDY_RECORD + ".1", ".2", ...
STUDY_RECORD = "workbench.study_record"
TAG_VALUE_CHARS = 8000  # MLflow's longest tag value

# a trial's outcome -> the MLflow status of its runs
STATUS = {"complete": "FINISHED", "pruned": "KILLED", "fail": "FAILED"}
FINISHED, KILLED, FAILED, RUNNING = "FINISHED", "KILLED", "FAILED", "RUNNING"


def slot_tag(key: str, slot: str) -> str:
    """The per-slot form of METHOD or FIDELITY, e.g. ``workbench.method.step_size``."""
    return f"{key}.{slot}"


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
    """The id of the sweep's experiment, created (or restored from deleted) when needed."""
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
    """Open a run (a study, trial or seed run: its KIND tag says which) under ``parent``."""
    from mlflow.entities import Param

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
    """End a run with the MLflow status of an outcome (complete, pruned or fail, ``STATUS``)."""
    from mlflow.entities import Metric, RunTag

    now = int(time.time() * 1000)
    items = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
    if name:
        items.append(RunTag("mlflow.runName", name))
    values = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items()]
    if items or values:
        client.log_batch(run_id, metrics=values, tags=items)
    client.set_terminated(run_id, STATUS[state])
