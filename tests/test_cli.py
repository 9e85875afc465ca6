"""The command line: run, methods, tasks, ui."""

import json
import socket
import subprocess
import sys
import time
import urllib.request

from tests.conftest import run_cli, tiny_spec


def test_run_twice_with_the_same_seed_gives_the_same_final_metrics(tmp_path):
    args = ("run", "logreg", "step_size=armijo", "step_size.c=0.2", "batch_size=16",
            "n_samples=128", "--seed", "5", "--steps", "60", "--json", "--device", "cpu")
    first, second = run_cli(*args, cwd=tmp_path), run_cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["train/loss"] == b["train/loss"] and a["cost/loss_evals"] == b["cost/loss_evals"]
    other = json.loads(run_cli(*args[:-5], "--seed", "6", "--steps", "60", "--json",
                               cwd=tmp_path).stdout)
    assert other["train/loss"] != a["train/loss"]
    assert list(tmp_path.iterdir()) == []  # `run` tracks nothing


def test_run_prints_readable_final_metrics(tmp_path):
    out = run_cli("run", "quadratic", "step_size=polyak", "step_size.f_star=exact",
                  "--steps", "50", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "train/suboptimality" in out.stdout and "Polyak(c=0.5" in out.stdout


def test_methods_and_tasks_tables(tmp_path):
    out = run_cli("methods", "--family", "step_size", cwd=tmp_path).stdout
    assert "armijo" in out and "reconstructed" in out and "Vaswani" in out and "lr=0.1 in" in out
    tasks = run_cli("tasks", cwd=tmp_path).stdout
    assert "logreg" in tasks and "quadratic" in tasks and "f_star" in tasks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ui_serves_the_store_on_localhost(write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=1, methods={"step_size": ["constant"]},
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    assert run_cli("sweep", path, "--quiet", cwd=tmp_path).returncode == 0
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "ui", str(path), "--port",
                             str(port)], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                            stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        assert f"http://127.0.0.1:{port}" in proc.stdout.readline()
        flat = proc.stdout.readline()
        assert "every run of tiny, best first" in flat and "orderByKey=metrics" in flat
        deadline, body = time.time() + 90, ""
        while time.time() < deadline:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get-by-name"
                    "?experiment_name=tiny")
                body = urllib.request.urlopen(request, timeout=5).read().decode()
                break
            except OSError:
                time.sleep(1)
        assert '"name": "tiny"' in body or '"name":"tiny"' in body
    finally:
        from tests.test_ui_browser import _kill_group

        _kill_group(proc)
