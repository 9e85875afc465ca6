"""Whether a local process still runs (for leftovers of killed workers and builds)."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """True unless no process has ``pid`` (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
