"""Whether a local process still runs (for leftovers of killed workers and builds), and the
name of this host as the store records it."""

from __future__ import annotations

import os
import platform


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


RAY_NODE = "WORKBENCH_RAY_NODE"  # set by a Ray worker (ray_launcher): the node it runs on


def owner() -> dict:
    """What a claimed trial records as its owner: host, process id, and the Ray node of a Ray
    worker (so that a user sees which node ran which trial)."""
    found = {"host": this_host(), "pid": os.getpid()}
    if os.environ.get(RAY_NODE):
        found["ray_node"] = os.environ[RAY_NODE]
    return found
