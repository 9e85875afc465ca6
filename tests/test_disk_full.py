"""A disk that fills mid-sweep (issue 43): one line naming the store and its free space, exit
code 74 (a fault, not bad input), no trial left RUNNING (each stopped one marked with the
reason, not "worker died"), and the same command after space is freed finishes the sweep with
exactly trials x seeds finished seed runs, every trial finished before the fault kept as it was.

The disk is a tmpfs the test mounts (as root); where it cannot mount one, it is skipped with the
reason. The store's reserve (``workbench.store.disk_space``) is what lets a full disk still
record why the trials stopped."""

import subprocess
import uuid

import optuna
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli, tiny_spec
from workbench import api
from workbench.store.disk_space import EXIT_STORE_FULL, RESERVE_BYTES, is_disk_full

TRIALS, SEEDS = 5, 2


def _mount(folder, megabytes: int) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(folder)],
                   check=True, capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    """A folder on a 4 MiB tmpfs, and a function that grows it to N MiB."""
    folder = tmp_path / "disk"
    folder.mkdir()
    try:
        _mount(folder, 4)
    except (OSError, subprocess.CalledProcessError) as err:
        detail = getattr(err, "stderr", b"") or str(err).encode()
        pytest.skip("a disk-full test needs a small file system it mounts itself (tmpfs, as "
                    f"root); mount refused: {detail.decode(errors='replace').strip()}")

    def grow(megabytes: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={megabytes}m", str(folder)], check=True)

    yield folder, grow
    subprocess.run(["umount", "-l", str(folder)], check=False)


def _spec(write_spec, folder, name):
    # a few MB of metric rows per study: far more than the 4 MiB disk holds
    return write_spec(tiny_spec(name=name, trials=TRIALS, seeds=SEEDS, budget={"steps": 400},
                                storage=f"sqlite:///{folder}/store.db"))


def _trials(storage: str) -> dict[str, list]:
    return {s.study_name: optuna.load_study(study_name=s.study_name, storage=storage).trials
            for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_full_disk_stops_with_one_line_and_resumes_exactly(small_disk, write_spec, tmp_path,
                                                               workers):
    folder, grow = small_disk
    name = f"full{uuid.uuid4().hex[:6]}"
    path = _spec(write_spec, folder, name)
    storage = f"sqlite:///{folder}/store.db"

    stopped = run_cli("sweep", path, "--quiet", "--workers", workers, cwd=tmp_path)

    assert stopped.returncode == EXIT_STORE_FULL, stopped.stderr
    lines = stopped.stderr.strip().splitlines()
    assert len(lines) == 1, stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert str(folder / "store.db") in lines[0] and " free of " in lines[0], lines[0]
    assert "is full" in lines[0] and "marked stopped" in lines[0]
    before = _trials(storage)
    states = [t.state.name for trials in before.values() for t in trials]
    assert "RUNNING" not in states and "WAITING" not in states, states
    marked = [t for trials in before.values() for t in trials if t.state.name == "FAIL"]
    assert marked, "the trials the full disk stopped are marked failed"
    for t in marked:
        assert t.user_attrs["interrupted"] == f"disk full: {folder / 'store.db'}"
        assert "fail_reason" not in t.user_attrs  # no failure of its method
    client = MlflowClient(f"sqlite:///{folder}/store.mlflow.db")
    experiment = client.get_experiment_by_name(name)
    left = client.search_runs([experiment.experiment_id],
                              "attributes.status = 'RUNNING' and tags.`workbench.kind` != 'study'")
    assert left == [], [r.info.run_name for r in left]
    failed = client.search_runs([experiment.experiment_id], "attributes.status = 'FAILED'")
    assert failed and all(r.data.tags["workbench.fail_reason"].startswith("disk full: ")
                          for r in failed), [r.data.tags for r in failed]
    assert not (folder / "store.reserve").exists()  # given back to record the stop

    grow(256)
    resumed = run_cli("sweep", path, "--quiet", "--workers", workers, cwd=tmp_path)

    assert resumed.returncode == 0, resumed.stderr
    after = _trials(storage)
    for study, trials in after.items():
        finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
        assert len(finished) == TRIALS, (study, [t.state.name for t in trials])
        again = {t.user_attrs["requeue_of"] for t in trials if "requeue_of" in t.user_attrs}
        assert again == {t.number for t in before[study] if t.state.name == "FAIL"}
        for t in before[study]:  # what finished before the fault is kept as it was
            if t.state.name in ("COMPLETE", "PRUNED"):
                kept = trials[t.number]
                assert (kept.state, kept.value, kept.params) == (t.state, t.value, t.params)
        by_number = {t.number: t for t in trials}
        for t in trials:  # each stopped trial ran again with its parameters
            if "requeue_of" in t.user_attrs:
                assert t.params == by_number[t.user_attrs["requeue_of"]].params
    seeds = api.load_runs(name, storage, kinds=["seed"])
    finished = seeds[seeds["status"] == "FINISHED"]
    complete = sum(t.state.name == "COMPLETE" for trials in after.values() for t in trials)
    assert len(finished) == complete * SEEDS, seeds[["study", "trial", "seed", "status"]]
    assert not finished.duplicated(["study", "trial", "seed"]).any()
    assert (folder / "store.reserve").stat().st_size == RESERVE_BYTES


def test_a_disk_too_full_to_start_writes_nothing(tmp_path, write_spec):
    folder = tmp_path / "disk"
    folder.mkdir()
    try:
        _mount(folder, 1)  # less than the reserve
    except (OSError, subprocess.CalledProcessError) as err:
        pytest.skip(f"needs a tmpfs it mounts itself (as root): {err}")
    try:
        path = _spec(write_spec, folder, "tiny")
        result = run_cli("sweep", path, "--quiet", cwd=tmp_path)
        assert result.returncode == EXIT_STORE_FULL, result.stderr
        assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
        assert "before the sweep started" in result.stderr
        assert list(folder.iterdir()) == []  # nothing written, no partial reserve
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_disk_is_recognised_through_every_wrapper():
    import errno
    import sqlite3

    import sqlalchemy.exc

    full = sqlite3.OperationalError("database or disk is full")
    wrapped = sqlalchemy.exc.OperationalError("COMMIT", {}, full)
    try:
        try:
            raise wrapped from full
        except Exception as inner:
            raise optuna.exceptions.StorageInternalError("exceeding max length") from inner
    except Exception as outer:
        assert is_disk_full(outer)
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(sqlite3.OperationalError("database is locked"))
    assert not is_disk_full(RuntimeError("a method raised"))
