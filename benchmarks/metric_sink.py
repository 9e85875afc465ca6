"""Metric sink speed, as ratios against MLflow's own paths, measured in one run.

    .venv/bin/python benchmarks/metric_sink.py            # SQLite, full sizes (~3 minutes)
    .venv/bin/python benchmarks/metric_sink.py --quick    # smaller sizes (~40 s)
    .venv/bin/python benchmarks/metric_sink.py --postgres postgresql://user@127.0.0.1/db

Write side (one process; on SQLite a fresh store file for each measurement):
``mlflow.log_metric``; ``MlflowClient.log_batch`` with batches of 1,000; a bare
``executemany`` of the same rows into the same two tables (``metrics`` and ``latest_metrics``:
MLflow's schema, the limit; on PostgreSQL a bare COPY); and the sink, sustained from the
first ``log`` to the end of ``flush``. Producer cost: time inside ``log`` per point.
Writer lag: while a producer logs flat out through a sink with the engine's settings, how far
the writer runs behind, in seconds and points, sampled every 10 ms: what a SIGKILL at that
moment would lose. This is the wall-clock figure; the sink promises (and tests/test_sink.py
checks) only a bound in points, since a loaded machine can leave the writer further behind.
Read side: every point of RUNS x STEPS x 4 metrics into one DataFrame through
``workbench.store.results.metric_history`` (one query) against ``MlflowClient.get_metric_history``
run by run (timed on a sample of runs and scaled to all of them, as the output says).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

logging.getLogger("mlflow").setLevel(logging.ERROR)
logging.getLogger("alembic").setLevel(logging.ERROR)

KEYS = [f"m{i}" for i in range(10)]


def make_store(url: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    experiment = client.create_experiment(f"bench-{time.time_ns()}")
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            db.execute("PRAGMA journal_mode=WAL")
    return client, experiment


def new_run(client, experiment) -> str:
    return client.create_run(experiment).info.run_id


def records(run_id: str, steps: int, keys=KEYS):
    stamp = int(time.time() * 1000)
    return [(run_id, s, stamp + s, {k: s * 0.001 + i for i, k in enumerate(keys)})
            for s in range(steps)]


def bench_log_metric(url, points):
    import mlflow

    mlflow.set_tracking_uri(url)
    client, experiment = make_store(url)
    with mlflow.start_run(experiment_id=experiment):
        started = time.perf_counter()
        for i in range(points):
            mlflow.log_metric("loss", i * 0.5, step=i)
        return points / (time.perf_counter() - started)


def bench_log_batch(url, steps):
    from mlflow.entities import Metric

    client, experiment = make_store(url)
    run = new_run(client, experiment)
    metrics = [Metric(k, v, t, s) for _, s, t, m in records(run, steps) for k, v in m.items()]
    started = time.perf_counter()
    for i in range(0, len(metrics), 1000):
        client.log_batch(run, metrics=metrics[i : i + 1000])
    return len(metrics) / (time.perf_counter() - started)


def bench_bare(url, steps):
    from workbench.store.sink import _PostgresWriter, _SqliteWriter, rows_for

    client, experiment = make_store(url)
    run = new_run(client, experiment)
    rows, latest = rows_for(records(run, steps))
    if url.startswith("sqlite:///"):
        db = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        db.execute("PRAGMA synchronous=NORMAL")
        started = time.perf_counter()
        db.execute("BEGIN")
        db.executemany(_SqliteWriter.INSERT.replace("OR IGNORE ", ""), rows)
        db.executemany(_SqliteWriter.UPSERT, latest)
        db.execute("COMMIT")
        elapsed = time.perf_counter() - started
        db.close()
    else:  # COPY straight into the table: the fastest bulk load PostgreSQL has
        from psycopg2.extras import execute_values

        writer = _PostgresWriter(url)
        started = time.perf_counter()
        with writer.db.cursor() as cur:
            cur.copy_expert("COPY metrics (key, value, timestamp, run_uuid, step, is_nan) "
                            "FROM STDIN", writer.copy_text(rows))
            execute_values(cur, _PostgresWriter.UPSERT,
                           [(k, v, t, s, bool(n), r) for k, v, t, s, n, r in latest])
        writer.db.commit()
        elapsed = time.perf_counter() - started
        writer.close()
    return len(rows) / elapsed


def bench_sink(url, steps, runs=1):
    from workbench.store.sink import MetricSink

    client, experiment = make_store(url)
    run_ids = [new_run(client, experiment) for _ in range(runs)]
    batches = [records(r, steps) for r in run_ids]
    points = sum(len(m) for batch in batches for *_, m in batch)
    in_log = 0.0
    with MetricSink(url) as sink:
        assert sink.fast, "the sink fell back to log_batch: unknown schema"
        started = time.perf_counter()
        for batch in batches:
            for run_id, step, stamp, metrics in batch:
                t = time.perf_counter()
                sink.log(run_id, step, metrics, timestamp_ms=stamp)
                in_log += time.perf_counter() - t
        sink.flush()
        elapsed = time.perf_counter() - started
    return points / elapsed, in_log / points * 1e6, client, experiment, run_ids


def bench_lag(url, seconds):
    """Samples (seconds, points) of what is logged but not committed, every 10 ms, while one
    producer logs 4 metrics a step flat out for `seconds` (pausing 10 ms every 500 steps, as a
    loop between evaluations); and the steps logged."""
    from workbench.store.sink import MetricSink

    client, experiment = make_store(url)
    run = new_run(client, experiment)
    logged_at: list[float] = []  # when each step's log() returned
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    with MetricSink(url) as sink:  # the engine's settings
        def monitor():
            while not stop.is_set():
                now, written, logged = time.perf_counter(), sink._written, len(logged_at)
                if written < logged:  # the oldest uncommitted step is step `written`
                    samples.append((now - logged_at[written], 4 * (logged - written)))
                else:
                    samples.append((0.0, 0))
                time.sleep(0.01)

        watcher = threading.Thread(target=monitor, daemon=True)
        watcher.start()
        started, step = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            sink.log(run, step, {"a": step, "b": -step, "c": step * 0.5, "d": 1.0})
            logged_at.append(time.perf_counter())
            step += 1
            if step % 500 == 0:
                time.sleep(0.01)
        stop.set()
        watcher.join()
        bound = 2 * (sink.max_pending + 4 - 1)
    return samples, step, bound


def bench_read(url, runs, steps, sample):
    from workbench.store import results
    from workbench.store.database import Store

    keys = KEYS[:4]
    _, _, client, experiment, run_ids = bench_sink_keys(url, runs, steps, keys)
    store = Store(optuna_url=url, mlflow_url=url, artifact_root=Path("."))
    started = time.perf_counter()
    frame = results.metric_history(store, experiment, keys)
    ours = time.perf_counter() - started
    assert len(frame) == runs * steps * len(keys), len(frame)
    started = time.perf_counter()
    parts = []
    for run_id in run_ids[:sample]:
        for key in keys:
            parts.extend((run_id, key, m.step, m.value)
                         for m in client.get_metric_history(run_id, key))
    pd.DataFrame(parts, columns=["run_id", "key", "step", "value"])
    theirs = (time.perf_counter() - started) * runs / sample
    return ours, theirs, len(frame)


def bench_sink_keys(url, runs, steps, keys):
    from workbench.store.sink import MetricSink

    client, experiment = make_store(url)
    run_ids = [new_run(client, experiment) for _ in range(runs)]
    with MetricSink(url) as sink:
        for run_id in run_ids:
            for _, step, stamp, metrics in records(run_id, steps, keys):
                sink.log(run_id, step, metrics, timestamp_ms=stamp)
    return None, None, client, experiment, run_ids


def report(label, fresh, sizes):
    """``fresh(name)`` gives the URL of an empty store (SQLite: a new file per measurement)."""
    print(f"\n== {label}: {fresh('probe').split('@')[-1]}")
    sink_rate, producer_us, *_ = bench_sink(fresh("sink"), sizes["sink_steps"])
    batch_rate = bench_log_batch(fresh("batch"), sizes["batch_steps"])
    single_rate = bench_log_metric(fresh("single"), sizes["single_points"])
    bare_rate = bench_bare(fresh("bare"), sizes["sink_steps"])
    url = fresh("read")
    print(f"sink sustained write        {sink_rate:12,.0f} points/s  "
          f"({sizes['sink_steps'] * len(KEYS):,} points)")
    print(f"MlflowClient.log_batch      {batch_rate:12,.0f} points/s  -> sink is "
          f"{sink_rate / batch_rate:6.1f}x faster (target >= 12x)")
    print(f"mlflow.log_metric           {single_rate:12,.0f} points/s  -> sink is "
          f"{sink_rate / single_rate:6.0f}x faster")
    print(f"bare bulk load (limit)      {bare_rate:12,.0f} points/s  -> sink reaches "
          f"{sink_rate / bare_rate:6.2f}x of it; limit/sink = {bare_rate / sink_rate:.2f} "
          f"(target <= 1.5)")
    print(f"producer cost per point     {producer_us:12.2f} us        (target <= 5 us)")
    samples, steps_logged, bound = bench_lag(fresh("lag"), sizes["lag_seconds"])
    lags = sorted(lag for lag, _ in samples)
    print(f"writer lag behind a flat-out producer ({steps_logged:,} steps x 4 metrics in "
          f"{sizes['lag_seconds']} s, {len(samples)} samples): median "
          f"{lags[len(lags) // 2]:.3f} s, p99 {lags[int(len(lags) * 0.99)]:.3f} s, max "
          f"{lags[-1]:.3f} s; at most {max(p for _, p in samples):,} points (what a SIGKILL "
          f"would lose; promised: <= {bound:,} points)")
    runs, steps, sample = sizes["read"]
    ours, theirs, n = bench_read(url, runs, steps, sample)
    print(f"read {runs} runs x {steps} steps x 4 metrics ({n:,} points): one query "
          f"{ours:.2f} s; get_metric_history run by run {theirs:.1f} s (timed on {sample} "
          f"runs, scaled x{runs / sample:.0f}) -> {theirs / ours:.0f}x faster (target >= 20x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--postgres", help="also measure on this PostgreSQL URL "
                                           "(an MLflow store is created in it)")
    args = parser.parse_args()
    sizes = ({"sink_steps": 20_000, "batch_steps": 2_000, "single_points": 100,
              "read": (100, 1000, 10), "lag_seconds": 3} if args.quick else
             {"sink_steps": 100_000, "batch_steps": 5_000, "single_points": 300,
              "read": (1000, 1000, 25), "lag_seconds": 10})
    with tempfile.TemporaryDirectory() as folder:
        report("SQLite", lambda name: f"sqlite:///{folder}/{name}.mlflow.db", sizes)
    if args.postgres:  # one database: each measurement writes its own new runs
        report("PostgreSQL", lambda name: args.postgres, sizes)


if __name__ == "__main__":
    main()
