"""Where Workbench keeps what it builds once and reuses: ``$WORKBENCH_CACHE``, else
``~/.cache/workbench`` (warm-up checkpoints, the empty MLflow schema template)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir``, else ``$WORKBENCH_CACHE``, else ``~/.cache/workbench``."""
    if cache_dir is not None:
        return Path(cache_dir)
    return Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench"))
