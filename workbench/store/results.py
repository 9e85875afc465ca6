"""Read a sweep's runs back from the store with direct SQL into pandas (one query per table,
for all runs of the experiment), not one MLflow client call per run."""

from __future__ import annotations

import contextlib
import io
import sqlite3
from collections.abc import Sequence

import numpy as np
import pandas as pd
import sqlalchemy as sa

from workbench.store.database import Store


def _engine(store: Store) -> sa.Engine:
    return sa.create_engine(store.mlflow_url, poolclass=sa.pool.NullPool)


def experiment_id(store: Store, name: str) -> str | None:
    with _engine(store).connect() as conn:
        row = conn.execute(sa.text("SELECT experiment_id FROM experiments WHERE name = :n "
                                   "AND lifecycle_stage = 'active'"), {"n": name}).first()
    return None if row is None else str(row[0])


def experiment_tags(store: Store, experiment: str) -> dict[str, str]:
    """The tags of one experiment."""
    with _engine(store).connect() as conn:
        rows = conn.execute(sa.text("SELECT key, value FROM experiment_tags WHERE "
                                    "experiment_id = :e"), {"e": int(experiment)}).all()
    return {key: value for key, value in rows}


def _ids(experiments: str | Sequence[str]) -> list[int]:
    """Experiment ids as integers, from one id or several."""
    return [int(experiments)] if isinstance(experiments, str) else [int(e) for e in experiments]


def runs(store: Store, experiments: str | Sequence[str]) -> pd.DataFrame:
    """One row per run of the experiment(s): run_id, status, name, start/end times and every
    tag as a column."""
    query = sa.text(
        "SELECT r.run_uuid AS run_id, r.status, r.name AS run_name, r.start_time, r.end_time, "
        "t.key, t.value FROM runs r LEFT JOIN tags t ON t.run_uuid = r.run_uuid "
        "WHERE r.experiment_id IN :e AND r.lifecycle_stage = 'active'"
    ).bindparams(sa.bindparam("e", expanding=True))
    with _engine(store).connect() as conn:
        long = pd.read_sql(query, conn, params={"e": _ids(experiments)})
    if long.empty:
        return pd.DataFrame(columns=["run_id", "status", "run_name"])
    base = long.drop_duplicates("run_id")[["run_id", "status", "run_name", "start_time",
                                           "end_time"]]
    tags = long.dropna(subset=["key"]).pivot(index="run_id", columns="key", values="value")
    return base.merge(tags, left_on="run_id", right_index=True, how="left").reset_index(drop=True)


def params(store: Store, experiments: str | Sequence[str]) -> pd.DataFrame:
    """One row per run, one column per param (values as MLflow stores them: strings)."""
    return _wide(store, experiments, "SELECT p.run_uuid AS run_id, p.key, p.value FROM params "
                 "p JOIN runs r ON r.run_uuid = p.run_uuid WHERE r.experiment_id IN :e")


def latest_metrics(store: Store, experiments: str | Sequence[str]) -> pd.DataFrame:
    """One row per run, one column per metric: its value at the run's last logged step
    (MLflow's ``latest_metrics``; NaN restored)."""
    return _wide(store, experiments, "SELECT m.run_uuid AS run_id, m.key, CASE WHEN m.is_nan "
                 "THEN NULL ELSE m.value END AS value FROM latest_metrics m JOIN runs r ON "
                 "r.run_uuid = m.run_uuid WHERE r.experiment_id IN :e", float)


def _wide(store: Store, experiments: str | Sequence[str], query: str,
          dtype: type | None = None) -> pd.DataFrame:
    """A (run_id, key, value) query over the experiments ``:e``, one row per run and one
    column per key."""
    statement = sa.text(query).bindparams(sa.bindparam("e", expanding=True))
    with _engine(store).connect() as conn:
        long = pd.read_sql(statement, conn, params={"e": _ids(experiments)})
    if long.empty:
        return pd.DataFrame(columns=["run_id"])
    if dtype is not None:
        long["value"] = long["value"].astype(dtype)
    return long.pivot(index="run_id", columns="key", values="value").reset_index()


def metric_history(store: Store, experiments: str | Sequence[str],
                   keys: list[str]) -> pd.DataFrame:
    """Every logged point of ``keys`` for every run of the experiment(s): run_id, key, step,
    value (NaN restored), sorted by run, key and step. One query; on SQLite, runs and keys
    travel as small integer codes (strings per row are what makes reading millions of points
    slow)."""
    keys, ids = list(dict.fromkeys(keys)), _ids(experiments)
    if store.mlflow_url.startswith("sqlite:///") and keys:
        frame = _sqlite_history(store.mlflow_url.removeprefix("sqlite:///"), ids, keys)
    elif store.mlflow_url.startswith("postgresql") and keys:
        frame = _postgres_history(store, ids, keys)
    else:
        query = sa.text(
            "SELECT m.run_uuid AS run_id, m.key, m.step, "
            "CASE WHEN m.is_nan THEN NULL ELSE m.value END AS value FROM metrics m "
            "JOIN runs r ON r.run_uuid = m.run_uuid WHERE r.experiment_id IN :e "
            "AND m.key IN :keys").bindparams(sa.bindparam("keys", expanding=True),
                                             sa.bindparam("e", expanding=True))
        with _engine(store).connect() as conn:
            frame = pd.read_sql(query, conn, params={"e": ids, "keys": keys})
        frame["value"] = frame["value"].astype(float)
    return frame.sort_values(["run_id", "key", "step"], ignore_index=True)


def _sqlite_history(path: str, experiments: list[int], keys: list[str]) -> pd.DataFrame:
    within = f"experiment_id IN ({','.join('?' * len(experiments))})"
    with contextlib.closing(sqlite3.connect(path, timeout=120)) as db:
        run_ids = [r for (r,) in db.execute(
            f"SELECT run_uuid FROM runs WHERE {within} ORDER BY run_uuid", experiments)]
        cases = " ".join(f"WHEN ? THEN {i}" for i in range(len(keys)))
        marks = ",".join("?" * len(keys))
        rows = db.execute(
            "WITH r AS (SELECT run_uuid, ROW_NUMBER() OVER (ORDER BY run_uuid) - 1 AS code "
            f"FROM runs WHERE {within}) "
            f"SELECT r.code, CASE m.key {cases} END, m.step, "
            "CASE WHEN m.is_nan THEN NULL ELSE m.value END "
            f"FROM metrics m JOIN r ON r.run_uuid = m.run_uuid WHERE m.key IN ({marks})",
            (*experiments, *keys, *keys)).fetchall()
    table = np.array(rows, dtype=np.float64).reshape(-1, 4)
    return pd.DataFrame({
        "run_id": pd.Categorical.from_codes(table[:, 0].astype(np.int64), run_ids or [""]),
        "key": pd.Categorical.from_codes(table[:, 1].astype(np.int64), keys),
        "step": table[:, 2].astype(np.int64),
        "value": table[:, 3],
    })


def _postgres_history(store: Store, experiments: list[int], keys: list[str]) -> pd.DataFrame:
    """COPY ... TO STDOUT as CSV, parsed by pandas' C reader (floats print exactly on
    PostgreSQL 12 and later)."""
    engine = _engine(store)
    raw = engine.raw_connection()
    try:
        with raw.cursor() as cur:
            query = cur.mogrify(
                "SELECT m.run_uuid, m.key, m.step, "
                "CASE WHEN m.is_nan THEN NULL ELSE m.value END FROM metrics m "
                "JOIN runs r ON r.run_uuid = m.run_uuid "
                "WHERE r.experiment_id = ANY(%s) AND m.key = ANY(%s)",
                (experiments, keys)).decode()
            text = io.StringIO()
            cur.copy_expert(f"COPY ({query}) TO STDOUT WITH CSV", text)
    finally:
        raw.close()
        engine.dispose()
    text.seek(0)
    return pd.read_csv(text, names=["run_id", "key", "step", "value"],
                       dtype={"run_id": "category", "key": "category", "step": np.int64,
                              "value": np.float64})
