"""Kill anything at any moment, run the same command again, lose nothing; many workers on
SQLite and on PostgreSQL; a diverging objective past the spec's bound is pruned."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.conftest import run_cli, tiny_spec
from workbench import engine, spec

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def start_sweep(path, cwd, *extra):
    return subprocess.Popen([sys.executable, "-m", "workbench", "sweep", str(path), "--quiet",
                             *extra], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def wait_for_metrics(mlflow_db, rows_wanted, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.3)
        if not mlflow_db.exists():
            continue
        try:
            with sqlite3.connect(mlflow_db, timeout=5) as db:
                if db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] >= rows_wanted:
                    return
        except sqlite3.OperationalError:
            pass
    raise AssertionError("the sweep logged no metrics in time")


def check_store(storage, mlflow_url, experiment, studies, n_trials):
    for name in studies:
        trials = optuna.load_study(study_name=name, storage=storage).get_trials()
        assert sum(t.state in FINISHED for t in trials) == n_trials, name
        assert not [t for t in trials if t.state == TrialState.RUNNING]
    client = MlflowClient(mlflow_url)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                              max_results=5000)
    assert not [r for r in runs if r.info.status == "RUNNING"]
    return client, runs


def test_sigkill_then_the_same_command_finishes_exactly_and_retries(write_spec, tmp_path):
    db = tmp_path / "store.db"
    path = write_spec(tiny_spec(trials=3, seeds=2, methods={"step_size": ["constant"]},
                                budget={"steps": 1500}, storage=f"sqlite:///{db}"))
    proc = start_sweep(path, tmp_path)
    wait_for_metrics(tmp_path / "store.mlflow.db", 3000, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    storage = f"sqlite:///{db}"
    killed = [t for t in optuna.load_study(study_name="tiny.step_size=constant",
                                           storage=storage).get_trials()
              if t.state == TrialState.RUNNING]
    assert len(killed) == 1
    again = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    client, runs = check_store(storage, f"sqlite:///{tmp_path / 'store.mlflow.db'}", "tiny",
                               ["tiny.step_size=constant"], 3)
    trials = optuna.load_study(study_name="tiny.step_size=constant",
                               storage=storage).get_trials()
    dead = trials[killed[0].number]
    assert dead.state == TrialState.FAIL
    retry = [t for t in trials if t.user_attrs.get("retry_of") == dead.number]
    assert len(retry) == 1 and retry[0].params == dead.params
    dead_run = client.get_run(dead.user_attrs["mlflow_run_id"])
    assert dead_run.info.status == "FAILED"
    assert dead_run.data.tags["workbench.fail_reason"] == "worker died"
    for run in runs:  # finished runs have every step of their metrics
        if run.data.tags["workbench.kind"] == "seed" and run.info.status == "FINISHED":
            steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
            assert steps == list(range(1501))


def test_two_sweep_processes_on_one_sqlite_store(write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=4, storage=f"sqlite:///{tmp_path / 'store.db'}"))
    first, second = start_sweep(path, tmp_path), start_sweep(path, tmp_path, "--workers", "2")
    for proc in (first, second):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "locked" not in err and "Traceback" not in err
    check_store(f"sqlite:///{tmp_path / 'store.db'}",
                f"sqlite:///{tmp_path / 'store.mlflow.db'}", "tiny",
                ["tiny.step_size=constant", "tiny.step_size=polyak"], 4)


def test_workers_on_postgresql(postgres, write_spec, tmp_path):
    url = postgres.new_database()
    path = write_spec(tiny_spec(trials=4, storage=url))
    first, second = start_sweep(path, tmp_path, "--workers", "2"), start_sweep(path, tmp_path)
    for proc in (first, second):
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    client, runs = check_store(url, url.rsplit("/", 1)[0] + "/" + url.rsplit("/", 1)[1]
                               + "_mlflow", "tiny",
                               ["tiny.step_size=constant", "tiny.step_size=polyak"], 4)
    assert sum(r.data.tags["workbench.kind"] == "seed" for r in runs) == 2 * 4 * 2
    status = run_cli("status", path, cwd=tmp_path)
    assert status.returncode == 0 and status.stdout.count("4/4") == 2


def test_an_objective_past_the_bound_is_pruned_as_diverged(write_spec, tmp_path):
    path = write_spec(tiny_spec(
        trials=1, methods={"step_size": [{"name": "constant", "fixed": {"lr": 1e-6}}]},
        objective={"metric": "train/loss", "diverge_past": 0.01},
        storage=f"sqlite:///{tmp_path / 'store.db'}"))
    (status,) = engine.run_sweep(spec.load(path), device="cpu")
    assert status.pruned == 1
    trial = optuna.load_study(study_name=status.name,
                              storage=f"sqlite:///{tmp_path / 'store.db'}").get_trials()[0]
    assert trial.user_attrs["prune_reason"] == "diverged"
    assert len(trial.intermediate_values) == 0  # stopped at the first step past the bound


@pytest.mark.parametrize("retry", [False])
def test_retry_can_be_turned_off(retry, write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=2, seeds=1, methods={"step_size": ["constant"]},
                                budget={"steps": 3000}, retry_crashed=retry,
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    proc = start_sweep(path, tmp_path)
    wait_for_metrics(tmp_path / "store.mlflow.db", 2000, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert run_cli("sweep", path, "--quiet", cwd=tmp_path).returncode == 0
    trials = optuna.load_study(study_name="tiny.step_size=constant",
                               storage=f"sqlite:///{tmp_path / 'store.db'}").get_trials()
    assert not [t for t in trials if "retry_of" in t.user_attrs]
    assert sum(t.state in FINISHED for t in trials) == 2
