"""The metric sink writes exactly what MLflow's client would, fast, and survives a SIGKILL."""

import logging
import math
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from tests.waiting import scaled, tail, wait_until
from workbench.store import results
from workbench.store.database import Store
from workbench.store.sink import WRITTEN, MetricSink

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
    """workbench.store.results reads, in one query, what MlflowClient reads run by run."""
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


def test_the_sink_writes_directly_where_the_tables_are_as_it_writes_them(store):
    """The fast path is taken on the installed MLflow's schema, whose tables are read here
    with plain SQL; a layout it does not write (a column it does not know) takes the
    fallback."""
    url, client, _ = store
    path = url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        layout = {t: [(row[1], row[5]) for row in db.execute(f"PRAGMA table_info({t})")]
                  for t in ("metrics", "latest_metrics")}
    assert {name for name, _ in layout["metrics"]} == WRITTEN["metrics"][0]
    assert {name for name, pk in layout["latest_metrics"] if pk} == {"key", "run_uuid"}
    with MetricSink(url) as sink:
        assert sink.fast
    other = {**WRITTEN, "metrics": (WRITTEN["metrics"][0] | {"dataset_id"}, WRITTEN["metrics"][1])}
    with MetricSink(url, written=other) as sink:
        assert not sink.fast


UNKNOWN = {"metrics": (frozenset({"a column no store has"}), frozenset())}


def test_unknown_schema_writes_through_log_batch_and_says_so_once(store, caplog):
    url, client, experiment = store
    with caplog.at_level(logging.WARNING, logger="workbench.store.sink"):
        ours, theirs = log_both(client, experiment, {"written": UNKNOWN}, url, [POINTS])
        MetricSink(url, written=UNKNOWN).close()
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
    sink = MetricSink(url, max_pending=500, flush_interval=0.01)
    logged = []  # steps whose log() returned

    def produce():
        for step in range(400):  # 1,600 points, more than the queue and one batch hold
            sink.log(run, step, {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})
            logged.append(step)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        # Nothing can be committed, so the producer must come to a stop with the queue full:
        # at most the queue (max_pending points plus one step's) and the batch the writer is
        # stuck on (as many again) ahead of the store.
        wait_until(lambda: sink._pending >= sink.max_pending, "the producer to fill the queue",
                   120, describe_state=lambda: f"{len(logged)} steps logged, "
                   f"{sink._pending} points pending, producer alive: {producer.is_alive()}")
        held_at = len(logged)
        assert producer.is_alive() and held_at < 400
        assert held_at * 4 <= 2 * (500 + 4 - 1), held_at
        assert client.get_metric_history(run, "d") == []  # the lock held: nothing committed
    finally:
        blocker.execute("COMMIT")
    producer.join(scaled(120))
    assert not producer.is_alive(), f"the producer stayed blocked at step {len(logged)}"
    sink.close()
    assert sink.peak_pending <= 500 + 4
    assert len(client.get_metric_history(run, "d")) == 400


def test_writer_errors_reach_the_producer(store):
    url, client, experiment = store
    sink = MetricSink(url)
    sink.log("no-such-run", 0, {"a": 1.0})
    with pytest.raises(RuntimeError, match="writer failed"):
        sink.flush()


# A child process that logs steps of 4 metrics into a sink and is then SIGKILLed. It writes the
# number of steps whose log() has returned into an 8-byte shared file (`counter`, which outlives
# the kill), and prints a line `flushed N` when flush() returned with steps 0 .. N-1 in it.
CHILD = textwrap.dedent("""
    import mmap, sys
    from workbench.store.sink import MetricSink
    url, run, counter_path = sys.argv[1:4]
    flush_interval, max_pending, flush_every, stop_after = map(float, sys.argv[4:8])
    with open(counter_path, "r+b") as f:
        counter = mmap.mmap(f.fileno(), 8)
    sink = MetricSink(url, flush_interval=flush_interval, max_pending=int(max_pending))
    step = 0
    while step < stop_after:
        sink.log(run, step, {"a": step, "b": -step, "c": step * 0.5, "d": 1.0})
        step += 1
        counter[:8] = step.to_bytes(8, "little")
        if step % flush_every == 0:
            sink.flush()
            print("flushed", step, flush=True)
    print("stopped", step, flush=True)
    sys.stdin.readline()  # wait for the kill with everything after the last flush queued
""")


class Child:
    def __init__(self, url, run, tmp_path, *, flush_interval, max_pending, flush_every,
                 stop_after=float("inf")):
        self.counter = tmp_path / "logged"
        self.counter.write_bytes(bytes(8))
        self.out, self.err = tmp_path / "child.out", tmp_path / "child.err"
        with open(self.out, "w") as stdout, open(self.err, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, url, run, str(self.counter),
                 *map(str, (flush_interval, max_pending, flush_every, stop_after))],
                stdin=subprocess.PIPE, stdout=stdout, stderr=stderr, text=True)

    def lines(self, word: str) -> list[int]:
        """The step counts of the complete lines starting with `word`."""
        text = self.out.read_text()
        lines = text[: text.rfind("\n") + 1].splitlines()
        return [int(line.split()[1]) for line in lines if line.startswith(word)]

    def logged(self) -> int:
        """Steps whose log() returned (one less at most, if killed between the two)."""
        return int.from_bytes(self.counter.read_bytes()[:8], "little")

    def state(self) -> str:
        return (f"flushes confirmed at steps {self.lines('flushed')}, {self.logged()} steps "
                f"logged, child {'running' if self.proc.poll() is None else 'exited'}; its "
                f"stderr: {tail(self.err.read_text())}")

    def wait_then_kill(self, condition, what):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"the child exited with {self.proc.returncode} before "
                                     f"{what}: {self.state()}")
            return condition()

        try:
            wait_until(ready, what, 300, describe_state=self.state)
        finally:
            self.proc.kill()  # SIGKILL
            self.proc.wait()
            self.proc.stdin.close()


def stored_steps(db_path, run) -> int:
    """How many steps of the run the store holds, checking that a kill left it consistent:
    whole batches only, no holes, latest_metrics at the last stored step."""
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        steps = {key: sorted(s for (s,) in db.execute(
            "SELECT step FROM metrics WHERE run_uuid = ? AND key = ?", (run, key)))
            for key in "abcd"}
        latest_steps = dict(db.execute(
            "SELECT key, step FROM latest_metrics WHERE run_uuid = ?", (run,)).fetchall())
    assert steps["a"] == steps["b"] == steps["c"] == steps["d"]  # whole batches only
    stored = len(steps["a"])
    assert steps["a"] == list(range(stored))  # no holes
    assert latest_steps == (dict.fromkeys("abcd", stored - 1) if stored else {})
    return stored


def test_sigkill_loses_nothing_logged_before_the_last_flush(store, tmp_path):
    """The writer never wakes by itself here (an hour's flush interval, a queue that never
    fills): what is stored after the kill is exactly what flush() committed."""
    url, client, experiment = store
    run = client.create_run(experiment).info.run_id
    child = Child(url, run, tmp_path, flush_interval=3600, max_pending=10**9, flush_every=1000,
                  stop_after=2500)
    child.wait_then_kill(lambda: child.lines("stopped"), "the child to log 2,500 steps")
    assert child.lines("flushed") == [1000, 2000] and child.logged() == 2500
    assert stored_steps(tmp_path / "m.db", run) == 2000  # the flushed steps, not the 500 after
    assert client.get_run(run).info.status == "RUNNING"


MAX_PENDING = 400  # points


def test_sigkill_while_logging_loses_at_most_the_queue_and_one_batch(store, tmp_path):
    """Killed at a moment it is logging flat out (flushing every 3,000 steps): nothing before
    the last confirmed flush is lost, and of what came after at most the queue (max_pending
    points plus one step's) and the batch being written (as many again)."""
    url, client, experiment = store
    run = client.create_run(experiment).info.run_id
    child = Child(url, run, tmp_path, flush_interval=0.05, max_pending=MAX_PENDING,
                  flush_every=3000)
    child.wait_then_kill(
        lambda: len(child.lines("flushed")) >= 3 and child.logged() > child.lines("flushed")[-1],
        "three confirmed flushes and more steps logged after the last")
    last_flush, logged = child.lines("flushed")[-1], child.logged()
    stored = stored_steps(tmp_path / "m.db", run)
    assert stored >= last_flush, f"flushed {last_flush} steps, only {stored} stored"
    lost_points = 4 * (logged - stored)
    assert lost_points <= 2 * (MAX_PENDING + 4 - 1), (
        f"{logged} steps logged, {stored} stored: {lost_points} points lost, more than the "
        f"queue and one batch hold")
    assert client.get_run(run).info.status == "RUNNING"
