"""Waiting on a condition, never on the clock alone.

A test that needs something to happen (a child process to log metrics, a server to answer, a
sweep to end) polls for it with ``wait_until`` or ``communicate``. Their bounds are generous and
only there so that a hung test fails instead of hanging CI; ``WORKBENCH_TEST_TIMEOUT_SCALE``
(default 1) multiplies every one of them, so a slow or loaded machine can raise them, e.g.
``WORKBENCH_TEST_TIMEOUT_SCALE=4 bash scripts/test.sh``. When a bound runs out, the failure says
what was awaited and the last state seen.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

SCALE_VARIABLE = "WORKBENCH_TEST_TIMEOUT_SCALE"
T = TypeVar("T")


def timeout_scale() -> float:
    """The factor from WORKBENCH_TEST_TIMEOUT_SCALE (default 1)."""
    raw = os.environ.get(SCALE_VARIABLE, "").strip() or "1"
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{SCALE_VARIABLE}={raw!r} is not a number") from None
    if not value > 0:
        raise ValueError(f"{SCALE_VARIABLE}={raw!r} must be positive")
    return value


def scaled(seconds: float) -> float:
    """A time bound of `seconds` on a normal machine, times WORKBENCH_TEST_TIMEOUT_SCALE."""
    return seconds * timeout_scale()


def _bound_text(seconds: float) -> str:
    return f"{scaled(seconds):.3g} s ({seconds:g} s x {SCALE_VARIABLE}={timeout_scale():g})"


def tail(text: str | None, chars: int = 3000) -> str:
    """The end of a process's output, for a failure message."""
    text = (text or "").rstrip()
    return text if len(text) <= chars else "..." + text[-chars:]


def _describe(describe_state: Callable[[], str] | None) -> str:
    if describe_state is None:
        return "(not described)"
    try:
        return describe_state()
    except Exception as err:  # the failure is the wait's, not the description's
        return f"(could not be read: {err!r})"


def wait_until(condition: Callable[[], T], what: str, timeout: float,
               describe_state: Callable[[], str] | None = None, interval: float = 0.2) -> T:
    """Poll ``condition()`` until it returns something truthy, and return that.

    ``timeout`` is the bound on a normal machine, scaled by WORKBENCH_TEST_TIMEOUT_SCALE. When
    it runs out, AssertionError names `what` was awaited and ``describe_state()``, the last
    state seen. A condition that can tell the wait is hopeless (the process it waits on has
    exited) should raise its own AssertionError at once.
    """
    deadline = time.monotonic() + scaled(timeout)
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            state = _describe(describe_state)
            raise AssertionError(f"waited {_bound_text(timeout)} for {what}; "
                                 f"last state seen: {state}")
        time.sleep(interval)


def kill(proc: subprocess.Popen) -> None:
    """SIGKILL the process, and its process group when it leads one (start_new_session)."""
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
            return
    except (ProcessLookupError, PermissionError):
        pass
    proc.kill()


def communicate(proc: subprocess.Popen, what: str, timeout: float,
                describe_state: Callable[[], str] | None = None) -> tuple[str, str]:
    """``proc.communicate()`` bounded by ``scaled(timeout)``; (stdout, stderr).

    If the process has not exited by then it is killed (its whole group when it leads one) and
    AssertionError names `what` was awaited, ``describe_state()`` and the tail of its stderr.
    """
    try:
        return proc.communicate(timeout=scaled(timeout))
    except subprocess.TimeoutExpired:
        state = _describe(describe_state)
        kill(proc)
        out, err = proc.communicate()
        raise AssertionError(f"waited {_bound_text(timeout)} for {what}; last state seen: "
                             f"{state}; the process was killed; its stderr ended with:\n"
                             f"{tail(err)}\nits stdout ended with:\n{tail(out)}") from None
