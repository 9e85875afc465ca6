"""What every command shares: the exit codes, the usage error (a bad argument: one message,
exit 2, nothing written) and the store URL checks made before anything is written."""

from __future__ import annotations

EXIT_BAD_INPUT = 2
EXIT_SHORT = 3  # `sweep`: a study ended with fewer finished trials than it asks for


class UsageError(Exception):
    """A bad command-line argument."""


def redact(url: str) -> str:
    from workbench.store.database import redact as hide

    return hide(url)


def reachable(url: str) -> None:
    """The store must be usable before anything is written (exit 2 otherwise): a server that
    answers; databases absent, or complete at the installed schema revisions."""
    from workbench.store.database import Store, StoreError

    try:
        Store.from_url(url).check()
    except StoreError as err:
        raise UsageError(str(err)) from None


