"""How many workers a sweep starts: a count beyond what can run is refused before anything is
written, no more workers start than trials are left, and a worker never outlives its sweep."""

import contextlib
import os
import signal
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli, tiny_spec
from tests.held_trials import held_sweep
from tests.waiting import communicate, scaled, wait_until


@pytest.mark.parametrize("workers", ["100000", "3"], ids=["beyond-the-cpus", "beyond-the-trials"])
def test_a_worker_count_beyond_what_can_run_is_refused(workers, write_spec, tmp_path):
    """The sweep has 2 trials (and a machine has at most 25,000 CPUs): exit 2, one line naming
    --workers and the allowed range, no store."""
    path = write_spec(tiny_spec(trials=2, seeds=1, methods={"step_size": ["constant"]},
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    result = run_cli("sweep", str(path), "--workers", workers, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: --workers: {workers}: ")
    assert "allowed: 1 to 2" in result.stderr, result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert not list(tmp_path.glob("store*")), "a refused sweep wrote its store"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return fields[0] != "Z"


def _spawned_children(parent: int) -> list[int]:
    """The worker processes (``multiprocessing`` spawned) whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(stat[1]) == parent and b"spawn_main" in command:
            found.append(int(entry.name))
    return found


def _kill_parent_and_wait_for_the_workers(proc, pids: list[int]) -> None:
    try:
        proc.kill()  # SIGKILL: nothing of the sweep's process runs to stop its workers
        communicate(proc, "the killed sweep to end", 60)
        wait_until(lambda: not any(_alive(pid) for pid in pids),
                   "the workers of the killed sweep to end", 120,
                   describe_state=lambda: f"alive: {[p for p in pids if _alive(p)]}")
    finally:
        for pid in pids:  # never left behind by a failing test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
def test_a_kill_9_of_the_sweep_leaves_no_worker_running(write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=2, seeds=1, methods={"step_size": ["constant"]},
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    proc, pids = held_sweep(path, tmp_path, workers=2, expected=2)
    assert sorted(pids) == sorted(_spawned_children(proc.pid))
    _kill_parent_and_wait_for_the_workers(proc, pids)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
def test_no_more_workers_start_than_trials_are_left(write_spec, tmp_path):
    """Two of three trials done: `--workers 2` runs the one trial left in the sweep's own
    process, starting no worker process."""
    spec = tiny_spec(trials=2, seeds=1, methods={"step_size": ["constant"]},
                     storage=f"sqlite:///{tmp_path / 'store.db'}")
    path = write_spec(spec)
    first = run_cli("sweep", str(path), "--quiet", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    path.write_text(yaml.safe_dump({**spec, "trials": 3}, sort_keys=False))
    proc, pids = held_sweep(path, tmp_path, workers=2, expected=1)
    try:
        assert pids == [proc.pid] and _spawned_children(proc.pid) == []
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()



@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads processes from /proc")
def test_the_workers_of_a_killed_sweep_end_with_it_and_the_command_run_again_finishes(
        write_spec, tmp_path):
    """The workers of a SIGKILLed sweep, killed while both train, end within 2 s (they took
    16-20 s, their trials RUNNING under a live owner all that while), each leaving its trial
    as a kill of the worker does: the same command run again fails those trials as their
    worker died, runs their configurations again and finishes the sweep."""
    import subprocess
    import sys

    import optuna
    from optuna.trial import TrialState

    from tests.conftest import study_name

    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(tiny_spec(trials=2, seeds=1, methods={"step_size": ["constant"]},
                                budget={"steps": 4000}, storage=storage))
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "sweep", str(path), "--quiet",
                             "--workers", "2"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    pids: list[int] = []
    try:
        def both_training() -> bool:
            assert proc.poll() is None, proc.stderr.read()
            with contextlib.suppress(Exception):  # no store or study yet
                (name,) = optuna.get_all_study_names(storage)
                trials = optuna.load_study(study_name=name, storage=storage).get_trials()
                return (sum(t.state == TrialState.RUNNING for t in trials) == 2
                        and _metric_rows(tmp_path / "store.mlflow.db") >= 2000)
            return False

        wait_until(both_training, "both workers to train", 300)
        pids = _spawned_children(proc.pid)
        assert len(pids) == 2
        proc.kill()
        proc.wait(scaled(60))  # not communicate(): the workers hold its output pipes too
        wait_until(lambda: not any(_alive(pid) for pid in pids),
                   "the workers to end with their killed sweep", 2, interval=0.02,
                   describe_state=lambda: f"alive: {[p for p in pids if _alive(p)]}")
    finally:
        for pid in pids:  # never left behind by a failing test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    again = run_cli("sweep", str(path), "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    trials = optuna.load_study(study_name=study_name(storage, "tiny.step_size=constant"),
                               storage=storage).get_trials()
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "COMPLETE", "FAIL", "FAIL"]
    retried = sorted(t.user_attrs["retry_of"] for t in trials if "retry_of" in t.user_attrs)
    assert retried == sorted(t.number for t in trials if t.state == TrialState.FAIL)


def _metric_rows(path: Path) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        return db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
