"""The store: the SQL database(s) that hold Optuna's and MLflow's tables, and a lock.

Optuna and MLflow both keep their schema version in a table named ``alembic_version``, so they
cannot share one database. A store URL names Optuna's database; MLflow's lives beside it:

- ``sqlite:////dir/NAME.db``          -> MLflow in ``/dir/NAME.mlflow.db``, artifacts in
  ``/dir/NAME-artifacts/``;
- ``postgresql://user@host/DB``       -> MLflow in database ``DB_mlflow`` on the same server
  (created when missing), artifacts in ``./DB-artifacts``.

An artifact root every host reaches (``workbench.store.artifacts``: the spec's ``artifact_root``,
``--artifact-root``, or ``WORKBENCH_ARTIFACTS``) replaces the host-local folder.

SQLite files run in WAL mode with a busy timeout, so several local processes share them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    import optuna

from workbench.common.validation import SpecError, shorten
from workbench.store import schema
from workbench.store.schema import StoreError

SQLITE_TIMEOUT_S = 120
# Optuna's pool on a server store: POOL_SIZE connections kept open (a worker's thread and its
# trial's heartbeat thread use it at once), POOL_OVERFLOW more at a peak (SQLAlchemy's default
# is 5 + 10). README, "Scaling out", says what a worker opens in all, measured.
POOL_SIZE, POOL_OVERFLOW = 2, 4
HEARTBEAT_INTERVAL_S = 10
HEARTBEAT_GRACE_S = 40


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_URL_IN_TEXT = re.compile(_SCHEME.pattern + r"[^\s'\"<>]+")
_USER_PASSWORD = re.compile(rf"^({_SCHEME.pattern}[^:/@?#]*:).*@", re.DOTALL)  # to the last @
_QUERY_PASSWORD = re.compile(r"([?&;]password=)[^&#\s]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the password of every URL in it replaced by *** (for messages, tags and
    provenance), in the user part or a ``password`` query parameter. Never raises."""
    if _SCHEME.match(text) and len(_URL_IN_TEXT.findall(text)) == 1:
        return _redact_url(text)  # one URL, which may have spaces in its password
    return _URL_IN_TEXT.sub(lambda found: _redact_url(found.group()), text)


def _redact_url(url: str) -> str:
    """SQLAlchemy's rendering without the password; a pattern where SQLAlchemy cannot read
    the URL or reads part of the password as the host (a raw @ in it)."""
    try:
        parsed = make_url(url)
    except Exception:  # any text may come here
        parsed = None
    if parsed is None or parsed.password is None or "@" in (parsed.host or ""):
        hidden = _USER_PASSWORD.sub(r"\1***@", url)
    else:
        hidden = parsed.render_as_string(hide_password=True)
    return _QUERY_PASSWORD.sub(r"\1***", hidden)


class StoreUnreachable(StoreError):
    """The database server does not answer (wrong host, port, user or database)."""


@dataclass(frozen=True)
class Store:
    optuna_url: str
    mlflow_url: str
    artifact_root: Path  # the host-local folder beside the store
    shared_artifacts: str | None = None  # a root every host reaches (workbench.store.artifacts)

    @classmethod
    def from_url(cls, url: str, artifacts: str | None = None) -> Store:
        """The store at ``url``; ``artifacts``: a normalised artifact root every host reaches
        (``artifacts.normalise_root``), else ``WORKBENCH_ARTIFACTS`` when set (a path)."""
        if artifacts is None and os.environ.get("WORKBENCH_ARTIFACTS"):
            artifacts = Path(os.environ["WORKBENCH_ARTIFACTS"]).resolve().as_uri()
        if url.startswith("sqlite:///"):
            path = Path(url.removeprefix("sqlite:///"))
            stem = path.name.removesuffix(".db")
            return cls(url, "sqlite:///" + str(path.with_name(stem + ".mlflow.db")),
                       path.with_name(stem + "-artifacts"), artifacts)
        parsed = make_url(url)
        mlflow_url = parsed.set(database=f"{parsed.database}_mlflow")
        root = Path(f"{parsed.database}-artifacts")
        return cls(url, mlflow_url.render_as_string(hide_password=False), root.resolve(),
                   artifacts)

    @property
    def artifacts_uri(self) -> str:
        """Where new experiments put their artifacts: the shared root, else the local folder."""
        return self.shared_artifacts or self.artifact_root.resolve().as_uri()

    @property
    def artifact_folder(self) -> Path | None:
        """The local folder artifacts are written to, None for a remote root."""
        if self.shared_artifacts is None:
            return self.artifact_root
        from workbench.store.artifacts import local_folder

        return local_folder(self.shared_artifacts)

    @property
    def is_sqlite(self) -> bool:
        return self.optuna_url.startswith("sqlite:")

    def sqlite_paths(self) -> list[Path]:
        return [Path(u.removeprefix("sqlite:///")) for u in (self.optuna_url, self.mlflow_url)]

    def exists(self) -> bool:
        """Whether the store has been created (without creating it): for SQLite, whether
        Optuna's file is there with something in it (an empty file is none yet, as
        ``schema.inspect_sqlite`` reads it; anything else there is, for ``check`` to say
        what is wrong with it)."""
        if self.is_sqlite:
            path = self.sqlite_paths()[0]
            try:
                return path.exists() and (not path.is_file() or path.stat().st_size > 0)
            except OSError:  # a name too long, ...
                return True
        return True

    def check(self, writing: bool = False) -> None:
        """Raise StoreError unless the store can be used as it is (absent, or complete and at
        the installed schema revisions; ``writing``: its lock file can be taken too); writes
        nothing. A server store must answer (StoreUnreachable otherwise)."""
        if self.is_sqlite:
            paths = self.sqlite_paths()
            for path in paths:  # before reading: SQLite reads a WAL store through files it writes
                schema.refuse_read_only(path)
            found = {}
            for kind, path in zip(("optuna", "mlflow"), paths, strict=True):
                found[kind] = schema.inspect_sqlite(path)
                schema.verdict(kind, str(path), found[kind], f"sqlite:///{path}")
            if not writing and found["optuna"] is not None and not found["optuna"].empty and (
                    found["mlflow"] is None or found["mlflow"].empty):
                # a reader needs both halves; a sweep (writing) completes a store that a kill
                # left half-built, as it always has
                raise StoreError(f"{paths[1]}: MLflow's half of the store is missing or empty "
                                 f"while Optuna's ({paths[0].name}) holds studies; allowed: "
                                 "both halves: restore it from a backup, or name another "
                                 "store")
            if writing:
                self._check_lock_file()
            self._check_artifact_folder()
            return
        self._check_artifact_folder()
        engine = self._engine(self.optuna_url)
        try:
            schema.verdict("optuna", redact(self.optuna_url), schema.inspect_engine(engine),
                           redact(self.optuna_url))
        except sa.exc.SQLAlchemyError as err:
            reason = str(getattr(err, "orig", err)).strip().splitlines()[0]
            raise StoreUnreachable(f"cannot reach the store {redact(self.optuna_url)}: "
                                   f"{redact(reason)}") from None
        finally:
            engine.dispose()
        if self._server_has(make_url(self.mlflow_url).database):
            engine = self._engine(self.mlflow_url)
            try:
                schema.verdict("mlflow", redact(self.mlflow_url), schema.inspect_engine(engine),
                               redact(self.mlflow_url))
            finally:
                engine.dispose()

    def _check_lock_file(self) -> None:
        lock = self.sqlite_paths()[0].with_suffix(".lock")
        if (lock.exists() or lock.is_symlink()) and not lock.is_file():
            raise StoreError(f"{lock}: the store's lock file is not a regular file (a folder, "
                             "or a link to nothing); allowed: a regular file or none: remove "
                             "it")

    def _check_artifact_folder(self) -> None:
        folder = self.artifact_folder
        if folder is None:
            return
        ancestor = schema.nearest_existing(folder)
        if not ancestor.is_dir():
            raise StoreError(f"{folder}: the artifact folder cannot be created, {ancestor} is "
                             "not a directory")

    @staticmethod
    def _engine(url: str) -> sa.Engine:
        return sa.create_engine(url, poolclass=sa.pool.NullPool,
                                connect_args={"connect_timeout": 10})

    def _server_has(self, database: str) -> bool:
        engine = self._engine(self.optuna_url)
        try:
            with engine.connect() as conn:
                return bool(conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                         {"n": database}).scalar())
        finally:
            engine.dispose()

    def prepare(self, cache: Path | None) -> None:
        """Create what is missing, each database atomically (store_schema): SQLite files in
        WAL mode, or MLflow's PostgreSQL database; then the artifact folder. Call it under
        ``lock("store")``; ``cache`` holds the MLflow schema template (None: build the schema
        in place of copying it)."""
        self.check(writing=True)  # a writer: it completes a half-built store
        artifact_uri = self.artifacts_uri
        if self.is_sqlite:
            # MLflow's first: an Optuna file is never there without its MLflow file
            for kind, path in (("mlflow", self.sqlite_paths()[1]),
                               ("optuna", self.sqlite_paths()[0])):
                if schema.inspect_sqlite(path) is None:
                    schema.build_sqlite(kind, path, artifact_uri, cache)
        else:
            if not self._server_has(make_url(self.mlflow_url).database):
                admin = sa.create_engine(make_url(self.optuna_url), isolation_level="AUTOCOMMIT",
                                         poolclass=sa.pool.NullPool)
                try:
                    schema.build_postgres_mlflow(admin, self.mlflow_url, artifact_uri)
                finally:
                    admin.dispose()
        if self.artifact_folder is not None:
            self.artifact_folder.mkdir(parents=True, exist_ok=True)

    def optuna_storage(self) -> optuna.storages.RDBStorage:
        import optuna  # not before: `workbench status` reads the tables with SQL instead

        kwargs = {"pool_pre_ping": True, "pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}
        if self.is_sqlite:
            kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return optuna.storages.RDBStorage(
                self.optuna_url, engine_kwargs=kwargs,
                heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=HEARTBEAT_GRACE_S,
            )

    def worker_storage(self):
        """The Optuna storage a sweep worker claims and runs trials through: Optuna's cached
        storage with a trial's intermediate values written in one commit when it ends and
        finished trials re-read only when there are more (``workbench.store.optuna_storage``)."""
        from workbench.store.optuna_storage import WorkerStorage

        return WorkerStorage(self.optuna_storage())

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


# the store's URL as a spec or `--storage` gives it


def default_storage() -> str:
    return "sqlite:///" + str(Path("workbench.db").resolve())


def normalise_storage(url: str, source: str, path: str) -> str:
    """An absolute SQLite path (workers may start elsewhere); other URLs as given."""
    if url.startswith("sqlite:///"):
        rest = url.removeprefix("sqlite:///")
        if not rest or rest == ":memory:":
            raise SpecError(source, path, "an in-memory SQLite store cannot be shared; name a file")
        try:
            return "sqlite:///" + str(Path(rest).expanduser().resolve())
        except (ValueError, RuntimeError, OSError) as err:
            raise SpecError(source, path, f"not a usable file path: {err}") from None
    if re.match(r"^postgresql(\+psycopg2)?://", url):
        # SQLAlchemy 2.1 defaults to psycopg 3; the workbench installs psycopg2
        return re.sub(r"^postgresql(\+psycopg2)?://", "postgresql+psycopg2://", url)
    raise SpecError(source, path, f"unsupported storage {shorten(redact(url))}; allowed: "
                    "sqlite:///FILE, postgresql://USER@HOST/DB")
