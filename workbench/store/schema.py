"""A store's two databases: inspected without writing, built so that a kill leaves none or a
complete one.

MLflow builds its schema with about 400 DDL statements (tables, then every Alembic migration),
and on SQLite those are not one transaction: a process killed half-way used to leave a
database on which every later command failed. Here a database is never built in place:

- SQLite: the schema is built in a temporary file beside the target (MLflow's from a template
  file cached per MLflow version and schema revision, copied in a second), switched to WAL
  mode, synced, and renamed into place; ``os.replace`` is atomic, so the target is absent or
  complete;
- PostgreSQL: MLflow's database is built under a temporary name and renamed
  (``ALTER DATABASE ... RENAME``); Optuna's tables go into the user's database in one
  transaction (``create_all``), and what follows them (version row, Alembic stamp) is
  idempotent, so Optuna finishes it on the next start.

``inspect`` reads a database without creating anything (no lock file, no ``-wal``/``-shm``)
and ``verdict`` says what is wrong with it, in a ``StoreError`` that names the database and
the way to repair it: a file that is not SQLite or is truncated, a directory where the file
should be, a path under a regular file, someone else's database, a half-built schema, or a
schema at another revision than the installed Optuna or MLflow expects.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from workbench.common.processes import process_alive

# Tables whose presence makes a database Optuna's or MLflow's (a subset of each schema).
SIGNATURE = {
    "optuna": frozenset({"studies", "trials", "trial_values", "version_info"}),
    "mlflow": frozenset({"experiments", "runs", "metrics", "latest_metrics", "params", "tags"}),
}
UPGRADE = {
    "optuna": "optuna storage upgrade --storage {url}",
    "mlflow": "mlflow db upgrade {url}",
}
BUILDING = ".building-"  # infix of temporary files and databases under construction
LOCKED_WAIT_S = 5.0  # how long ``inspect_sqlite`` waits for a store another process holds


class StoreError(RuntimeError):
    """The store cannot be used as it is: the message names the database, what is wrong and
    how to repair it."""


@dataclass(frozen=True)
class Found:
    """What a database holds: its tables and Alembic revision (None: no alembic_version)."""

    tables: frozenset[str]
    revision: str | None

    @property
    def empty(self) -> bool:
        return not self.tables


# ---------------------------------------------------------------------------- revisions


@functools.cache
def _scripts(kind: str):
    from alembic.script import ScriptDirectory

    if kind == "optuna":
        import optuna.storages._rdb as rdb

        return ScriptDirectory(os.path.join(os.path.dirname(rdb.__file__), "alembic"))
    import mlflow.store

    return ScriptDirectory(os.path.join(os.path.dirname(mlflow.store.__file__),
                                        "db_migrations"))


_REVISIONS: dict[str, tuple[str, frozenset[str]]] = {}


def _revisions(kind: str) -> tuple[str, frozenset[str]]:
    """(the head, every revision) of the installed package's migrations. Reading them imports
    the package and each migration script (a second for MLflow), so they are kept under the
    cache folder per package version and location, which they depend on alone (in this
    process once known, before the file is written)."""
    from workbench.common.cache import cache_root

    if kind in _REVISIONS:
        return _REVISIONS[kind]
    spec = importlib.util.find_spec(kind)
    where = spec.origin if spec is not None else "?"
    tag = hashlib.sha256(f"{version(kind)} {where}".encode()).hexdigest()[:16]
    path = cache_root() / "schema-revisions" / f"{kind}-{tag}.json"
    try:
        saved = json.loads(path.read_text())
        _REVISIONS[kind] = saved["head"], frozenset(saved["known"])
        return _REVISIONS[kind]
    except (OSError, ValueError, KeyError):
        pass
    scripts = _scripts(kind)
    head_, known_ = scripts.get_current_head(), [r.revision for r in scripts.walk_revisions()]
    _REVISIONS[kind] = head_, frozenset(known_)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}")
        partial.write_text(json.dumps({"head": head_, "known": sorted(known_)}))
        # whole or absent, with workers writing it at once; os.rename (atomic on POSIX), not
        # os.replace: the store's own renames are the ones the crash tests count and hook
        os.rename(partial, path)
    except OSError:
        pass  # a read-only cache: read them again next time
    return _REVISIONS[kind]


def head(kind: str) -> str:
    """The schema revision the installed Optuna or MLflow expects."""
    return _revisions(kind)[0]


def known(kind: str) -> frozenset[str]:
    """Every schema revision the installed package can upgrade from."""
    return _revisions(kind)[1]


def version(kind: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(kind)


# ---------------------------------------------------------------------------- inspection


def nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def read_only(path: Path) -> str | None:
    """Why ``path`` cannot be written by this process (a read-only file system, or its mode
    and owner), None when it can. As root, only a read-only file system stops a write."""
    if os.access(path, os.W_OK):
        return None
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "on a read-only file system"
    except OSError:
        pass
    return "this user may not write it"


def refuse_read_only(path: Path) -> None:
    """Raise StoreError when the store's existing SQLite file at ``path``, or the folder that
    holds it, cannot be written: even to read a store in WAL mode SQLite writes its -shm file
    beside it, and a sweep takes the store's lock file there."""
    try:
        if not path.exists():
            return  # inspect_sqlite says whether it can be created
    except OSError:
        return  # inspect_sqlite says what is wrong with the path
    for target in (path, path.parent):
        why = read_only(target)
        if why is not None:
            what = "" if target == path else f"its folder {target}: "
            raise StoreError(f"the store {path} is read-only ({what}{why}); allowed: a store "
                             "this user can write (Workbench writes beside it even to read "
                             "it): copy it to a writable folder and point --storage at the "
                             "copy")


def inspect_sqlite(path: Path) -> Found | None:
    """The tables and revision of a SQLite file, read without writing; None when there is no
    file yet (or an empty one). Raises StoreError when the path cannot hold a database."""
    try:
        return _inspect_sqlite(path)
    except OSError as err:  # a name too long, a folder this user may not search, ...
        raise StoreError(f"{path}: cannot hold a store: {err.strerror or err}") from None


def _inspect_sqlite(path: Path) -> Found | None:
    if not path.exists() and not path.is_symlink():
        ancestor = nearest_existing(path.parent)
        if not ancestor.is_dir():
            raise StoreError(f"{path}: cannot be created, {ancestor} is not a directory")
        if not os.access(ancestor, os.W_OK):
            raise StoreError(f"{path}: cannot be created, {ancestor} is not writable")
        return None
    if path.is_symlink() and not path.exists():
        raise StoreError(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist")
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a SQLite database file")
    if not path.is_file():
        raise StoreError(f"{path}: is not a regular file")
    size = path.stat().st_size
    if size == 0:
        return None
    # Only SQLite opens the file: a plain open() and close() of it would drop every POSIX lock
    # this process's own SQLite connections hold on it. immutable=1 creates no -wal/-shm;
    # where they exist, a live store is read through them.
    live = path.with_name(path.name + "-wal").exists()
    query = "mode=ro" if live else "mode=ro&immutable=1"
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?{query}", uri=True,
                                                timeout=LOCKED_WAIT_S)) as db:
            pages, page_size = (db.execute(f"PRAGMA {p}").fetchone()[0]
                                for p in ("page_count", "page_size"))
            if not live and size < pages * page_size:
                raise StoreError(f"{path}: is truncated ({size} bytes; its header says "
                                 f"{pages * page_size})")
            tables = frozenset(name for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"))
            revision = None
            if "alembic_version" in tables:
                row = db.execute("SELECT version_num FROM alembic_version").fetchone()
                revision = row[0] if row else None
            for table in sorted(tables & (SIGNATURE["optuna"] | SIGNATURE["mlflow"])):
                db.execute(f'SELECT * FROM "{table}" LIMIT 1').fetchall()
    except sqlite3.DatabaseError as err:
        if "not a database" in str(err):
            raise StoreError(f"{path}: is not a SQLite database") from None
        if "locked" in str(err):  # another connection holds it in exclusive locking mode
            raise StoreError(f"{path}: is locked by another process ({err}); allowed: a "
                             "store no other program holds exclusively: run the command "
                             "again when that program ends") from None
        raise StoreError(f"{path}: is corrupt or truncated ({err}); restore it from a backup "
                         "or point --storage at another file") from None
    return Found(tables - {"alembic_version"}, revision)


def inspect_engine(engine: sa.Engine) -> Found:
    """The tables and revision of a server database."""
    inspector = sa.inspect(engine)
    tables = frozenset(inspector.get_table_names())
    revision = None
    if "alembic_version" in tables:
        with engine.connect() as conn:
            revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    return Found(tables - {"alembic_version"}, revision)


def verdict(kind: str, name: str, found: Found | None, url: str) -> None:
    """Raise StoreError unless ``found`` is absent, empty, or a usable database of ``kind``
    (its signature tables present, at the installed package's revision)."""
    if found is None or found.empty:
        return
    ours = SIGNATURE[kind]
    other = SIGNATURE["mlflow" if kind == "optuna" else "optuna"]
    present = found.tables & ours
    if not present:
        what = ("the other half of a Workbench store" if found.tables & other
                else "not a Workbench store")
        shown = ", ".join(sorted(found.tables)[:6]) + (", ..." if len(found.tables) > 6 else "")
        raise StoreError(f"{name}: {what}; it holds tables ({shown}) that are not {kind}'s, "
                         "and Workbench will not add its own to them; name another store")
    if present != ours or (kind == "mlflow" and found.revision is None):
        missing = ", ".join(sorted(ours - present)) or "alembic_version"
        raise StoreError(f"{name}: a half-built {kind} schema (missing {missing}), left by an "
                         "interrupted set-up of an earlier Workbench, so it never held a run: "
                         "delete it and run the command again")
    if kind == "optuna" and found.revision is None:
        return  # Optuna stamps its revision after create_all and finishes it on open
    if found.revision != head(kind):
        if found.revision in known(kind):
            raise StoreError(f"{name}: {kind} schema at revision {found.revision}, older than "
                             f"the installed {kind} {version(kind)} expects ({head(kind)}); "
                             f"back it up, then run: {UPGRADE[kind].format(url=url)}")
        raise StoreError(f"{name}: {kind} schema at revision {found.revision}, which the "
                         f"installed {kind} {version(kind)} does not know (written by a newer "
                         f"{kind}?); install that version, or name another store")


# ---------------------------------------------------------------------------- building


def _temporary(target: Path) -> Path:
    return target.with_name(f".{target.name}{BUILDING}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def remove_stale_builds(folder: Path, name: str) -> None:
    """Delete the temporary files that killed builds of ``name`` left in ``folder`` (their
    process is gone)."""
    for leftover in folder.glob(f".{name}{BUILDING}*"):
        pid = leftover.name.split(BUILDING, 1)[1].split("-", 1)[0]
        if pid.isdigit() and process_alive(int(pid)) and int(pid) != os.getpid():
            continue
        with contextlib.suppress(OSError):
            leftover.unlink()


def _build_schema(kind: str, url: str, artifact_uri: str) -> None:
    """Create ``kind``'s tables at ``url`` (a new, empty database) and close every
    connection."""
    if kind == "optuna":
        import warnings

        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            storage = optuna.storages.RDBStorage(url)
        storage.engine.dispose()
        return
    import logging

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    quiet = logging.getLogger("mlflow.store.db.utils")
    level, quiet.level = quiet.level, logging.WARNING
    try:
        store = SqlAlchemyStore(url, artifact_uri)
    finally:
        quiet.setLevel(level)
    store.engine.dispose()


def _finish_sqlite(path: Path) -> None:
    """WAL mode (recorded in the file), every page on disk, no side files left."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=WAL")
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _put_in_place(built: Path, target: Path) -> None:
    os.replace(built, target)
    fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def template_path(cache: Path) -> Path:
    return cache / "store-templates" / f"mlflow-{version('mlflow')}-{head('mlflow')}.db"


def _mlflow_template(cache: Path) -> Path:
    """An empty MLflow database at the installed schema, built once per MLflow version."""
    template = template_path(cache)
    if template.exists():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(template.parent, template.name)
    built = _temporary(template)
    _build_schema("mlflow", f"sqlite:///{built}", (cache / "unused-artifacts").as_uri())
    _finish_sqlite(built)
    _put_in_place(built, template)
    return template


def build_sqlite(kind: str, target: Path, artifact_uri: str, cache: Path | None) -> None:
    """Build ``kind``'s database at ``target`` atomically (a temporary file renamed into
    place). MLflow's comes from the cached template when ``cache`` is writable."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(target.parent, target.name)
    built = _temporary(target)
    try:
        template = None
        if kind == "mlflow" and cache is not None:
            with contextlib.suppress(OSError):
                template = _mlflow_template(cache)
        if template is not None:
            shutil.copyfile(template, built)
            with contextlib.closing(sqlite3.connect(built)) as db, db:
                db.execute("UPDATE experiments SET artifact_location = ? "
                           "WHERE experiment_id = 0", (artifact_uri,))
        else:
            _build_schema(kind, f"sqlite:///{built}", artifact_uri)
        _finish_sqlite(built)
        _put_in_place(built, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            built.unlink()


def build_postgres_mlflow(admin: sa.Engine, target_url: str, artifact_uri: str) -> None:
    """Build MLflow's database on the server under a temporary name, then rename it to the
    target's name (the rename is atomic; a leftover temporary database is dropped first)."""
    target = make_url(target_url)
    name = target.database
    building = f"{name}__building"
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{building}"'))
        conn.execute(sa.text(f'CREATE DATABASE "{building}"'))
    _build_schema("mlflow", target.set(database=building).render_as_string(hide_password=False),
                  artifact_uri)
    with admin.connect() as conn:
        conn.execute(sa.text(f'ALTER DATABASE "{building}" RENAME TO "{name}"'))
