"""SIGTERM or Ctrl-C during a sweep: the sink flushes, runs are marked, nothing is lost."""

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.conftest import run_cli, study_name, tiny_spec
from tests.held_trials import held_sweep
from tests.waiting import communicate, kill, scaled, tail, wait_until


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_flushes_metrics_and_marks_the_runs(signum, write_spec, tmp_path):
    db = tmp_path / "store.db"
    path = write_spec(tiny_spec(trials=1, seeds=1, methods={"step_size": ["constant"]},
                                budget={"steps": 1_000_000}, storage=f"sqlite:///{db}"))
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "sweep", str(path), "--quiet"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    mlflow_db = tmp_path / "store.mlflow.db"
    seen = {"rows": 0}

    def logged_2000_rows():
        if proc.poll() is not None:
            raise AssertionError(f"the sweep exited with code {proc.returncode} before "
                                 f"logging 2000 metric rows: {tail(proc.stderr.read())}")
        if mlflow_db.exists():
            try:
                with sqlite3.connect(mlflow_db, timeout=5) as conn:
                    seen["rows"] = conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
            except sqlite3.OperationalError:
                pass  # not created yet, or busy
        return seen["rows"] >= 2000

    try:
        wait_until(logged_2000_rows, "2000 metric rows from the sweep", 600, interval=0.5,
                   describe_state=lambda: f"{seen['rows']} metric rows; the sweep is running")
    except BaseException:
        kill(proc)  # a million steps: it would run on after the test
        proc.wait()
        raise
    proc.send_signal(signum)
    _, err = communicate(proc, f"the sweep to exit after {signal.Signals(signum).name}", 300)
    assert proc.returncode != 0 and "Traceback" not in err
    trial = optuna.load_study(study_name=study_name(f"sqlite:///{db}", "tiny.step_size=constant"),
                              storage=f"sqlite:///{db}").get_trials()[0]
    assert trial.state == TrialState.FAIL
    client = MlflowClient(f"sqlite:///{mlflow_db}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert {r.data.tags["workbench.kind"]: r.info.status for r in runs} == {
        "study": "RUNNING", "trial": "FAILED", "seed": "FAILED"}
    seed_run = next(r for r in runs if r.data.tags["workbench.kind"] == "seed")
    steps = [m.step for m in client.get_metric_history(seed_run.info.run_id, "train/loss")]
    assert steps == list(range(len(steps))) and len(steps) > 100
    for key in ("cost/samples", "method/step_size", "time/wall_seconds"):
        assert len(client.get_metric_history(seed_run.info.run_id, key)) == len(steps)


@pytest.mark.parametrize("module", ["workbench.cli.main", "workbench.spec.sweep", "torch"])
def test_ctrl_c_while_the_command_line_starts_prints_one_line_and_exits_130(module, tmp_path,
                                                                            write_spec):
    """Ctrl-C at any moment, even while the modules a command needs are being imported: one
    line, exit code 130, never a traceback. The interrupt is raised by an import hook the
    moment ``module`` starts to load (as a real Ctrl-C there would), so the test does not
    depend on timing."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(f'''
import os, signal, sys

class _InterruptAt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)  # Python raises KeyboardInterrupt here
        return None

sys.meta_path.insert(0, _InterruptAt())
''')
    path = write_spec(tiny_spec(trials=1, seeds=1, methods={"step_size": ["constant"]},
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    script = Path(sys.executable).with_name("workbench")  # the console script users run
    result = subprocess.run([str(script), "sweep", str(path), "--quiet"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=scaled(120),
                            env={**os.environ, "PYTHONPATH": str(hooks)})
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert result.stderr == "interrupted; run the same command again to continue\n"
    assert not (tmp_path / "store.db").exists()


def _counts(table: str) -> list[str]:
    """The done, pruned, failed and running columns of `workbench status`'s one study."""
    lines = table.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("study "))
    header, row = lines[head], lines[head + 2]  # cells start where their column's name does
    return [row[header.index(f" {name} ") + 1:].split()[0]
            for name in ("done", "pruned", "failed", "running")]


@pytest.mark.parametrize("workers", [1, 2], ids=["sequential", "two-workers"])
def test_ctrl_c_requeues_the_running_trials_instead_of_failing_them(workers, write_spec,
                                                                   tmp_path):
    """Ctrl-C (SIGINT to the sweep's process group, as a terminal sends it) while every worker
    runs a trial: one line, exit code 130, no trial counted failed; the same command then
    runs the interrupted trials again and ends with exactly the trials the spec asks for."""
    db = tmp_path / "store.db"
    path = write_spec(tiny_spec(trials=2, seeds=1, methods={"step_size": ["constant"]},
                                storage=f"sqlite:///{db}"))
    proc, _ = held_sweep(path, tmp_path, workers)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = communicate(proc, "the sweep to exit after Ctrl-C", 300)
    assert proc.returncode == 130, (proc.returncode, err)
    assert err == f"interrupted: {workers} trial(s) requeued; run the same command again to " \
                  "continue\n", err
    status = run_cli("status", str(path), cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert _counts(status.stdout) == ["0/2", "0", "0", "0"], status.stdout
    assert "failed trial" not in status.stdout

    again = run_cli("sweep", str(path), "--quiet", "--workers", str(workers), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    trials = optuna.load_study(study_name=study_name(f"sqlite:///{db}", "tiny.step_size=constant"),
                               storage=f"sqlite:///{db}").get_trials()
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2
    assert sum(t.state == TrialState.FAIL for t in trials) == workers  # the interrupted ones
    status = run_cli("status", str(path), cwd=tmp_path)
    assert _counts(status.stdout) == ["2/2", "0", "0", "0"], status.stdout
    from workbench.report.data import SweepRef, read_sweep
    from workbench.report.tables import _row

    data = read_sweep(SweepRef("tiny", f"sqlite:///{db}"))
    (method,) = data.methods
    row = _row(data, method, data.options)
    assert (row["trials"], row["failed"]) == ("2/2", 0)  # the report's counts


def test_an_interrupt_a_library_wrapped_is_no_failure_of_the_method(tmp_path):
    """A SIGTERM (``SystemExit``) inside a database call that a library turns into its own
    error still marks the trial interrupted, queued again on resume, not a failed method."""
    from workbench import registry
    from workbench.engine.sweep_run import run_sweep
    from workbench.families import StepSizeMethod
    from workbench.hyperparams import Float
    from workbench.registry import Reference
    from workbench.spec import sweep as spec_loader

    class WrappedInterrupt(StepSizeMethod):
        name = "test_wrapped_interrupt"
        hyperparameters = {"lr": Float(0.1, minimum=0.0)}
        reference = Reference("test fixture", 2026)
        fidelity = "reconstructed"

        def step_size_cap(self):
            return self.hp.lr

        def build(self, params, info):
            try:
                raise SystemExit(143)  # what the worker's SIGTERM handler raises
            except SystemExit as stop:
                raise RuntimeError("(psycopg2.OperationalError) the call was cut") from stop

    registry.available()
    registry.register(WrappedInterrupt)
    try:
        db = tmp_path / "store.db"
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(tiny_spec(
            trials=2, seeds=1, methods={"step_size": ["test_wrapped_interrupt"]},
            storage=f"sqlite:///{db}")))
        with pytest.raises(SystemExit):  # the interrupt itself ends the sweep
            run_sweep(spec_loader.load(path), workers=1, device="cpu")
    finally:
        registry._REGISTRY.pop(("step_size", "test_wrapped_interrupt"), None)
    (summary,) = optuna.get_all_study_summaries(f"sqlite:///{db}")
    trials = optuna.load_study(study_name=summary.study_name,
                               storage=f"sqlite:///{db}").get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL]
    assert "interrupted" in trials[0].user_attrs and "fail_reason" not in trials[0].user_attrs
