"""Trials held open for as long as a test needs: a child Python started with
``holding_trials``'s environment runs no task; each trial's first seed writes a file named by
its process id into the returned folder and waits there until the process is interrupted or
killed. So a test signals a sweep while every worker is inside a trial, whatever the machine's
speed, and knows the workers' process ids."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.waiting import tail, wait_until

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


def held_sweep(path: Path, tmp_path: Path, workers: int, expected: int | None = None):
    """``python -m workbench sweep PATH --quiet --workers N`` (in its own session, so a test
    may signal its process group) with its trials held; (the process, the held workers'
    process ids) once ``expected`` (default ``workers``) workers are inside a trial."""
    expected = workers if expected is None else expected
    env, held = holding_trials(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "sweep", str(path), "--quiet",
                             "--workers", str(workers)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)

    def all_held():
        if proc.poll() is not None:
            raise AssertionError(f"the sweep exited with code {proc.returncode} before its "
                                 f"trials started: {tail(proc.stderr.read())}")
        return len(list(held.iterdir())) >= expected

    try:
        wait_until(all_held, f"{expected} worker(s) inside a trial", 300,
                   describe_state=lambda: f"{len(list(held.iterdir()))} inside a trial")
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc, [int(p.name) for p in held.iterdir()]
