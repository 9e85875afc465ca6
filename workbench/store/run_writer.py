"""Opening and closing a trial's runs in one transaction each, by writing MLflow's own rows.

A trial opens its run and one run per seed, and closes them when it ends. Through MLflow's
client that is four commits per run (``create_run``, the params' ``log_batch``, the end's
``log_batch`` and ``set_terminated``). ``RunWriter`` writes the rows those calls write, for any
number of runs at once, in one transaction:

- ``runs``: run_uuid (a uuid4 hex), name, source_type ``UNKNOWN``, empty source_name,
  entry_point_name and source_version, user_id ``unknown``, status ``RUNNING``, start_time,
  lifecycle_stage ``active``, artifact_uri ``<experiment's artifact location>/<run>/artifacts``,
  experiment_id (``SqlAlchemyStore.create_run``);
- ``tags``: the run's tags and ``mlflow.runName`` (plus ``mlflow.parentRunId`` for a child);
  ``params``: its parameters (a value longer than MLflow allows is cut as ``runs`` cuts it);
- an artifact's text (``log_text``) straight into a local (``file:``) artifact folder, where
  MLflow's local artifact repository puts it (other artifact stores: MLflow's client);
- at the end: status and end_time (``update_run_info``), the end's tags (``mlflow.runName``
  also renames the run, as ``set_tag`` does) and its metrics at step 0 into ``metrics`` and
  ``latest_metrics`` (the sink's rows).

It is the sink's write path (``workbench.store.sink.open_writer``) with the same check: the
tables it writes must have exactly the columns and primary keys of ``WRITTEN``, else it says so
once and opens and closes runs through ``workbench.store.runs`` (MLflow's client) instead.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.store import runs
from workbench.store.sink import UPSERT_LATEST, open_writer, rows_for
from workbench.store.sink import WRITTEN as METRIC_TABLES

WRITTEN = {
    **METRIC_TABLES,
    "runs": (frozenset({"run_uuid", "name", "source_type", "source_name", "entry_point_name",
                        "user_id", "status", "start_time", "end_time", "source_version",
                        "lifecycle_stage", "artifact_uri", "experiment_id", "deleted_time"}),
             frozenset({"run_uuid"})),
    "tags": (frozenset({"key", "value", "run_uuid"}), frozenset({"key", "run_uuid"})),
    "params": (frozenset({"key", "value", "run_uuid"}), frozenset({"key", "run_uuid"})),
}
INSERT_RUN = (
    "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, "
    "status, start_time, end_time, source_version, lifecycle_stage, artifact_uri, "
    "experiment_id, deleted_time) "
    "VALUES (?, ?, 'UNKNOWN', '', '', 'unknown', 'RUNNING', ?, NULL, '', 'active', ?, ?, NULL)")
INSERT_PARAM = "INSERT INTO params (key, value, run_uuid) VALUES (?, ?, ?)"
UPSERT_TAG = ("INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?) "
              "ON CONFLICT (key, run_uuid) DO UPDATE SET value = excluded.value")
END_RUN = "UPDATE runs SET status = ?, end_time = ? WHERE run_uuid = ?"
RENAME_RUN = "UPDATE runs SET name = ? WHERE run_uuid = ?"
INSERT_METRIC = ("INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
                 "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING")


@dataclass(frozen=True)
class NewRun:
    """A run to open: its name, tags and params, below ``parent`` when given."""

    name: str
    tags: Mapping[str, Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    parent: str | None = None


@dataclass(frozen=True)
class RunEnd:
    """How a run ends: an outcome of ``runs.STATUS``, tags, metrics and a new name."""

    run_id: str
    state: str
    tags: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    name: str | None = None


@dataclass(frozen=True)
class Retag:
    """Tags to set on a run that exists (and a new name); its status and times stay."""

    run_id: str
    tags: Mapping[str, Any]
    name: str | None = None


class RunWriter:
    """Opens and closes runs in one transaction per call (MLflow's client where the store's
    layout is not the one it knows)."""

    def __init__(self, client, tracking_url: str, written=WRITTEN):
        self.client = client
        self.writer = open_writer(tracking_url, written, "run writer", "client")
        self._locations: dict[str, str] = {}
        self._artifacts: dict[str, str] = {}  # run id -> artifact URI, for runs still open

    @property
    def fast(self) -> bool:
        """False when opening and closing runs through MLflow's client."""
        return self.writer is not None

    def start(self, experiment_id: str, new: list[NewRun]) -> list[str]:
        """Open the runs ``new`` in ``experiment_id``; their ids, in order."""
        if self.writer is None:
            return [runs.start_run(self.client, experiment_id, n.name, tags=n.tags,
                                   params=n.params, parent=n.parent) for n in new]
        from mlflow.utils.uri import append_to_uri_path

        location = self._location(experiment_id)
        now = int(time.time() * 1000)
        ids = [uuid.uuid4().hex for _ in new]
        run_rows, tag_rows, param_rows = [], [], []
        for run_id, n in zip(ids, new, strict=True):
            self._artifacts[run_id] = append_to_uri_path(location, run_id, "artifacts")
            run_rows.append((run_id, n.name, now, self._artifacts[run_id], int(experiment_id)))
            tags = {**{k: str(v) for k, v in n.tags.items()}, "mlflow.runName": n.name}
            if n.parent:
                tags["mlflow.parentRunId"] = n.parent
            tag_rows.extend((k, v, run_id) for k, v in tags.items())
            param_rows.extend((k, runs.param_value(v), run_id) for k, v in n.params.items())
        self.writer.apply([(INSERT_RUN, run_rows), (UPSERT_TAG, tag_rows),
                           (INSERT_PARAM, param_rows)])
        return ids

    def finish(self, ends: list[RunEnd]) -> None:
        """Close every run of ``ends`` as it says."""
        if self.writer is None:
            for end in ends:
                runs.finish_run(self.client, end.run_id, end.state, tags=end.tags,
                                metrics=end.metrics, name=end.name)
            return
        now = int(time.time() * 1000)
        tag_rows, renames, records = [], [], []
        for end in ends:
            self._artifacts.pop(end.run_id, None)
            tag_rows.extend((k, str(v), end.run_id) for k, v in end.tags.items())
            if end.name:
                tag_rows.append(("mlflow.runName", end.name, end.run_id))
                renames.append((end.name, end.run_id))
            if end.metrics:
                records.append((end.run_id, 0, now, end.metrics))
        metric_rows, latest_rows = rows_for(records)
        self.writer.apply([
            (UPSERT_TAG, tag_rows), (RENAME_RUN, renames),
            (INSERT_METRIC, [(*r[:5], bool(r[5])) for r in metric_rows]),
            (UPSERT_LATEST, [(*r[:4], bool(r[4]), r[5]) for r in latest_rows]),
            (END_RUN, [(runs.STATUS[end.state], now, end.run_id) for end in ends])])

    def retag(self, changes: list[Retag]) -> None:
        """Set the tags (and names) of ``changes`` on their runs, all in one write."""
        if self.writer is None:
            from mlflow.entities import RunTag

            for change in changes:
                items = [RunTag(k, str(v)) for k, v in change.tags.items()]
                if change.name:
                    items.append(RunTag("mlflow.runName", change.name))
                self.client.log_batch(change.run_id, tags=items)
            return
        tag_rows, renames = [], []
        for change in changes:
            tag_rows.extend((k, str(v), change.run_id) for k, v in change.tags.items())
            if change.name:
                tag_rows.append(("mlflow.runName", change.name, change.run_id))
                renames.append((change.name, change.run_id))
        self.writer.apply([(UPSERT_TAG, tag_rows), (RENAME_RUN, renames)])

    def log_text(self, run_id: str, text: str, path: str) -> None:
        """Store ``text`` as the open run's artifact ``path``."""
        uri = self._artifacts.get(run_id)
        if uri is None or not uri.startswith("file:"):
            self.client.log_text(run_id, text, path)
            return
        from mlflow.utils.file_utils import local_file_uri_to_path

        target = Path(local_file_uri_to_path(uri)) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        partial.write_text(text)
        os.replace(partial, target)  # whole or absent, even when the process is killed

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def _location(self, experiment_id: str) -> str:
        if experiment_id not in self._locations:
            experiment = self.client.get_experiment(experiment_id)
            self._locations[experiment_id] = experiment.artifact_location
        return self._locations[experiment_id]
