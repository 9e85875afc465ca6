"""Whether a local process still runs (for leftovers of killed workers and builds), and the
name of this host as the store records it."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import time


def this_host() -> str:
    """The host name a worker records as a trial's owner and an artifact folder's host:
    ``WORKBENCH_HOST`` when set (containers whose host names are not unique), else
    ``platform.node()``."""
    return os.environ.get("WORKBENCH_HOST") or platform.node()


def process_alive(pid: int) -> bool:
    """True unless no process has ``pid`` (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def end_with_parent(parent: int, poll_s: float = 0.25) -> None:
    """SIGKILL to this process once ``parent`` (its parent's pid) ends, even by SIGKILL: a
    worker never outlives its sweep. Linux: the kernel sends it as the parent ends
    (``prctl(PR_SET_PDEATHSIG)``); elsewhere, and as a fallback, a daemon thread that sees
    ``os.getppid()`` change within ``poll_s``.

    A kill, not SIGTERM's orderly stop: a SIGTERM raised ``SystemExit`` wherever the worker
    was (inside a database call it could surface as a failure of the method, and the
    fallback's second SIGTERM cut the close-out short), then Python's shutdown of a worker
    that has trained took 5-20 s, its trial RUNNING under a live owner all that while, so
    the same command run again counted it as running elsewhere. A worker ended this way
    leaves what a kill of the worker leaves, which the next claim repairs at once on this
    host: its trial failed as its worker died and queued again (``retry_crashed``), the seed
    runs it finished kept (``workbench.engine.trial``)."""
    import signal
    import threading

    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGKILL)

    if os.getppid() != parent:  # it ended before the watch began
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

RAY_NODE = "WORKBENCH_RAY_NODE"  # set by a Ray worker (ray_launcher): the node it runs on


def owner() -> dict:
    """What a claimed trial records as its owner: host, process id, and the Ray node of a Ray
    worker (so that a user sees which node ran which trial)."""
    found = {"host": this_host(), "pid": os.getpid()}
    if os.environ.get(RAY_NODE):
        found["ray_node"] = os.environ[RAY_NODE]
    return found
