"""The metric sink writes exactly what MLflow's client would, fast, and survives a SIGKILL."""

import logging
import math
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from workbench import results
from workbench.sink import KNOWN_REVISIONS, MetricSink
from workbench.store import Store

POINTS = [  # (key, value, timestamp_ms, step): NaN, +-Inf, duplicates, steps out of order
    ("loss", 1.5, 1000, 0), ("loss", 1.2, 1001, 1), ("loss", float("nan"), 1002, 2),
    ("loss", 0.9, 1003, 3), ("loss", 0.9, 1003, 3), ("loss", 0.8, 1003, 3),
    ("acc", 0.1, 1000, 5), ("acc", 0.2, 1000, 4), ("acc", float("inf"), 1001, 6),
    ("acc", float("-inf"), 1001, 6), ("grad", float("-inf"), 900, 10), ("grad", 3.0, 900, 1),
    ("nan_last", 2.0, 1000, 0), ("nan_last", float("nan"), 1000, 9),
]


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(url)
    experiment = client.create_experiment("sink")
    with sqlite3.connect(tmp_path / "m.db") as db:
        db.execute("PRAGMA journal_mode=WAL")
    return url, client, experiment


@pytest.fixture(scope="module")
def pg_store(postgres):
    url = postgres.new_database()
    client = MlflowClient(url)
    return url, client, client.create_experiment("sink")


def history(client, run_id, key):
    return sorted((m.step, m.timestamp, "nan" if math.isnan(m.value) else m.value)
                  for m in client.get_metric_history(run_id, key))


def latest(client, run_id):
    metrics = client.get_run(run_id).data.metrics
    return {k: "nan" if math.isnan(v) else v for k, v in metrics.items()}


def log_both(client, experiment, sink_kwargs, url, batches):
    ours = client.create_run(experiment).info.run_id
    theirs = client.create_run(experiment).info.run_id
    with MetricSink(url, **sink_kwargs) as sink:
        for batch in batches:
            for key, value, stamp, step in batch:
                sink.log(ours, step, {key: value}, timestamp_ms=stamp)
            sink.flush()
    for batch in batches:
        client.log_batch(theirs, metrics=[Metric(k, v, t, s) for k, v, t, s in batch])
    return ours, theirs


@pytest.mark.parametrize("split", [1, 3], ids=["one batch", "three batches"])
def test_sink_matches_mlflow_client_point_for_point(store, split):
    url, client, experiment = store
    size = math.ceil(len(POINTS) / split)
    batches = [POINTS[i : i + size] for i in range(0, len(POINTS), size)]
    ours, theirs = log_both(client, experiment, {}, url, batches)
    for key in {p[0] for p in POINTS}:
        assert history(client, ours, key) == history(client, theirs, key), key
    assert latest(client, ours) == latest(client, theirs)
    frame = client.search_runs([experiment])
    by_id = {r.info.run_id: r.data.metrics for r in frame}
    assert str(by_id[ours]) == str(by_id[theirs])


def test_sink_matches_mlflow_client_on_postgresql(pg_store):
    url, client, experiment = pg_store
    batches = [POINTS[:5], POINTS[5:]]
    ours, theirs = log_both(client, experiment, {}, url, batches)
    with MetricSink(url) as sink:
        assert sink.fast
    for key in {p[0] for p in POINTS}:
        assert history(client, ours, key) == history(client, theirs, key), key
    assert latest(client, ours) == latest(client, theirs)
    assert_read_side_matches(url, client, experiment, [ours, theirs])


def assert_read_side_matches(url, client, experiment, run_ids):
    """workbench.results reads, in one query, what MlflowClient reads run by run."""
    keys = sorted({p[0] for p in POINTS})
    frame = results.metric_history(Store(url, url, Path(".")), experiment, keys)
    for run_id in run_ids:
        for key in keys:
            mine = frame[(frame["run_id"] == run_id) & (frame["key"] == key)]
            got = sorted((int(s), "nan" if math.isnan(v) else v)
                         for s, v in zip(mine["step"], mine["value"], strict=True))
            assert got == sorted((s, v) for s, _, v in history(client, run_id, key))


def test_read_side_matches_the_client_on_sqlite(store):
    url, client, experiment = store
    ours, theirs = log_both(client, experiment, {}, url, [POINTS])
    assert_read_side_matches(url, client, experiment, [ours, theirs])


def test_schema_is_known_or_the_sink_falls_back(store, caplog):
    url, client, _ = store
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        revision = db.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        columns = {t: [row[1] for row in db.execute(f"PRAGMA table_info({t})")]
                   for t in ("metrics", "latest_metrics")}
    assert set(columns["metrics"]) == {"key", "value", "timestamp", "run_uuid", "step", "is_nan"}
    assert set(columns["latest_metrics"]) == set(columns["metrics"])
    with MetricSink(url) as sink:
        assert sink.fast == (revision in KNOWN_REVISIONS)


def test_unknown_schema_writes_through_log_batch_and_says_so_once(store, caplog):
    url, client, experiment = store
    with caplog.at_level(logging.WARNING, logger="workbench.sink"):
        ours, theirs = log_both(client, experiment, {"known_revisions": frozenset()}, url,
                                [POINTS])
        MetricSink(url, known_revisions=frozenset()).close()
    warnings = [r for r in caplog.records if "is not one it knows" in r.getMessage()]
    assert len(warnings) <= 1
    for key in {p[0] for p in POINTS}:
        assert history(client, ours, key) == history(client, theirs, key)
    assert latest(client, ours) == latest(client, theirs)


def test_a_full_queue_slows_the_producer_instead_of_growing(store, tmp_path):
    url, client, experiment = store
    run = client.create_run(experiment).info.run_id
    blocker = sqlite3.connect(tmp_path / "m.db", isolation_level=None,
                              check_same_thread=False)
    blocker.execute("BEGIN EXCLUSIVE")  # the writer cannot commit while this is held
    release = threading.Timer(1.0, lambda: blocker.execute("COMMIT"))
    release.start()
    sink = MetricSink(url, max_pending=500, flush_interval=0.01)
    started = time.perf_counter()
    waited = 0.0
    for step in range(400):
        before = time.perf_counter()
        sink.log(run, step, {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})
        waited = max(waited, time.perf_counter() - before)
    sink.close()
    release.join()
    assert sink.peak_pending <= 500 + 4
    assert waited > 0.5 and time.perf_counter() - started < 60  # blocked while the lock held
    assert len(client.get_metric_history(run, "d")) == 400


def test_writer_errors_reach_the_producer(store):
    url, client, experiment = store
    sink = MetricSink(url)
    sink.log("no-such-run", 0, {"a": 1.0})
    with pytest.raises(RuntimeError, match="writer failed"):
        sink.flush()


CHILD = textwrap.dedent("""
    import sys, time
    from workbench.sink import MetricSink
    url, run = sys.argv[1], sys.argv[2]
    sink = MetricSink(url, flush_interval=0.05)
    step = 0
    while True:
        sink.log(run, step, {"a": step, "b": -step, "c": step * 0.5, "d": 1.0})
        step += 1
        if step % 500 == 0:
            print(time.time(), step, flush=True)
            time.sleep(0.01)
""")


def test_sigkill_loses_at_most_the_last_second_and_leaves_the_store_consistent(store, tmp_path):
    url, client, experiment = store
    run = client.create_run(experiment).info.run_id
    child = subprocess.Popen([sys.executable, "-c", CHILD, url, run], stdout=subprocess.PIPE,
                             text=True)
    progress = []
    deadline = time.time() + 60
    while time.time() < deadline:
        stamp, step = child.stdout.readline().split()
        progress.append((float(stamp), int(step)))
        if progress[-1][0] - progress[0][0] > 2.0:
            break
    killed_at = time.time()
    child.kill()
    child.wait()
    with sqlite3.connect(tmp_path / "m.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        steps = {key: sorted(s for (s,) in db.execute(
            "SELECT step FROM metrics WHERE run_uuid = ? AND key = ?", (run, key)))
            for key in "abcd"}
        latest_steps = dict(db.execute(
            "SELECT key, step FROM latest_metrics WHERE run_uuid = ?", (run,)).fetchall())
    assert steps["a"] == steps["b"] == steps["c"] == steps["d"]  # whole batches only
    assert steps["a"] == list(range(len(steps["a"])))  # no holes
    assert latest_steps == dict.fromkeys("abcd", steps["a"][-1])
    reached_a_second_before = max(s for t, s in progress if t <= killed_at - 1.0)
    assert steps["a"][-1] + 1 >= reached_a_second_before
    assert client.get_run(run).info.status == "RUNNING"
