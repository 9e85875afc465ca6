"""A full disk under the store: recognised in any error, said in one line, and recorded.

A write that fails for want of space surfaces as many things: ``sqlite3.OperationalError:
database or disk is full`` (SQLITE_FULL), ``OSError`` ENOSPC or EDQUOT (an artifact, a journal),
PostgreSQL's SQLSTATE 53100 ``disk_full``, each wrapped by SQLAlchemy, Optuna (whose wrapper says
"exceeding max length", which misleads) or the metric sink. ``is_disk_full`` walks an error's
causes for any of them.

So that a full disk can still record why the sweep's trials stopped, a SQLite store keeps
``RESERVE_BYTES`` in a file beside it (``NAME.reserve``), written when a sweep starts
(``Reserve.keep``: a disk already too full to hold it stops the sweep there, before anything
else is written). When a write fails for want of space the sweep deletes it (``release``), marks
the trials it was running as stopped by the full disk (they run again, with their parameters,
when the same command runs after space is freed) and ends with one line (``StoreFull``). A
PostgreSQL server's disk is the server's: nothing is reserved there, the marking is tried.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

RESERVE_BYTES = 2 << 20  # the rows that mark a few trials stopped, with SQLite's journals
EXIT_STORE_FULL = 74  # sysexits' EX_IOERR: a fault of the machine, not bad input (2)
_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class StoreFull(Exception):
    """The disk under the store is full: one line, naming the store and its free space."""


def is_disk_full(err: BaseException | None) -> bool:
    """Whether ``err`` or any error that caused it is a write refused for want of space."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if _says_full(err) or _says_full(getattr(err, "orig", None)):
            return True
        # a Ray task's error keeps the task's own as ``cause``
        err = err.__cause__ or err.__context__ or getattr(err, "cause", None)
    return False


def _says_full(err) -> bool:
    if err is None:
        return False
    if isinstance(err, OSError) and err.errno in _NO_SPACE:
        return True
    if getattr(err, "sqlite_errorcode", None) == _SQLITE_FULL:
        return True
    if getattr(err, "pgcode", None) == _PG_DISK_FULL:
        return True
    text = str(err)
    return "database or disk is full" in text or "No space left on device" in text


def describe(err: BaseException) -> str:
    """One line for a full disk met outside a sweep's store writes (a report's folder, ...):
    the file it names, when it names one, and that file system's free space."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        name = getattr(err, "filename", None)
        if isinstance(err, OSError) and name:
            return f"the disk under {name} is full ({free_text(Path(name))}); free space and " \
                   "run the same command again"
        err = err.__cause__ or err.__context__
    return "a disk this command writes to is full; free space and run the same command again"


def free_text(path: Path) -> str:
    """``N free of SIZE`` on the file system holding ``path`` (its nearest folder that exists)."""
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        usage = shutil.disk_usage(folder)
    except OSError:
        return "free space unknown"
    return f"{_size(usage.free)} free of {_size(usage.total)}"


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)  # not reached


class Reserve:
    """``RESERVE_BYTES`` kept in ``PATH.reserve`` beside a SQLite store's Optuna file."""

    def __init__(self, database: Path):
        self.database = database
        self.path = database.with_suffix(".reserve")

    def keep(self) -> None:
        """Write the reserve when it is missing or short; a disk that cannot hold it is full
        (``StoreFull``, and no partial reserve is left)."""
        try:
            if self.path.is_file() and self.path.stat().st_size >= RESERVE_BYTES:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "wb") as handle:
                handle.write(b"\0" * RESERVE_BYTES)  # real blocks, not a sparse file
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as err:
            if err.errno not in _NO_SPACE:
                raise
            self.path.unlink(missing_ok=True)
            raise StoreFull(full_message(self.database, free_text(self.database),
                                         "before the sweep started")) from None

    def release(self) -> None:
        """Give the reserve's space back to the store's writes."""
        self.path.unlink(missing_ok=True)


def space_of(where: Path | str) -> str:
    """The free space ``full_message`` names: a file's disk, or a server's."""
    return free_text(where) if isinstance(where, Path) else "on its server's disk"


def full_message(where: Path | str, space: str, when: str, stopped: int | None = None) -> str:
    """The one line a full disk ends a command with."""
    said = "" if stopped is None else f"; {stopped} trial(s) marked stopped by it"
    return (f"the disk under the store {where} is full ({space}) {when}{said}; free space "
            "and run the same command again: nothing is lost, stopped trials run again")


def reserve_for(store) -> Reserve | None:
    """The reserve of a SQLite store (a ``database.Store``); None for a server's."""
    return Reserve(store.sqlite_paths()[0]) if store.is_sqlite else None


def store_place(store) -> Path | str:
    """What the one line names: a SQLite store's file, else its redacted URL."""
    if store.is_sqlite:
        return store.sqlite_paths()[0]
    from workbench.store.database import redact

    return redact(store.optuna_url)
