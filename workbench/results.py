"""Read a sweep's runs back from the store with direct SQL into pandas (one query per table,
for all runs of the experiment), not one MLflow client call per run."""

from __future__ import annotations

import pandas as pd
import sqlalchemy as sa

from workbench.store import Store


def _engine(store: Store) -> sa.Engine:
    return sa.create_engine(store.mlflow_url, poolclass=sa.pool.NullPool)


def experiment_id(store: Store, name: str) -> str | None:
    with _engine(store).connect() as conn:
        row = conn.execute(sa.text("SELECT experiment_id FROM experiments WHERE name = :n "
                                   "AND lifecycle_stage = 'active'"), {"n": name}).first()
    return None if row is None else str(row[0])


def runs(store: Store, experiment: str) -> pd.DataFrame:
    """One row per run: run_id, status, name, start/end times and every tag as a column."""
    query = sa.text(
        "SELECT r.run_uuid AS run_id, r.status, r.name AS run_name, r.start_time, r.end_time, "
        "t.key, t.value FROM runs r LEFT JOIN tags t ON t.run_uuid = r.run_uuid "
        "WHERE r.experiment_id = :e AND r.lifecycle_stage = 'active'")
    with _engine(store).connect() as conn:
        long = pd.read_sql(query, conn, params={"e": int(experiment)})
    if long.empty:
        return pd.DataFrame(columns=["run_id", "status", "run_name"])
    base = long.drop_duplicates("run_id")[["run_id", "status", "run_name", "start_time",
                                           "end_time"]]
    tags = long.dropna(subset=["key"]).pivot(index="run_id", columns="key", values="value")
    return base.merge(tags, left_on="run_id", right_index=True, how="left").reset_index(drop=True)


def params(store: Store, experiment: str) -> pd.DataFrame:
    """One row per run, one column per param (values as MLflow stores them: strings)."""
    query = sa.text("SELECT p.run_uuid AS run_id, p.key, p.value FROM params p JOIN runs r "
                    "ON r.run_uuid = p.run_uuid WHERE r.experiment_id = :e")
    with _engine(store).connect() as conn:
        long = pd.read_sql(query, conn, params={"e": int(experiment)})
    if long.empty:
        return pd.DataFrame(columns=["run_id"])
    return long.pivot(index="run_id", columns="key", values="value").reset_index()


def metric_history(store: Store, experiment: str, keys: list[str]) -> pd.DataFrame:
    """Every logged point of ``keys`` for every run: run_id, key, step, value (NaN restored)."""
    query = sa.text(
        "SELECT m.run_uuid AS run_id, m.key, m.step, m.value, m.is_nan FROM metrics m "
        "JOIN runs r ON r.run_uuid = m.run_uuid WHERE r.experiment_id = :e "
        "AND m.key IN :keys").bindparams(sa.bindparam("keys", expanding=True))
    with _engine(store).connect() as conn:
        frame = pd.read_sql(query, conn, params={"e": int(experiment), "keys": list(keys)})
    frame.loc[frame["is_nan"].astype(bool), "value"] = float("nan")
    return frame.drop(columns="is_nan").sort_values(["run_id", "key", "step"],
                                                    ignore_index=True)
