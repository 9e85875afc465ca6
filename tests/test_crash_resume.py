"""Kill anything at any moment, run the same command again, lose nothing; many workers on
SQLite and on PostgreSQL; a diverging objective past the spec's bound is pruned."""

import os
import random
import signal
import subprocess
import sys

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.conftest import run_cli, study_name, tiny_spec
from tests.waiting import communicate, kill, tail, wait_until
from workbench.engine.sweep_run import run_sweep
from workbench.spec import sweep as spec

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Metric rows the whole kill-test sweep logs (2 studies x 3 trials x 2 seeds x 1,501 steps x
# about 9 metrics; 165,446 measured), rounded down.
FULL_SWEEP_ROWS = 150_000


def start_sweep(path, cwd, *extra):
    return subprocess.Popen([sys.executable, "-m", "workbench", "sweep", str(path), "--quiet",
                             *extra], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _alive(proc, what):
    """Fail at once, with its stderr, if the sweep `proc` exited before `what` happened."""
    if proc.poll() is not None:
        raise AssertionError(f"the sweep exited with code {proc.returncode} before {what}; "
                             f"its stderr ended with:\n{tail(proc.stderr.read())}")


def wait_for_metrics(mlflow_url, rows_wanted, proc, timeout=600):
    """Until the store holds `rows_wanted` metric rows (the sweep is alive and logging)."""
    what = f"{rows_wanted} metric rows in {mlflow_url.split('@')[-1]}"
    seen = {"rows": None}

    def enough():
        _alive(proc, what)
        seen["rows"] = metric_rows(mlflow_url)
        return seen["rows"] >= rows_wanted

    try:
        wait_until(enough, what, timeout, interval=0.3,
                   describe_state=lambda: f"{seen['rows']} metric rows; the sweep is running")
    except BaseException:
        kill(proc)
        proc.wait()
        raise


def metric_rows(mlflow_url) -> int:
    import sqlalchemy as sa

    engine = sa.create_engine(mlflow_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT COUNT(*) FROM metrics")).scalar()
    except sa.exc.SQLAlchemyError:
        return 0  # not created yet
    finally:
        engine.dispose()


def trial_states(storage) -> dict[str, dict[str, int]]:
    """{study: {state name: count}} in the store (empty before any study exists)."""
    states = {}
    for name in optuna.get_all_study_names(storage):
        counts: dict[str, int] = {}
        for trial in optuna.load_study(study_name=name, storage=storage).get_trials():
            counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
        states[name] = counts
    return states


def wait_for_a_running_trial(storage, proc, timeout=300):
    """Until some trial is RUNNING (so the kill lands inside one, not between two)."""
    what = "a RUNNING trial to kill the sweep inside"
    seen = {"states": None}

    def running():
        _alive(proc, what)
        seen["states"] = trial_states(storage)
        return any(c.get("RUNNING") for c in seen["states"].values())

    try:
        wait_until(running, what, timeout, interval=0.05,
                   describe_state=lambda: f"trial states {seen['states']}")
    except BaseException:
        kill(proc)
        proc.wait()
        raise


def wait_for_sweeps(procs, storage, what, timeout=900):
    """Until every sweep process in `procs` exits; each must exit 0. Returns their stderr."""
    errors = []
    try:
        for proc in procs:
            _, err = communicate(proc, what, timeout,
                                 describe_state=lambda: f"trial states {trial_states(storage)}")
            assert proc.returncode == 0, err
            errors.append(err)
    finally:
        for proc in procs:  # the others, when one failed
            if proc.poll() is None:
                kill(proc)
                proc.wait()
    return errors


def mlflow_url_of(storage: str) -> str:
    from workbench.store.database import Store

    return Store.from_url(storage).mlflow_url


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


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sigkill_at_random_points_then_the_same_command_finishes_exactly(backend, request,
                                                                          write_spec, tmp_path):
    storage = (f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite"
               else request.getfixturevalue("postgres").new_database())
    path = write_spec(tiny_spec(trials=3, seeds=2, budget={"steps": 1500}, storage=storage))
    mlflow_url = mlflow_url_of(spec.load(path).storage)
    rng = random.Random(backend)
    killed_numbers = set()
    for _ in range(2):  # kill twice, at random points of the work, then finish
        proc = start_sweep(path, tmp_path, *(["--workers", "2"] if backend == "postgresql"
                                             else []))
        # The kill point is a random share of the work, counted in metric rows, not a random
        # time: a fast machine could finish the rest of the sweep within any fixed delay.
        # Each kill lands within the first 3-12 % of the whole (two kills leave most to do).
        before = metric_rows(mlflow_url)
        wait_for_metrics(mlflow_url, before + int(rng.uniform(0.03, 0.12) * FULL_SWEEP_ROWS),
                         proc)
        wait_for_a_running_trial(spec.load(path).storage, proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for title in ("tiny.step_size=constant", "tiny.step_size=polyak"):
            name = study_name(spec.load(path).storage, title)
            killed_numbers |= {(name, t.number) for t in optuna.load_study(
                study_name=name, storage=spec.load(path).storage).get_trials()
                if t.state == TrialState.RUNNING}
    assert killed_numbers
    again = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    studies = [study_name(spec.load(path).storage, title)
               for title in ("tiny.step_size=constant", "tiny.step_size=polyak")]
    client, runs = check_store(spec.load(path).storage, mlflow_url, "tiny", studies, 3)
    for name, number in killed_numbers:
        trials = optuna.load_study(study_name=name, storage=spec.load(path).storage).get_trials()
        dead = trials[number]
        assert dead.state == TrialState.FAIL
        retry = [t for t in trials if t.user_attrs.get("retry_of") == number]
        assert len(retry) == 1 and retry[0].params == dead.params
        if "mlflow_run_id" in dead.user_attrs:
            dead_run = client.get_run(dead.user_attrs["mlflow_run_id"])
            assert dead_run.info.status == "FAILED"
            assert dead_run.data.tags["workbench.fail_reason"] == "worker died"
    # one finished seed run per (configuration, seed): each complete trial has its two, and
    # none is left below a killed trial (its retry took them over)
    status = {r.info.run_id: r.info.status for r in runs}
    seeds_of: dict[str, list[int]] = {}
    for run in runs:
        if run.data.tags["workbench.kind"] == "seed" and run.info.status == "FINISHED":
            seeds_of.setdefault(run.data.tags["mlflow.parentRunId"], []).append(
                int(run.data.tags["workbench.seed"]))
    assert {status[trial] for trial in seeds_of} <= {"FINISHED", "KILLED"}, seeds_of
    assert all(sorted(seeds_of.get(r.info.run_id, [])) == [0, 1] for r in runs
               if r.data.tags["workbench.kind"] == "trial" and r.info.status == "FINISHED")
    for run in runs:  # finished runs have every step of their metrics
        if run.data.tags["workbench.kind"] == "seed" and run.info.status == "FINISHED":
            steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
            assert steps == list(range(1501))


def test_two_sweep_processes_on_one_sqlite_store(write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=4, storage=f"sqlite:///{tmp_path / 'store.db'}"))
    first = start_sweep(path, tmp_path, "--workers", "2")
    second = start_sweep(path, tmp_path, "--workers", "2")  # four workers on one store
    for err in wait_for_sweeps([first, second], f"sqlite:///{tmp_path / 'store.db'}",
                               "two sweep processes of 2 workers each to finish on SQLite"):
        assert "locked" not in err and "Traceback" not in err
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    check_store(storage, f"sqlite:///{tmp_path / 'store.mlflow.db'}", "tiny",
                [study_name(storage, "tiny.step_size=constant"),
                 study_name(storage, "tiny.step_size=polyak")], 4)


def test_workers_on_postgresql(postgres, write_spec, tmp_path):
    url = postgres.new_database()
    path = write_spec(tiny_spec(trials=4, storage=url))
    first = start_sweep(path, tmp_path, "--workers", "2")
    second = start_sweep(path, tmp_path, "--workers", "2")  # four workers on one store
    for err in wait_for_sweeps([first, second], url,
                               "two sweep processes of 2 workers each to finish on PostgreSQL"):
        assert "Traceback" not in err
    client, runs = check_store(url, mlflow_url_of(url), "tiny",
                               [study_name(url, "tiny.step_size=constant"),
                                study_name(url, "tiny.step_size=polyak")], 4)
    assert sum(r.data.tags["workbench.kind"] == "seed" for r in runs) == 2 * 4 * 2
    status = run_cli("status", path, cwd=tmp_path)
    assert status.returncode == 0 and status.stdout.count("4/4") == 2


def test_an_objective_past_the_bound_is_pruned_as_diverged(write_spec, tmp_path):
    path = write_spec(tiny_spec(
        trials=1, methods={"step_size": [{"name": "constant", "fixed": {"lr": 1e-6}}]},
        objective={"metric": "train/loss", "diverge_past": 0.01},
        storage=f"sqlite:///{tmp_path / 'store.db'}"))
    (status,) = run_sweep(spec.load(path), device="cpu")
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
    wait_for_metrics(f"sqlite:///{tmp_path / 'store.mlflow.db'}", 2000, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert run_cli("sweep", path, "--quiet", cwd=tmp_path).returncode == 0
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    trials = optuna.load_study(study_name=study_name(storage, "tiny.step_size=constant"),
                               storage=storage).get_trials()
    assert not [t for t in trials if "retry_of" in t.user_attrs]
    assert sum(t.state in FINISHED for t in trials) == 2


def test_passwords_in_store_urls_are_never_printed_or_written(postgres, write_spec, tmp_path):
    url = postgres.new_database().replace("postgres@", "postgres:s3cret-pw@")
    path = write_spec(tiny_spec(trials=1, seeds=1, methods={"step_size": ["constant"]},
                                storage=url))
    outputs = [run_cli("sweep", path, cwd=tmp_path), run_cli("status", path, cwd=tmp_path),
               run_cli("report", path, "--out", tmp_path / "report", cwd=tmp_path)]
    for result in outputs:
        assert result.returncode == 0, result.stderr
        assert "s3cret-pw" not in result.stdout + result.stderr
    assert "***" in outputs[1].stdout
    for file in tmp_path.rglob("*"):
        if file.is_file() and file.name != "spec.yaml":
            assert b"s3cret-pw" not in file.read_bytes(), file
    client = MlflowClient(mlflow_url_of(spec.load(path).storage))
    for run in client.search_runs([client.get_experiment_by_name("tiny").experiment_id]):
        assert "s3cret-pw" not in str(run.data.params) + str(run.data.tags)
