"""SIGTERM or Ctrl-C during a sweep: the sink flushes, runs are marked, nothing is lost."""

import signal
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.conftest import tiny_spec


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_flushes_metrics_and_marks_the_runs(signum, write_spec, tmp_path):
    db = tmp_path / "store.db"
    path = write_spec(tiny_spec(trials=1, seeds=1, methods={"step_size": ["constant"]},
                                budget={"steps": 1_000_000}, storage=f"sqlite:///{db}"))
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "sweep", str(path), "--quiet"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    mlflow_db = tmp_path / "store.mlflow.db"
    deadline = time.time() + 120
    rows = 0
    while time.time() < deadline and rows < 2000:
        time.sleep(0.5)
        if mlflow_db.exists():
            try:
                with sqlite3.connect(mlflow_db, timeout=5) as conn:
                    rows = conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
            except sqlite3.OperationalError:
                rows = 0
    assert rows >= 2000, proc.stderr.read() if proc.poll() is not None else "no metrics"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode != 0 and "Traceback" not in err
    trial = optuna.load_study(study_name="tiny.step_size=constant",
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
