"""The store: the SQL database(s) that hold Optuna's and MLflow's tables, and a lock.

Optuna and MLflow both keep their schema version in a table named ``alembic_version``, so they
cannot share one database. A store URL names Optuna's database; MLflow's lives beside it:

- ``sqlite:////dir/NAME.db``          -> MLflow in ``/dir/NAME.mlflow.db``, artifacts in
  ``/dir/NAME-artifacts/``;
- ``postgresql://user@host/DB``       -> MLflow in database ``DB_mlflow`` on the same server
  (created when missing), artifacts in ``./DB-artifacts`` unless ``WORKBENCH_ARTIFACTS`` is set.

SQLite files run in WAL mode with a busy timeout, so several local processes share them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sqlite3
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import optuna
import sqlalchemy as sa
from sqlalchemy.engine import make_url

SQLITE_TIMEOUT_S = 120
HEARTBEAT_INTERVAL_S = 10
HEARTBEAT_GRACE_S = 40


def redact(url: str) -> str:
    """The URL with its password replaced by *** (for messages, tags and provenance)."""
    return re.sub(r"(://[^:/@]+:)[^@/]*@", r"\1***@", url)


class StoreUnreachable(RuntimeError):
    """The database server does not answer (wrong host, port, user or database)."""


@dataclass(frozen=True)
class Store:
    optuna_url: str
    mlflow_url: str
    artifact_root: Path

    @classmethod
    def from_url(cls, url: str) -> Store:
        if url.startswith("sqlite:///"):
            path = Path(url.removeprefix("sqlite:///"))
            stem = path.name.removesuffix(".db")
            return cls(url, "sqlite:///" + str(path.with_name(stem + ".mlflow.db")),
                       path.with_name(stem + "-artifacts"))
        parsed = make_url(url)
        mlflow_url = parsed.set(database=f"{parsed.database}_mlflow")
        root = Path(os.environ.get("WORKBENCH_ARTIFACTS", f"{parsed.database}-artifacts"))
        return cls(url, mlflow_url.render_as_string(hide_password=False), root.resolve())

    @property
    def is_sqlite(self) -> bool:
        return self.optuna_url.startswith("sqlite:")

    def sqlite_paths(self) -> list[Path]:
        return [Path(u.removeprefix("sqlite:///")) for u in (self.optuna_url, self.mlflow_url)]

    def exists(self) -> bool:
        """Whether the store has been created (without creating it)."""
        if self.is_sqlite:
            return self.sqlite_paths()[0].exists()
        return True

    def check(self) -> None:
        """Raise StoreUnreachable when a server store does not answer (SQLite: nothing)."""
        if self.is_sqlite:
            return
        engine = sa.create_engine(self.optuna_url, poolclass=sa.pool.NullPool,
                                  connect_args={"connect_timeout": 10})
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except sa.exc.SQLAlchemyError as err:
            reason = str(getattr(err, "orig", err)).strip().splitlines()[0]
            raise StoreUnreachable(f"cannot reach the store {redact(self.optuna_url)}: "
                                   f"{redact(reason)}") from None
        finally:
            engine.dispose()

    def prepare(self) -> None:
        """Create what is missing: WAL-mode SQLite files, or MLflow's PostgreSQL database;
        then the artifact folder."""
        self._prepare_database()
        self.artifact_root.mkdir(parents=True, exist_ok=True)

    def _prepare_database(self) -> None:
        if self.is_sqlite:
            for path in self.sqlite_paths():
                path.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.closing(sqlite3.connect(path, timeout=SQLITE_TIMEOUT_S)) as db:
                    db.execute("PRAGMA journal_mode=WAL")
            return
        target = make_url(self.mlflow_url)
        admin = sa.create_engine(make_url(self.optuna_url), isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            exists = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                  {"n": target.database}).scalar()
            if not exists:
                with contextlib.suppress(sa.exc.ProgrammingError):  # created by another worker
                    conn.execute(sa.text(f'CREATE DATABASE "{target.database}"'))
        admin.dispose()

    def optuna_storage(self) -> optuna.storages.RDBStorage:
        kwargs = {"pool_pre_ping": True}
        if self.is_sqlite:
            kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return optuna.storages.RDBStorage(
                self.optuna_url, engine_kwargs=kwargs,
                heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=HEARTBEAT_GRACE_S,
            )

    def mlflow_client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.mlflow_url)

    @contextlib.contextmanager
    def lock(self, name: str):
        """A lock shared by every worker of this store: a file lock beside a SQLite store, a
        PostgreSQL advisory lock otherwise."""
        if self.is_sqlite:
            path = self.sqlite_paths()[0].with_suffix(".lock")
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a+") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
            return
        key = zlib.crc32(name.encode()) & 0x7FFFFFFF
        engine = sa.create_engine(self.optuna_url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                conn.commit()
        engine.dispose()
