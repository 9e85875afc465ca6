"""What ``workbench methods`` and ``workbench tasks`` list, kept between calls: importing every
method and task costs torch (a second and more); reading this costs milliseconds.

The catalogue (each method's and task's detail, ``workbench.catalogue.detail``) is written as JSON
to ``$WORKBENCH_CACHE/catalogue/KEY.json`` the first time it is asked for, KEY a hash of the size
and modification time of every Python file of the ``workbench`` and ``methods`` packages and
of every installed plugin's module (entry point group ``workbench.methods``), and of the
workbench's version. Any edit, new method or plugin installed or removed changes KEY, so the
next call imports everything again: a stale catalogue is never shown.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from workbench import __version__
from workbench.common.cache import cache_root

FORMAT = 1


def load() -> dict[str, Any]:
    """{"methods": [detail, ...], "tasks": [detail, ...]}, from the cache when current."""
    path = cache_root() / "catalogue" / f"{key()}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    catalogue = _build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(catalogue))
        partial.replace(path)  # whole or absent, whoever writes it at the same time
    except OSError:
        pass  # a read-only cache: list without keeping it
    return catalogue


def _build() -> dict[str, Any]:
    from workbench import registry
    from workbench.catalogue import detail
    from workbench.testbeds import TASKS

    methods = [detail.method_detail(registry.get(*key.split("/")))
               for key in registry.available()]
    return {"methods": methods, "tasks": [detail.task_detail(t) for t in TASKS.values()]}


def key() -> str:
    """A hash of every package and plugin file's size and time and of the version."""
    digest = hashlib.sha256(f"{FORMAT}:{__version__}".encode())
    for folder in _package_folders():
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
            for name in sorted(f for f in files if f.endswith(".py")):
                info = os.stat(os.path.join(root, name))
                digest.update(f"{root}/{name}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    for entry in sorted(importlib.metadata.entry_points(group="workbench.methods"),
                        key=lambda e: (e.name, e.value)):
        digest.update(f"plugin {entry.name}={entry.value}:{_stamp(entry.module)}\n".encode())
    return digest.hexdigest()[:24]


def _package_folders() -> list[str]:
    folders = [str(Path(__file__).resolve().parents[1])]  # workbench/
    spec = importlib.util.find_spec("methods")
    if spec is not None and spec.submodule_search_locations:
        folders += list(spec.submodule_search_locations)
    return folders


def _stamp(module: str) -> str:
    """Size and time of a plugin module's file (its package's folder's files when a package),
    found without importing it."""
    from workbench.common.fingerprint import module_file

    path = module_file(module)
    if path is None:
        return "missing"
    files = sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]
    return ";".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
