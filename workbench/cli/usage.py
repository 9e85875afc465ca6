"""What every command shares: the exit codes, the usage error (a bad argument: one message,
exit 2, nothing written) and the store URL checks made before anything is written."""

from __future__ import annotations

import os
from pathlib import Path

EXIT_BAD_INPUT = 2
EXIT_SHORT = 3  # `sweep`: a study ended with fewer finished trials than it asks for


class UsageError(Exception):
    """A bad command-line argument."""


def redact(url: str) -> str:
    from workbench.store.database import redact as hide

    return hide(url)


def reachable(url: str, writing: bool = False) -> None:
    """The store must be usable before anything is written (exit 2 otherwise): a server that
    answers; databases absent, or complete at the installed schema revisions (``writing``:
    and its lock file one a sweep can take)."""
    from workbench.store.database import Store, StoreError

    try:
        Store.from_url(url).check(writing)
    except StoreError as err:
        raise UsageError(str(err)) from None




def writable_folder(out: Path, flag: str = "--out") -> None:
    """The folder ``out`` must be one a command can make (exit 2 otherwise, before anything
    runs): the nearest folder above it that exists, one this process can write in."""
    above = out.absolute().parent
    try:
        while not above.exists() and above != above.parent:
            above = above.parent
        usable = above.is_dir() and os.access(above, os.W_OK | os.X_OK)
    except OSError as err:
        raise UsageError(f"{flag} {out}: {err.strerror or err}; allowed: a folder this "
                         "process can write") from None
    if not usable:
        what = "is read-only" if above.is_dir() else "is not a folder"
        raise UsageError(f"{flag} {out}: cannot be written, {above} {what}; allowed: a "
                         "folder this process can write")
