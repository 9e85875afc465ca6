"""Kills at exact points (issue 13, items 2-6), then the same command again.

A child runs the real ``workbench`` command with a small ``sitecustomize`` on its PYTHONPATH
that wraps one function so the process SIGKILLs itself at one exact point (before or after a
given call): the kill point is instrumented, the store is not mocked. The rerun is the plain
command, and the store is checked with plain Optuna, MLflow and SQL queries.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import optuna
import pytest
import sqlalchemy as sa
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.conftest import run_cli, study_name, tiny_spec
from tests.waiting import scaled
from workbench.store.database import Store

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
MLFLOW_STATUS = {TrialState.COMPLETE: "FINISHED", TrialState.PRUNED: "KILLED",
                 TrialState.FAIL: "FAILED"}
EXIT_SHORT = 3

# ------------------------------------------------------------------ kill-point instrumentation

COMMON = '''
import contextlib, os, signal, time
from pathlib import Path

def die():
    """End this process as SIGKILL does: no cleanup, no flush."""
    os.kill(os.getpid(), signal.SIGKILL)

def run_kind(client, run_id):
    return client.get_run(run_id).data.tags.get("workbench.kind")

def wait_for(condition, bound=300 * float(os.environ.get("WORKBENCH_TEST_TIMEOUT_SCALE", 1))):
    """Poll until condition() holds (the bound only stops a hung test)."""
    deadline = time.monotonic() + bound
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
'''

# die just before the trial run is closed (its end's tags, metrics and status: one transaction)
DIE_BEFORE_FINISH_RUN = '''
from workbench.store.run_writer import RunWriter
_finish = RunWriter.finish
def finish(self, ends):
    if any(run_kind(self.client, end.run_id) == "trial" for end in ends):
        die()
    return _finish(self, ends)
RunWriter.finish = finish
'''

# through MLflow's client (the run writer's fallback for a layout it does not know), the close
# is two calls: die after the trial run's tags and metrics are written, before it is marked
# terminated
DIE_BEFORE_SET_TERMINATED = '''
from mlflow.tracking import MlflowClient
import workbench.store.run_writer
workbench.store.run_writer.open_writer = lambda *args: None
_set_terminated = MlflowClient.set_terminated
def set_terminated(self, run_id, *args, **kwargs):
    if run_kind(self, run_id) == "trial":
        die()
    return _set_terminated(self, run_id, *args, **kwargs)
MlflowClient.set_terminated = set_terminated
'''

DIE_BEFORE_TELL = '''
import optuna.study
_tell = optuna.study.Study.tell
def tell(self, *args, **kwargs):
    die()
optuna.study.Study.tell = tell
'''

DIE_AFTER_TELL = '''
import optuna.study
_tell = optuna.study.Study.tell
def tell(self, *args, **kwargs):
    _tell(self, *args, **kwargs)
    die()
optuna.study.Study.tell = tell
'''

DIE_AFTER_ASK = '''
import optuna.study
_ask = optuna.study.Study.ask
def ask(self, *args, **kwargs):
    _ask(self, *args, **kwargs)
    die()
optuna.study.Study.ask = ask
'''

# a step-size method whose every trial raises (registered in the child only). It lives in a
# module of its own, the same in every command: its code is part of the study's fingerprint,
# and the kill hooks beside it in sitecustomize differ from one command to the next.
RAISING_MODULE = "raises_demo_method"
RAISING_METHOD_CODE = '''
from workbench.families import StepSizeMethod
from workbench.hyperparams import Float
from workbench.registry import Reference, register

def before_raising():
    pass

@register
class RaisesDemo(StepSizeMethod):
    name = "raises_demo"
    hyperparameters = {"lr": Float(0.1, low=1e-3, high=1.0, log=True, minimum=0.0)}
    reference = Reference("a deliberately broken method", 2026)
    fidelity = "reconstructed"

    def build(self, params, info):
        before_raising()
        raise RuntimeError(f"boom: this method always fails (lr={self.hp.lr})")
'''
RAISING_METHOD = f'''
import {RAISING_MODULE}  # registers raises_demo
'''

# With two workers: trial 0 fails only once another trial is running; that trial (in flight
# when the first failure lands) fails only after trial 0's worker has claimed again or left.
FAIL_WHILE_ANOTHER_RUNS = '''
import optuna
from optuna.trial import TrialState

STORE = os.environ["WORKBENCH_TEST_STORE"]

def trials():
    (name,) = optuna.get_all_study_names(STORE)
    return optuna.load_study(study_name=name, storage=STORE).get_trials()

def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True

def before_raising():
    now = trials()
    mine = next(t for t in now if t.state == TrialState.RUNNING
                and t.user_attrs.get("worker", {}).get("pid") == os.getpid())
    first_owner = now[0].user_attrs["worker"]["pid"]
    if mine.number == 0:
        wait_for(lambda: any(t.state == TrialState.RUNNING and t.number
                             for t in trials()))
    elif first_owner != os.getpid():
        wait_for(lambda: len(trials()) > 2 or not alive(first_owner))

import raises_demo_method
raises_demo_method.before_raising = before_raising
'''

# With two workers: each one closing the study run waits until the other is closing it too
# (or, when it holds the store's lock, until the other waits for that lock).
CLOSE_THE_STUDY_RUN_TOGETHER = '''
import optuna
from optuna.trial import TrialState
from workbench.engine.claims import Claims
from workbench.store import runs
from workbench.store.database import Store

MARKS = Path(os.environ["WORKBENCH_TEST_MARKS"])
HELD = []

def others(kind):
    return {p.name for p in MARKS.glob(kind + "-*")} - {f"{kind}-{os.getpid()}"}

_lock = Store.lock
@contextlib.contextmanager
def lock(self, name):
    waiting = MARKS / f"waiting-{os.getpid()}"
    waiting.touch()
    with _lock(self, name):
        waiting.unlink()
        HELD.append(name)
        try:
            yield
        finally:
            HELD.pop()
Store.lock = lock

_close_study_run = Claims.close_study_run
def close_study_run(self, study, plan, *args, **kwargs):
    wait_for(lambda: sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                         for t in study.get_trials()) >= plan.n_trials)
    return _close_study_run(self, study, plan, *args, **kwargs)
Claims.close_study_run = close_study_run

_finish_run = runs.finish_run
def finish_run(client, run_id, state, **kwargs):
    if run_kind(client, run_id) == "study":
        (MARKS / f"finishing-{os.getpid()}").touch()
        wait_for(lambda: others("finishing") or (HELD and others("waiting")))
    return _finish_run(client, run_id, state, **kwargs)
runs.finish_run = finish_run
'''

DIE_AFTER_THE_FIRST_FIGURE = '''
import matplotlib.figure
_savefig = matplotlib.figure.Figure.savefig
def savefig(self, *args, **kwargs):
    _savefig(self, *args, **kwargs)
    die()
matplotlib.figure.Figure.savefig = savefig
'''


def run_instrumented(hooks: list[str], *args, cwd, env: dict | None = None,
                     timeout: float = 600) -> subprocess.CompletedProcess:
    """The real ``workbench ARGS``, with ``hooks`` installed by a sitecustomize in every
    Python process it starts (spawned workers too)."""
    folder = cwd / "hooks"
    folder.mkdir(exist_ok=True)
    (folder / f"{RAISING_MODULE}.py").write_text(textwrap.dedent(RAISING_METHOD_CODE))
    (folder / "sitecustomize.py").write_text(
        "\n".join(textwrap.dedent(h) for h in [COMMON, *hooks]))
    path = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
    full_env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(path),
                **(env or {})}
    return subprocess.run([sys.executable, "-m", "workbench", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=scaled(timeout),
                          env=full_env)


def killed(result: subprocess.CompletedProcess) -> bool:
    return result.returncode == -signal.SIGKILL


# ---------------------------------------------------------------------- plain store queries


def optuna_trials(storage: str, study: str) -> list:
    return optuna.load_study(study_name=study, storage=storage).get_trials()


def mlflow_rows(storage: str) -> list[dict]:
    """Every MLflow run of the store: id, status, kind, trial number (plain SQL)."""
    engine = sa.create_engine(Store.from_url(storage).mlflow_url, poolclass=sa.pool.NullPool)
    query = sa.text(
        "SELECT runs.run_uuid AS run_id, runs.status AS status, kind.value AS kind, "
        "number.value AS number FROM runs "
        "LEFT JOIN tags kind ON kind.run_uuid = runs.run_uuid AND kind.key = 'workbench.kind' "
        "LEFT JOIN tags number ON number.run_uuid = runs.run_uuid "
        "AND number.key = 'optuna.trial_number'")
    try:
        with engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]
    finally:
        engine.dispose()


def objective_rows(storage: str, run_id: str) -> int:
    engine = sa.create_engine(Store.from_url(storage).mlflow_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text("SELECT COUNT(*) FROM metrics WHERE run_uuid = :r AND "
                                        "key = 'objective'"), {"r": run_id}).scalar()
    finally:
        engine.dispose()


def study_run(storage: str, study: str):
    run_id = optuna.load_study(study_name=study, storage=storage).user_attrs["mlflow_run_id"]
    return MlflowClient(Store.from_url(storage).mlflow_url).get_run(run_id)


def assert_runs_agree_with_trials(storage: str, study: str) -> list:
    """No trial and no MLflow run is left RUNNING; every trial run has its trial's status."""
    trials = optuna_trials(storage, study)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    rows = mlflow_rows(storage)
    assert not [r for r in rows if r["status"] == "RUNNING"], rows
    by_number = {t.number: t for t in trials}
    for row in rows:
        if row["kind"] == "trial":
            trial = by_number[int(row["number"])]
            assert row["status"] == MLFLOW_STATUS[trial.state], (row, trial.state)
    return trials


# ---------------------------------------------------------------- item 2: the close-out


def outcome_spec(outcome: str, storage: str) -> dict:
    """Two trials of one study, each ending as ``outcome``."""
    if outcome == "complete":
        return tiny_spec(methods={"step_size": ["constant"]}, trials=2, seeds=1,
                         storage=storage)
    if outcome == "pruned":  # the loss starts above the bound: diverged, pruned at once
        return tiny_spec(methods={"step_size": ["constant"]}, trials=2, seeds=1,
                         objective={"metric": "train/loss", "diverge_past": 0.01},
                         storage=storage)
    return tiny_spec(methods={"step_size": ["raises_demo"]}, trials=2, seeds=1,
                     max_failed_trials=2, storage=storage)


CLOSE_OUT_POINTS = {"before-finish-run": DIE_BEFORE_FINISH_RUN,
                    "before-set-terminated": DIE_BEFORE_SET_TERMINATED,
                    "before-tell": DIE_BEFORE_TELL, "after-tell": DIE_AFTER_TELL}
CASES = [("complete", p) for p in CLOSE_OUT_POINTS] + [  # the other outcomes share the code
    ("pruned", "before-finish-run"), ("fail", "before-finish-run")]


@pytest.mark.slow
@pytest.mark.parametrize(("outcome", "point"), CASES, ids=[f"{o}-{p}" for o, p in CASES])
def test_a_kill_at_each_point_of_a_trials_close_out_is_recovered(outcome, point, write_spec,
                                                                tmp_path):
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(outcome_spec(outcome, storage))
    title = f"tiny.step_size={'raises_demo' if outcome == 'fail' else 'constant'}"
    method = [RAISING_METHOD] if outcome == "fail" else []

    first = run_instrumented([*method, CLOSE_OUT_POINTS[point]], "sweep", path, "--quiet",
                             cwd=tmp_path)
    assert killed(first), first.stderr
    if outcome == "fail":  # the method exists in the instrumented command only
        again = run_instrumented(method, "sweep", path, "--quiet", cwd=tmp_path)
    else:
        again = run_cli("sweep", path, "--quiet", cwd=tmp_path)

    study = study_name(storage, title)
    trials = assert_runs_agree_with_trials(storage, study)
    if outcome == "fail":  # both failed because the method raised, the killed one too
        assert [t.state for t in trials] == [TrialState.FAIL] * 2
        assert all("boom" in t.user_attrs["fail_reason"] for t in trials)
        assert study_run(storage, study).info.status == "FAILED"
    else:
        assert sum(t.state in FINISHED for t in trials) == 2
        assert sum(t.state == TrialState.FAIL for t in trials) == (point != "after-tell")
        assert study_run(storage, study).info.status == "FINISHED"
        seeds = [r for r in mlflow_rows(storage) if r["kind"] == "seed"
                 and trials[int(r["number"])].state in FINISHED]
        assert len(seeds) == 2  # one seed run per finished trial, no duplicate
    assert again.returncode == (EXIT_SHORT if outcome == "fail" else 0), again.stderr


# ------------------------------------------------------- item 3: a kill right after ask()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_kill_right_after_ask_leaves_no_trial_unclaimed(backend, request, write_spec,
                                                          tmp_path):
    storage = (f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite"
               else request.getfixturevalue("postgres").new_database())
    path = write_spec(tiny_spec(methods={"step_size": ["constant"]}, trials=2, seeds=1,
                                storage=storage))
    first = run_instrumented([DIE_AFTER_ASK], "sweep", path, "--quiet", cwd=tmp_path)
    assert killed(first), first.stderr
    study = study_name(storage, "tiny.step_size=constant")
    (orphan,) = optuna_trials(storage, study)
    assert orphan.state == TrialState.RUNNING and "worker" not in orphan.user_attrs

    again = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert study_name(storage, "tiny.step_size=constant") == study
    trials = assert_runs_agree_with_trials(storage, study)
    assert sum(t.state in FINISHED for t in trials) == 2
    assert trials[0].state == TrialState.FAIL
    assert study_run(storage, study).info.status == "FINISHED"


# ------------------------------------------- item 4: max_failed_trials and the study run


@pytest.mark.slow
def test_two_workers_never_fail_more_trials_than_max_failed_trials(write_spec, tmp_path):
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(tiny_spec(methods={"step_size": ["raises_demo"]}, trials=6, seeds=1,
                                max_failed_trials=2, storage=storage))
    result = run_instrumented([RAISING_METHOD, FAIL_WHILE_ANOTHER_RUNS], "sweep", path,
                              "--quiet", "--workers", "2", cwd=tmp_path,
                              env={"WORKBENCH_TEST_STORE": storage})
    assert "Traceback" not in result.stderr, result.stderr
    study = study_name(storage, "tiny.step_size=raises_demo")
    trials = optuna_trials(storage, study)
    assert [t.state for t in trials] == [TrialState.FAIL] * 2, result.stderr
    assert_runs_agree_with_trials(storage, study)
    run = study_run(storage, study)
    assert run.info.status == "FAILED"
    assert "max_failed_trials" in run.data.tags["workbench.fail_reason"]
    assert result.returncode == EXIT_SHORT, result.stderr


@pytest.mark.slow
def test_two_workers_close_the_study_run_once(write_spec, tmp_path):
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    marks = tmp_path / "marks"
    marks.mkdir()
    path = write_spec(tiny_spec(methods={"step_size": ["constant"]}, trials=2, seeds=1,
                                storage=storage))
    result = run_instrumented([CLOSE_THE_STUDY_RUN_TOGETHER], "sweep", path, "--quiet",
                              "--workers", "2", cwd=tmp_path,
                              env={"WORKBENCH_TEST_MARKS": str(marks)})
    assert "Traceback" not in result.stderr, result.stderr
    study = study_name(storage, "tiny.step_size=constant")
    assert_runs_agree_with_trials(storage, study)
    run = study_run(storage, study)
    assert run.info.status == "FINISHED"
    assert objective_rows(storage, run.info.run_id) == 1
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------- item 5: a short study is an error


@pytest.mark.slow
def test_a_sweep_whose_study_stopped_short_exits_3_and_says_why(write_spec, tmp_path):
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(tiny_spec(methods={"step_size": ["raises_demo", "constant"]}, trials=3,
                                seeds=1, max_failed_trials=2, storage=storage))
    for _ in range(2):  # and again: the study is still short, nothing more runs
        result = run_instrumented([RAISING_METHOD], "sweep", path, "--quiet", cwd=tmp_path)
        assert result.returncode == EXIT_SHORT, result.stderr
        assert ("raises_demo: 0 of 3 trials finished: stopped after 2 failed trials "
                "(max_failed_trials: 2)") in result.stderr
        assert "constant:" not in result.stderr  # the complete study is not named
        assert "Traceback" not in result.stderr
    trials = optuna_trials(storage, study_name(storage, "tiny.step_size=raises_demo"))
    assert [t.state for t in trials] == [TrialState.FAIL] * 2
    assert sum(t.state == TrialState.COMPLETE for t in optuna_trials(
        storage, study_name(storage, "tiny.step_size=constant"))) == 3


# --------------------------------------------------------- item 6: an atomic report


@pytest.mark.slow
def test_a_report_killed_half_way_leaves_the_old_report_or_none(write_spec, tmp_path):
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(tiny_spec(trials=2, seeds=2, storage=storage))
    assert run_cli("sweep", path, "--quiet", cwd=tmp_path).returncode == 0
    out = tmp_path / "reports" / "tiny"

    first = run_instrumented([DIE_AFTER_THE_FIRST_FIGURE], "report", path, "--out", out,
                             cwd=tmp_path)
    assert killed(first), first.stderr
    assert not out.exists()  # no report yet rather than a partial one

    built = run_cli("report", path, "--out", out, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    complete = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "index.html" in complete and "provenance.json" in complete

    second = run_instrumented([DIE_AFTER_THE_FIRST_FIGURE], "report", path, "--out", out,
                              cwd=tmp_path)
    assert killed(second), second.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == complete  # the old report

    rebuilt = run_cli("report", path, "--out", out, cwd=tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(complete)
    assert [p.name for p in out.parent.iterdir()] == ["tiny"]  # no leftovers beside it


@pytest.mark.slow
def test_a_report_never_replaces_a_folder_that_is_not_a_report(write_spec, tmp_path):
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(tiny_spec(methods={"step_size": ["constant"]}, trials=1, seeds=1,
                                storage=storage))
    assert run_cli("sweep", path, "--quiet", cwd=tmp_path).returncode == 0
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my own file")
    result = run_cli("report", path, "--out", out, cwd=tmp_path)
    # bad input (the --out argument): exit 2, named, before anything is read or written
    assert result.returncode == 2 and "error: --out: " in result.stderr
    assert "not a report" in result.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# ------------------------------- Order 22: a kill between the seeds of a trial, then again

# die (SIGKILL) right after the first seed run of the sweep finished, before the next starts
DIE_AFTER_THE_FIRST_SEED = '''
from workbench.engine.trial import TrialRunner
_run_seed = TrialRunner._run_seed
def _run_seed_then_die(self, *args, **kwargs):
    value = _run_seed(self, *args, **kwargs)
    die()
TrialRunner._run_seed = _run_seed_then_die
'''

# on a seed axis: die right after every seed run of the first trial finished (one write),
# before the trial run is closed
DIE_AFTER_THE_SEED_AXIS = '''
from workbench.engine.trial import TrialRunner
_together = TrialRunner._run_seeds_together
def _together_then_die(self, *args, **kwargs):
    values = _together(self, *args, **kwargs)
    die()
TrialRunner._run_seeds_together = _together_then_die
'''

# Ctrl-C right after the first seed run finished: the trial is marked interrupted, requeued
INTERRUPT_AFTER_THE_FIRST_SEED = '''
from workbench.engine.trial import TrialRunner
_run_seed = TrialRunner._run_seed
def _run_seed_then_interrupt(self, *args, **kwargs):
    value = _run_seed(self, *args, **kwargs)
    raise KeyboardInterrupt
TrialRunner._run_seed = _run_seed_then_interrupt
'''

BETWEEN_SEEDS = {"kill": DIE_AFTER_THE_FIRST_SEED, "kill-seed-axis": DIE_AFTER_THE_SEED_AXIS,
                 "interrupt": INTERRUPT_AFTER_THE_FIRST_SEED}
BETWEEN_SEEDS_CASES = [("sqlite", "kill"), ("postgresql", "kill"),
                       ("sqlite", "kill-seed-axis"), ("sqlite", "interrupt")]


def finished_seed_runs(storage: str):
    """The sweep's finished seed runs as the API returns them (`load_runs`)."""
    from workbench.api import load_runs

    found = load_runs("tiny", storage)
    return found[(found["kind"] == "seed") & (found["status"] == "FINISHED")]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "point"), BETWEEN_SEEDS_CASES,
                         ids=[f"{b}-{p}" for b, p in BETWEEN_SEEDS_CASES])
def test_a_trial_stopped_after_its_first_seed_leaves_one_run_per_seed(backend, point, request,
                                                                        write_spec, tmp_path):
    """A worker killed (or interrupted) once a trial's first seed run finished: the same
    command run again retries the trial's configuration, and every reader then sees exactly
    one finished seed run per (configuration, seed): trials x seeds in all, none trained
    twice."""
    from workbench.api import load_metrics
    from workbench.report.data import SweepRef, read_sweep
    from workbench.spec import sweep as spec
    from workbench.stats import aggregates as stats

    storage = (f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite"
               else request.getfixturevalue("postgres").new_database())
    n_trials, seeds = 2, [0, 1, 2]
    settings = dict(methods={"step_size": ["polyak"]}, trials=n_trials, seeds=len(seeds),
                    pruner={"name": "median", "report_points": 4},  # reports, prunes none
                    **({"execution": {"seeds": "vectorised"}} if point == "kill-seed-axis"
                       else {}))
    path = write_spec(tiny_spec(storage=storage, **settings))
    storage = spec.load(path).storage

    first = run_instrumented([BETWEEN_SEEDS[point]], "sweep", path, "--quiet", cwd=tmp_path)
    if point == "interrupt":
        assert first.returncode == 130, first.stderr
    else:
        assert killed(first), first.stderr
    before = finished_seed_runs(storage)
    assert len(before) == (len(seeds) if point == "kill-seed-axis" else 1)

    again = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    study = study_name(storage, "tiny.step_size=polyak")
    trials = assert_runs_agree_with_trials(storage, study)
    stopped, retry = trials[0], trials[1]
    assert stopped.state == TrialState.FAIL and retry.state == TrialState.COMPLETE
    assert retry.params == stopped.params
    assert sum(t.state in FINISHED for t in trials) == n_trials

    # the API: trials x seeds finished seed runs, one per (configuration, seed)
    done = finished_seed_runs(storage)
    assert len(done) == n_trials * len(seeds), done[["run_id", "trial", "seed", "status"]]
    config = [c for c in done.columns if c.startswith("params.step_size.")]
    assert not done.duplicated([*config, "seed"]).any()
    assert not done.duplicated(["trial", "seed"]).any()
    assert sorted(done["trial"].unique()) == [t.number for t in trials if t.state in FINISHED]
    # the seed runs that finished before the stop were kept, not trained again
    assert set(before["run_id"]) <= set(done["run_id"])
    kept = done[done["run_id"].isin(before["run_id"])]
    assert set(kept["trial"]) == {retry.number}
    assert (kept["tags.mlflow.parentRunId"] == retry.user_attrs["mlflow_run_id"]).all()
    every_seed_run = [r for r in mlflow_rows(storage) if r["kind"] == "seed"]
    assert len(every_seed_run) == n_trials * len(seeds)  # no seed trained twice
    # each trial's Optuna value is over its own finished seed runs
    for t in trials:
        if t.state == TrialState.COMPLETE:
            mine = done[done["trial"] == t.number]
            assert sorted(mine["seed"]) == seeds
            assert t.value == pytest.approx(stats.aggregate(
                list(mine["metrics.objective"]), "mean"))
    points = load_metrics("tiny", ["train/loss"], storage)
    assert points["run_id"].nunique() == n_trials * len(seeds)
    assert not points.duplicated(["trial", "seed", "step"]).any()
    if backend == "sqlite":  # the retry told the pruner what an unstopped trial told it
        clean = tmp_path / "clean"
        clean.mkdir()
        reference = write_spec(tiny_spec(storage=f"sqlite:///{clean / 'store.db'}",
                                         **settings), "clean/spec.yaml")
        assert run_cli("sweep", reference, "--quiet", cwd=clean).returncode == 0
        clean_storage = spec.load(reference).storage
        unstopped = optuna_trials(clean_storage,
                                  study_name(clean_storage, "tiny.step_size=polyak"))[0]
        assert unstopped.params == retry.params
        assert len(retry.intermediate_values) == (1 if point == "kill-seed-axis"
                                                  else len(seeds)) * 4
        assert retry.intermediate_values == pytest.approx(unstopped.intermediate_values)

    # the report and `workbench status` agree
    data = read_sweep(SweepRef("tiny", storage))
    (method,) = data.methods
    assert (method.trials["status"] == "FINISHED").sum() == n_trials
    assert sorted(method.seeds["seed"]) == seeds
    assert set(method.seeds["run_id"]) <= set(done["run_id"])
    shown = run_cli("status", path, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"{n_trials}/{n_trials}" in shown.stdout and "up to date" in shown.stdout


@pytest.mark.slow
def test_an_extension_killed_after_its_first_new_seed_trains_no_seed_twice(write_spec,
                                                                             tmp_path):
    """The sweep asks for more seeds; the worker extending a trial is killed once the first
    new seed run finished: the command run again counts that run and runs only the seeds
    still missing."""
    import yaml

    from workbench.spec import sweep as spec

    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(tiny_spec(methods={"step_size": ["polyak"]}, trials=2, seeds=2,
                                storage=storage))
    assert run_cli("sweep", path, "--quiet", cwd=tmp_path).returncode == 0
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), "seeds": 4}))
    first = run_instrumented([DIE_AFTER_THE_FIRST_SEED], "sweep", path, "--quiet",
                             cwd=tmp_path)
    assert killed(first), first.stderr
    again = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stderr

    storage = spec.load(path).storage
    trials = assert_runs_agree_with_trials(storage, study_name(storage,
                                                               "tiny.step_size=polyak"))
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    done = finished_seed_runs(storage)
    assert len(done) == 2 * 4 and not done.duplicated(["trial", "seed"]).any()
    assert all(sorted(done.loc[done["trial"] == t.number, "seed"]) == [0, 1, 2, 3]
               for t in trials)
    assert len([r for r in mlflow_rows(storage) if r["kind"] == "seed"]) == 2 * 4
