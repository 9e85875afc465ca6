"""Trials held open for as long as a test needs: a child Python started with
``holding_trials``'s environment runs no task; each trial's first seed writes a file named by
its process id into the returned folder and waits there until the process is interrupted or
killed. So a test signals a sweep while every worker is inside a trial, whatever the machine's
speed, and knows the workers' process ids."""

from __future__ import annotations

import os
from pathlib import Path

HOOK = '''
import importlib.machinery, os, sys, time
from pathlib import Path

HOLD = os.environ.get("WORKBENCH_TEST_HOLD")


class _Hold:
    def find_spec(self, name, path=None, target=None):
        if name != "workbench.engine.trial":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)

            def held(*args, **kwargs):
                Path(HOLD, str(os.getpid())).touch()
                while True:
                    time.sleep(0.05)

            module.execute = held

        spec.loader.exec_module = exec_module
        return spec


if HOLD:
    sys.meta_path.insert(0, _Hold())
'''


def holding_trials(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """(the environment for ``python -m workbench`` whose trials are held, the folder where
    each held worker's file appears)."""
    hooks, held = tmp_path / "hold_hooks", tmp_path / "held"
    hooks.mkdir()
    held.mkdir()
    (hooks / "sitecustomize.py").write_text(HOOK)
    root = str(Path(__file__).resolve().parents[1])
    return ({**os.environ, "PYTHONWARNINGS": "ignore", "WORKBENCH_TEST_HOLD": str(held),
             "PYTHONPATH": os.pathsep.join([str(hooks), root])}, held)
