"""The MLflow layout of a sweep, owned here: run kinds, tag keys, outcome <-> status, and the
functions that open and close its runs (DESIGN.md, "Tracking layout").

One experiment per sweep; a run per study (kind ``study``), a child run per trial (``trial``)
and a run per seed under its trial (``seed``). Params hold every resolved hyperparameter; tags
hold provenance (git commit, dirty flag, package versions, host), the method, its fidelity, the
seed and the Optuna ids. The engine writes runs through this module; the report and
``workbench.store.results`` read them back with its names; neither spells them itself. Step
metrics go through ``workbench.store.sink.MetricSink``. Importing this module imports nothing
heavy (MLflow's entities load on the first write).
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

from workbench.common.processes import this_host

# run kinds (the value of the KIND tag); an evaluation run re-runs a study's best trial on a
# held-out seed (tag EVALUATES: that trial's number)
STUDY, TRIAL, SEED, EVALUATION = "study", "trial", "seed", "evaluation"

# tag keys
KIND = "workbench.kind"
SWEEP = "workbench.sweep"
STUDY_NAME = "workbench.study"  # the Optuna study's name (task, methods, fingerprint)
STUDY_TITLE = "workbench.study_title"  # on a study run: SWEEP.SLOT=LABEL, the readable name
METHOD = "workbench.method"  # the study's label; METHOD + ".SLOT": the slot's method name
TASK = "workbench.task"
# on every run of a study of a sweep with task.vary: its varied task parameters' values, JSON
# ({"num_envs": 64}); the study's label ends with them too (``adam, num_envs=64``)
VARIED = "workbench.varied"
FIDELITY = "workbench.fidelity"  # one fidelity or "mixed"; FIDELITY + ".SLOT": per slot
SEED_TAG = "workbench.seed"
FAIL_REASON = "workbench.fail_reason"
PRUNE_REASON = "workbench.prune_reason"
# on a trial run ended by an interrupt (Ctrl-C, SIGTERM): its trial is queued again, so the run
# counts as no trial (neither failed nor used) in the report
INTERRUPTED = "workbench.interrupted"
PRUNE_DETAIL = "workbench.prune_detail"
UNUSED_KNOBS = "workbench.unused_knobs"
EVALUATES = "workbench.evaluates_trial"
OBJECTIVE_SEEDS = "workbench.objective_seeds"  # on a trial run: the seeds its objective is over
# on a seed run that finished under a trial stopped before its end (its worker killed, or
# interrupted) and was taken over by the trial that ran that configuration again, instead of
# training the seed twice: the trial run it first ran under (``TrialRunner``)
KEPT_FROM = "workbench.kept_from"
DIVERGED = "workbench.diverged"  # on an evaluation run that diverged: where and how
# on a sweep's experiment: how many held-out seeds it used and why (JSON, EvaluationOutcome)
EVALUATION_OUTCOME = "workbench.evaluation"
# on a study run: what the report reads back instead of the spec, as JSON
# (workbench.store.study_record); a long one continues in STUDY_RECORD + ".1", ".2", ...
STUDY_RECORD = "workbench.store.study_record"
TAG_VALUE_CHARS = 8000  # MLflow's longest tag value
# on every run: the study's fingerprint (workbench.common.fingerprint); on a study run, the document
# it digests (FINGERPRINT_DOC, JSON, split like the record)
FINGERPRINT = "workbench.common.fingerprint"
FINGERPRINT_DOC = "workbench.fingerprint_doc"
# on a study run: whether the sweep of its experiment shows it (current) or a later version of
# the sweep replaced it (superseded), and in one line what changed
STUDY_STATE = "workbench.study_state"
CURRENT, SUPERSEDED = "current", "superseded"
SUPERSEDED_NOTE = "workbench.superseded_note"
# on a study run whose trials live in another sweep's experiment (a shared study): where
HOME_EXPERIMENT = "workbench.home_experiment"
HOME_RUN = "workbench.home_run"

# a trial's outcome -> the MLflow status of its runs
STATUS = {"complete": "FINISHED", "pruned": "KILLED", "fail": "FAILED"}
FINISHED, KILLED, FAILED, RUNNING = "FINISHED", "KILLED", "FAILED", "RUNNING"


def slot_tag(key: str, slot: str) -> str:
    """The per-slot form of METHOD or FIDELITY, e.g. ``workbench.method.step_size``."""
    return f"{key}.{slot}"


@functools.cache
def provenance() -> dict[str, str]:
    """Tags that say which code ran where: git commit and dirty flag, package versions
    (vllm: ``not installed`` where absent), host, and the GPU, CUDA and driver
    (``workbench.common.gpu.gpu_tags``; ``none`` without one)."""
    from workbench.common.gpu import gpu_tags  # imports torch: only when a run is tagged

    root = Path(__file__).resolve().parents[2]  # the checkout
    tags = {"host": this_host(), "python": platform.python_version()}
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
    for package in ("workbench", "torch", "mlflow", "optuna", "numpy", "transformers", "vllm"):
        try:
            tags[f"version.{package}"] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            tags[f"version.{package}"] = "not installed"
    return tags | gpu_tags()


def split_tag(key: str, text: str) -> dict[str, str]:
    """``text`` as tags ``key``, ``key.1``, ``key.2``, ... of at most ``TAG_VALUE_CHARS``
    each (``joined_tag`` reads it back)."""
    size = TAG_VALUE_CHARS
    return {_part_key(key, i // size): text[i : i + size] for i in range(0, len(text), size)}


def joined_tag(tags: Mapping[str, Any], key: str) -> str | None:
    """The text ``split_tag`` wrote under ``key``; None when the run has none. Parts left over
    from a longer earlier text may follow: readers parse the first JSON value."""
    parts = []
    while isinstance(tags.get(_part_key(key, len(parts))), str):
        parts.append(tags[_part_key(key, len(parts))])
    return "".join(parts) if parts else None


def _part_key(key: str, index: int) -> str:
    return key if index == 0 else f"{key}.{index}"


DESCRIPTION = "mlflow.note.content"  # the experiment's description, as the UI shows it


def ensure_experiment(client, name: str, store, description: str = "") -> str:
    """The id of the sweep's experiment, created (or restored from deleted) when needed under
    ``store``'s artifact root (``Store.artifacts_uri``; a host-local folder records its host:
    ``artifacts.HOST_TAG``), with the spec's ``description`` as the one the UI shows (updated
    when the spec's changes). An existing experiment keeps its artifact location: asking for
    another shared root raises ``artifacts.ArtifactRootError``."""
    from workbench.store import artifacts

    experiment = client.get_experiment_by_name(name)
    location = artifacts.experiment_location(store.artifacts_uri, name)
    if experiment is not None:
        if store.shared_artifacts and experiment.artifact_location != location:
            raise artifacts.ArtifactRootError(
                f"sweep {name}: its experiment keeps its artifacts in "
                f"{experiment.artifact_location} (an experiment's artifact location is fixed "
                f"when it is created); asked for {location}: drop the artifact root, or give "
                "the sweep a new name")
        artifacts.check_reachable(experiment, this_host())
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        if description and experiment.tags.get(DESCRIPTION) != description:
            client.set_experiment_tag(experiment.experiment_id, DESCRIPTION, description)
        return experiment.experiment_id
    # the UI opens it in its model-training view (runs, metric charts), not the GenAI one
    tags = {"mlflow.experimentKind": "custom_model_development"}
    if store.shared_artifacts is None:
        tags[artifacts.HOST_TAG] = this_host()
    if description:
        tags[DESCRIPTION] = description
    return client.create_experiment(name, artifact_location=location, tags=tags)


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
        items = [Param(k, param_value(v)) for k, v in params.items()]
        for i in range(0, len(items), 100):
            client.log_batch(run_id, params=items[i : i + 100])
    return run_id


def param_value(value: Any) -> str:
    """A param's stored text: cut to fit MLflow's longest param value."""
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
