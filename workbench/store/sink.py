"""A fast, non-blocking metric sink that writes MLflow's own rows.

The training loop hands ``log(run_id, step, {key: value})`` to the sink and goes on: the call
appends one record to a bounded in-memory queue (the producer waits only when the queue holds
``max_pending`` points, so memory stays bounded by twice that: the queue and the batch
being written). A background thread drains the queue every
``flush_interval`` seconds and writes, in one transaction per drain, the rows MLflow's
``SqlAlchemyStore.log_batch`` would write:

- ``metrics``: one row per point (key, value, timestamp, run_uuid, step, is_nan), with NaN
  stored as value 0 and is_nan 1, +-Inf as +-1.7976931348623157e308 (MLflow's convention);
  an identical point logged twice is stored once, as MLflow does;
- ``latest_metrics``: per (run, key) the point with the greatest (step, timestamp, value),
  compared with the stored one exactly as MLflow compares them.

What a killed process (SIGKILL, OOM) loses is bounded in points, not seconds. A transaction is
all or nothing, so the store keeps whole batches only; nothing queued before the last
``flush()`` that returned is lost; of what was logged after it, at most the queue
(``max_pending`` points, plus the metrics of the one ``log`` call that filled it) and the batch
being written (as many again) is lost. How many seconds of logging that is depends on the
machine: the writer drains every ``flush_interval`` seconds (or sooner, when the queue fills or
``flush()`` asks), but a loaded machine can leave it further behind, so only the bound in points
is promised (``benchmarks/metric_sink.py`` prints the lag it measures). The run's status is the
engine's to set (RUNNING until it ends). At start-up the sink reads the columns and primary
keys of the two tables it writes, not a revision id (MLflow's revisions change far more often
than these tables); where they differ from ``WRITTEN`` it says so once and writes through
``MlflowClient.log_batch`` instead.
"""

from __future__ import annotations

import io
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Mapping
from urllib.parse import unquote

from sqlalchemy.engine import make_url

# What the sink writes: per table, its columns and the primary key its ON CONFLICT relies on.
WRITTEN = {
    "metrics": (frozenset({"key", "value", "timestamp", "run_uuid", "step", "is_nan"}),
                frozenset({"key", "value", "timestamp", "run_uuid", "step", "is_nan"})),
    "latest_metrics": (frozenset({"key", "value", "timestamp", "step", "is_nan", "run_uuid"}),
                       frozenset({"key", "run_uuid"})),
}
MAX_FLOAT = 1.7976931348623157e308
_warned: set[tuple[str, str]] = set()
log = logging.getLogger(__name__)


def sanitize(value: float) -> tuple[float, int]:
    """MLflow's storage of a metric value: (value, is_nan)."""
    if math.isnan(value):
        return 0.0, 1
    if math.isinf(value):
        return (MAX_FLOAT if value > 0 else -MAX_FLOAT), 0
    return value, 0


def rows_for(records) -> tuple[list[tuple], list[tuple]]:
    """(metrics rows, latest_metrics rows) for records (run_id, step, timestamp_ms, metrics).

    Identical points are left to the database (INSERT OR IGNORE / ON CONFLICT DO NOTHING), as
    MLflow stores an identical point once.
    """
    rows, latest = [], {}
    isfinite = math.isfinite
    for run_id, step, stamp, metrics in records:
        for key, raw in metrics.items():
            value = float(raw)
            if isfinite(value):
                is_nan = 0
            else:
                value, is_nan = sanitize(value)
            rows.append((key, value, stamp, run_id, step, is_nan))
            best = latest.get((run_id, key))
            if best is None or (step, stamp, value) > (best[3], best[2], best[1]):
                latest[(run_id, key)] = (key, value, stamp, step, is_nan, run_id)
    return rows, list(latest.values())


def upsert_latest(values: str) -> str:
    """The ``latest_metrics`` upsert (SQLite and PostgreSQL): a row replaces the stored one
    only when its (step, timestamp, value) is greater, as MLflow decides its latest point."""
    return ("INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) "
            f"VALUES {values} ON CONFLICT (key, run_uuid) DO UPDATE SET "
            "value = excluded.value, timestamp = excluded.timestamp, step = excluded.step, "
            "is_nan = excluded.is_nan WHERE (excluded.step, excluded.timestamp, excluded.value) "
            "> (latest_metrics.step, latest_metrics.timestamp, latest_metrics.value)")


UPSERT_LATEST = upsert_latest("(?, ?, ?, ?, ?, ?)")  # one row, DB-API ``?`` placeholders


class _SqliteWriter:
    INSERT = ("INSERT OR IGNORE INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
              "VALUES (?, ?, ?, ?, ?, ?)")
    UPSERT = UPSERT_LATEST

    def __init__(self, path: str):
        self.db = sqlite3.connect(path, timeout=120, isolation_level=None,
                                  check_same_thread=False)
        self.db.execute("PRAGMA synchronous=NORMAL")  # safe with WAL: no corruption on a crash
        self.db.execute("PRAGMA foreign_keys=ON")  # as MLflow: a metric needs its run

    def layout(self, table: str) -> tuple[frozenset[str], frozenset[str]]:
        """(columns, primary-key columns) of ``table``; empty when it does not exist."""
        rows = self.db.execute(f"PRAGMA table_info({table})").fetchall()
        return (frozenset(r[1] for r in rows), frozenset(r[1] for r in rows if r[5]))

    def write(self, rows, latest) -> None:
        self.apply([(self.INSERT, rows), (self.UPSERT, latest)])

    def apply(self, statements: list[tuple[str, list[tuple]]]) -> None:
        """Run each (statement, rows) with ``executemany`` in one transaction, waiting (with
        back-off) while another process holds the write lock. Placeholders are ``?``."""
        for attempt in range(50):
            try:
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    for statement, rows in statements:
                        self.db.executemany(statement, rows)
                    self.db.execute("COMMIT")
                    return
                except BaseException:
                    self.db.execute("ROLLBACK")
                    raise
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) and "busy" not in str(err):
                    raise
                time.sleep(min(0.05 * 2**attempt, 1.0))
        raise sqlite3.OperationalError("the database stayed locked")

    def close(self) -> None:
        self.db.close()


class _PostgresWriter:
    """COPY into a temporary staging table, then one INSERT ... ON CONFLICT DO NOTHING: about
    twice as fast as multi-row INSERTs (the metrics table's three indexes set the pace)."""

    STAGE = ("CREATE TEMP TABLE IF NOT EXISTS workbench_metrics_stage "
             "(LIKE metrics) ON COMMIT DELETE ROWS")
    COPY = ("COPY workbench_metrics_stage (key, value, timestamp, run_uuid, step, is_nan) "
            "FROM STDIN")
    INSERT = ("INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
              "SELECT key, value, timestamp, run_uuid, step, is_nan "
              "FROM workbench_metrics_stage ON CONFLICT DO NOTHING")
    UPSERT = upsert_latest("%s")  # psycopg2's execute_values fills the %s

    def __init__(self, url: str):
        import psycopg2

        parsed = make_url(url)
        self.db = psycopg2.connect(
            host=parsed.host, port=parsed.port, user=parsed.username,
            password=unquote(parsed.password) if parsed.password else None,
            dbname=parsed.database, **dict(parsed.query))

    def layout(self, table: str) -> tuple[frozenset[str], frozenset[str]]:
        """(columns, primary-key columns) of ``table``; empty when it does not exist."""
        with self.db.cursor() as cur:
            cur.execute("SELECT column_name FROM information_schema.columns "
                        "WHERE table_schema = current_schema() AND table_name = %s", (table,))
            columns = frozenset(r[0] for r in cur.fetchall())
            cur.execute("SELECT k.column_name FROM information_schema.table_constraints c "
                        "JOIN information_schema.key_column_usage k "
                        "ON k.constraint_name = c.constraint_name "
                        "AND k.table_schema = c.table_schema AND k.table_name = c.table_name "
                        "WHERE c.constraint_type = 'PRIMARY KEY' "
                        "AND c.table_schema = current_schema() AND c.table_name = %s", (table,))
            key = frozenset(r[0] for r in cur.fetchall())
        self.db.rollback()
        return columns, key

    @staticmethod
    def copy_text(rows) -> io.StringIO:
        """COPY's text format; repr() keeps every float exact. Keys cannot hold tabs or
        newlines (MLflow's key rule)."""
        text = io.StringIO()
        text.writelines(f"{k}\t{v!r}\t{t}\t{r}\t{s}\t{'t' if n else 'f'}\n"
                        for k, v, t, r, s, n in rows)
        text.seek(0)
        return text

    def write(self, rows, latest) -> None:
        from psycopg2.extras import execute_values

        # sorted latest rows take their row locks in one order: no deadlocks between workers
        latest = sorted((k, v, t, s, bool(n), r) for k, v, t, s, n, r in latest)
        try:
            with self.db.cursor() as cur:
                cur.execute(self.STAGE)
                cur.copy_expert(self.COPY, self.copy_text(rows))
                cur.execute(self.INSERT)
                execute_values(cur, self.UPSERT, latest, page_size=5000)
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise

    def apply(self, statements: list[tuple[str, list[tuple]]]) -> None:
        """Run each (statement, rows) in one transaction; ``?`` placeholders become ``%s``."""
        try:
            with self.db.cursor() as cur:
                for statement, rows in statements:
                    cur.executemany(statement.replace("?", "%s"), rows)
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise

    def close(self) -> None:
        self.db.close()


class _ClientWriter:
    """Fallback for an unknown schema: MLflow's own ``log_batch``, 1000 metrics a call."""

    def __init__(self, url: str):
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=url)

    def write_records(self, records) -> None:
        from mlflow.entities import Metric

        per_run: dict[str, list] = {}
        for run_id, step, stamp, metrics in records:
            per_run.setdefault(run_id, []).extend(
                Metric(k, float(v), stamp, step) for k, v in metrics.items())
        for run_id, items in per_run.items():
            for i in range(0, len(items), 1000):
                self.client.log_batch(run_id, metrics=items[i : i + 1000])

    def close(self) -> None:
        pass


def open_writer(url: str, written: Mapping[str, tuple[frozenset[str], frozenset[str]]],
                who: str, instead: str) -> _SqliteWriter | _PostgresWriter | None:
    """A direct writer to the store at ``url`` when every table in ``written`` has exactly the
    (columns, primary key) listed; else None, after saying once per store and writer why
    (``who`` then writes through MLflow's ``instead``)."""
    if url.startswith("sqlite:///"):
        writer = _SqliteWriter(url.removeprefix("sqlite:///"))
    elif url.startswith("postgresql"):
        writer = _PostgresWriter(url)
    else:
        writer = None
    differ = [t for t, want in written.items() if writer and writer.layout(t) != want]
    if writer is not None and not differ:
        return writer
    if writer is not None:
        writer.close()
    reason = f"the layout of {', '.join(differ)}" if writer else "this kind of store"
    if (url, who) not in _warned:
        _warned.add((url, who))
        log.warning("%s: %s is not one it knows; writing through MLflow's %s instead "
                    "(slower)", who, reason, instead)
    return None


class MetricSink:
    """Background writer of step metrics into MLflow's SQL store (SQLite or PostgreSQL).

    >>> sink = MetricSink("sqlite:////path/store.mlflow.db")
    >>> sink.log(run_id, step, {"train/loss": 0.3})   # returns at once
    >>> sink.flush()                                   # everything so far is committed
    >>> sink.close()
    """

    def __init__(self, tracking_url: str, *, flush_interval: float = 0.25,
                 max_pending: int = 200_000, written=WRITTEN):
        self.url = tracking_url
        self.flush_interval = flush_interval
        self.max_pending = max_pending
        self.writer = self._open(tracking_url, written)
        self._records: list = []
        self._pending = 0  # points queued, not yet taken by the writer
        self._queued = 0  # records ever queued
        self._written = 0  # records ever committed
        self._flush_wanted = False
        self._closing = False
        self._error: BaseException | None = None
        self.peak_pending = 0
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="metric-sink", daemon=True)
        self._thread.start()

    @staticmethod
    def _open(url: str, written):
        return open_writer(url, written, "metric sink", "log_batch") or _ClientWriter(url)

    @property
    def fast(self) -> bool:
        """False when writing through MLflow's client (unknown schema)."""
        return not isinstance(self.writer, _ClientWriter)

    # ------------------------------------------------------------------------- producer

    def log(self, run_id: str, step: int, metrics: Mapping[str, float],
            timestamp_ms: int | None = None) -> None:
        """Queue one step's metrics of one run; returns at once unless the queue is full."""
        stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        with self._cond:
            if self._error is not None:
                raise RuntimeError("the metric sink's writer failed") from self._error
            while self._pending >= self.max_pending and self._error is None:
                self._flush_wanted = True
                self._cond.notify_all()
                self._cond.wait()
            self._records.append((run_id, step, stamp, metrics))
            self._pending += len(metrics)
            self._queued += 1
            self.peak_pending = max(self.peak_pending, self._pending)

    def flush(self) -> None:
        """Block until every record queued before this call is committed."""
        with self._cond:
            target = self._queued
            self._flush_wanted = True
            self._cond.notify_all()
            while self._written < target and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise RuntimeError("the metric sink's writer failed") from self._error

    def close(self) -> None:
        """Flush and stop the writer thread."""
        if not self._thread.is_alive():
            return
        try:
            self.flush()
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._thread.join()
            self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --------------------------------------------------------------------------- writer

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._records and not self._closing:
                    self._cond.wait(self.flush_interval)
                if not self._records:
                    if self._closing:
                        return
                    continue
                records, self._records = self._records, []
                self._pending = 0
                self._flush_wanted = False
                self._cond.notify_all()
            try:
                if isinstance(self.writer, _ClientWriter):
                    self.writer.write_records(records)
                else:
                    self.writer.write(*rows_for(records))
            except BaseException as err:  # surfaced to the producer on its next call
                with self._cond:
                    self._error = err
                    self._cond.notify_all()
                return
            with self._cond:
                self._written += len(records)
                self._cond.notify_all()
