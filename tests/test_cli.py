"""The command line: run, methods, tasks, ui."""

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.conftest import run_cli, tiny_spec
from tests.waiting import scaled, tail, wait_until


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


def test_run_with_no_slot_named_runs_every_slot_with_the_task_default(tmp_path):
    """README: every RL slot has a default; `run cartpole` used to say "name at least one
    slot"."""
    out = run_cli("run", "cartpole", "--steps", "1", "num_envs=4", "rollout_len=16",
                  "--json", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["env_steps"] == 64


def test_run_applies_a_slots_settings_when_only_another_slot_is_named(tmp_path):
    """`run cartpole batch_size=constant step_size.lr=0.0123` used to drop step_size.lr
    silently (the unnamed slot fell back to its default with no settings): the settings of an
    unnamed slot go to the task's default method for it."""
    out = run_cli("run", "cartpole", "batch_size=constant", "step_size.lr=0.0123",
                  "num_envs=4", "rollout_len=16", "--steps", "1", "--device", "cpu",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "step_size=AdamSchedule(lr=0.0123," in out.stdout, out.stdout


def test_run_takes_a_budget_in_environment_steps_as_sweeps_do(tmp_path):
    """--samples alone: no step limit, the run stops at the first update that reaches it;
    with --steps, whichever comes first; a bad value is named as typed (exit 2)."""
    args = ("run", "cartpole", "num_envs=4", "rollout_len=16", "--json", "--device", "cpu")
    out = run_cli(*args, "--samples", "300", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["env_steps"] == 320  # 5 updates of 64
    capped = json.loads(run_cli(*args, "--samples", "300", "--steps", "2",
                                cwd=tmp_path).stdout)
    assert (capped["steps"], capped["env_steps"]) == (2, 128)
    bad = run_cli(*args, "--samples", "0", cwd=tmp_path)
    assert bad.returncode == 2 and "error: workbench run: --samples:" in bad.stderr, bad.stderr
    assert not list(tmp_path.iterdir())


def test_run_reports_every_mistake_in_the_words_typed(tmp_path):
    out = run_cli("run", "logreg", "step_size=constant", "step_size.lrr=1", "n_sampels=3",
                  "--steps", "0", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert lines[0] == "error: workbench run: 3 problems", out.stderr
    assert lines[1].startswith("  --steps: Input should be greater than or equal to 1")
    assert lines[2].startswith("  n_sampels: unknown key; did you mean 'n_samples'?")
    assert lines[3].startswith("  step_size.lrr: step_size/constant has no hyperparameter "
                               "'lrr'; did you mean 'lr'?")
    unknown = run_cli("run", "logreg", "step_size=polyk", cwd=tmp_path)
    assert unknown.returncode == 2
    message = unknown.stderr.strip()
    assert message.startswith("error: workbench run: step_size=polyk: unknown step_size "
                              "method 'polyk'; did you mean 'polyak'? allowed for task logreg:")
    allowed = message.split("allowed for task logreg: ")[1].split(", ")
    assert "polyak" in allowed and "fw_open_loop" not in allowed and "pg_polyak" not in allowed
    assert list(tmp_path.iterdir()) == []


def test_run_shows_the_values_used_and_explosive_growth_as_divergence(tmp_path):
    out = run_cli("run", "logreg", "step_size=constant", "batch_size=32", "--steps", "3",
                  cwd=tmp_path)
    assert "batch_size=ConstantBatch(size=0)" in out.stdout  # 0: the task's batch_size
    assert "used at the first step: batch/size=32" in out.stdout
    exploding = run_cli("run", "quadratic", "step_size=constant", "step_size.lr=50",
                        "--steps", "30", "--json", cwd=tmp_path)
    result = json.loads(exploding.stdout)
    assert result["diverged"] is True
    assert "grew past 1e+06 times its first value" in result["diverged_because"]


def test_version(tmp_path):
    import workbench

    out = run_cli("--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout == f"workbench {workbench.__version__}\n"


def test_methods_and_tasks_tables_fit_100_columns_and_show_one_whole(tmp_path):
    out = run_cli("methods", cwd=tmp_path).stdout
    assert "armijo" in out and "reconstructed †" in out and "Vaswani" in out
    tasks = run_cli("tasks", cwd=tmp_path).stdout
    assert "logreg" in tasks and "quadratic" in tasks and "rlvr-countdown" in tasks
    assert max(len(line) for line in (out + tasks).splitlines()) <= 100
    one = run_cli("methods", "step_size/constant", cwd=tmp_path).stdout
    assert "lr (float): default 0.1; tuned over [0.001, 10] log" in one
    assert "momentum (float): default 0.0; fixed unless a sweep gives it a range" in one
    assert "Robbins & Monro" in one and max(len(line) for line in one.splitlines()) <= 100
    task = run_cli("tasks", "quadratic", cwd=tmp_path).stdout
    assert "condition_number (float): default" in task and "train/suboptimality" in task
    rows = json.loads(run_cli("methods", "--family", "step_size", "--json",
                              cwd=tmp_path).stdout)
    assert {"name": "constant", "family": "step_size"}.items() <= rows[
        [r["name"] for r in rows].index("constant")].items()
    detail = json.loads(run_cli("tasks", "logreg", "--json", cwd=tmp_path).stdout)
    assert detail["parameters"]["n_samples"]["default"] == 512
    assert detail["defaults"] == {"batch_size": "constant"}
    unknown = run_cli("methods", "step_size/polyk", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown step_size method 'polyk'" in unknown.stderr


def _processes_mentioning(text: str) -> list[str]:
    """The command lines of this machine's processes that contain ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    line = handle.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in line:
                found.append(f"{entry}: {line[:200]}")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# what each server answers on, and what its answer must hold
SERVED = {
    "ui": ("/api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny",
           "trials, each with its seed runs one click away (landing)"),
    "dashboard": ("/api/studies", "tiny.step_size=constant"),
}


@pytest.mark.parametrize("command", sorted(SERVED))
def test_ui_and_dashboard_serve_the_store_on_localhost_and_stop_whole(command, write_spec,
                                                                        tmp_path):
    path = write_spec(tiny_spec(trials=1, methods={"step_size": ["constant"]},
                                description="a tiny sweep for the tests",
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    sweep = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    port = _free_port()
    out_file, err_file = tmp_path / "ui.out", tmp_path / "ui.err"
    with open(out_file, "w") as out, open(err_file, "w") as err:  # files: no pipe to fill
        proc = subprocess.Popen([sys.executable, "-m", "workbench", command, str(path),
                                 "--port", str(port)], cwd=tmp_path, stdout=out, stderr=err,
                                text=True, start_new_session=True)
    route, second_line = SERVED[command]
    url = f"http://127.0.0.1:{port}{route}"
    seen = {"answer": "no request made yet"}

    def state() -> str:
        exited = "running" if proc.poll() is None else f"exited with code {proc.returncode}"
        return (f"the {command} process is {exited}; last answer: {seen['answer']}; its "
                f"stdout: {tail(out_file.read_text())!r}; its stderr ended with:\n"
                f"{tail(err_file.read_text())}")

    def alive(what: str) -> None:
        if proc.poll() is not None:
            raise AssertionError(f"the {command} process ended before {what}: {state()}")

    def printed_two_lines():
        alive("it printed its addresses")
        lines = out_file.read_text().splitlines()
        return lines[:2] if len(lines) >= 2 else None

    def answer():
        alive("it answered")
        try:
            with urllib.request.urlopen(url, timeout=scaled(10)) as response:
                body = response.read().decode()
                seen["answer"] = f"HTTP {response.status}, body {body[:500]!r}"
                return body if response.status == 200 and body.strip() else None
        except urllib.error.HTTPError as err:  # e.g. 503 while the server starts
            seen["answer"] = f"HTTP {err.code}, body {err.read()[:500]!r}"
        except OSError as err:  # not listening yet
            seen["answer"] = repr(err)
        return None

    try:
        address, second = wait_until(printed_two_lines, f"the {command}'s first two lines",
                                     120, describe_state=state)
        assert f"http://127.0.0.1:{port}" in address
        assert second_line in second, second
        body = wait_until(answer, f"an HTTP 200 with a body from {url}", 300,
                          describe_state=state, interval=0.5)
        if command == "ui":
            assert "viewStateShareKey=workbench-trials" in second, second
            experiment = json.loads(body)["experiment"]
            assert experiment["name"] == "tiny", body
            tags = {t["key"]: t["value"] for t in experiment.get("tags", [])}
            assert tags.get("mlflow.note.content") == "a tiny sweep for the tests", tags
            landing = json.loads(tags["mlflow.sharedViewState.workbench-trials"])
            assert landing["searchFilter"] == "tags.`workbench.kind` = 'seed'", landing
        else:  # the sweep's one study, as Optuna's dashboard lists it, and its page's link
            names = [s["study_name"] for s in json.loads(body)["study_summaries"]]
            assert len(names) == 1 and second.split()[1] == f"({names[0]}):", (names, second)
            assert f"http://127.0.0.1:{port}/dashboard/studies/" in second, second
        # SIGTERM to the wrapper alone stops the server and its workers with it
        os.kill(proc.pid, signal.SIGTERM)
        wait_until(lambda: proc.poll() is not None, f"the {command} to exit after SIGTERM", 60)
        store = str(tmp_path / "store")
        wait_until(lambda: not _processes_mentioning(store), "no server process left", 60,
                   describe_state=lambda: str(_processes_mentioning(store)))
    finally:
        from tests.test_ui_browser import _kill_group

        _kill_group(proc)


def test_the_listings_come_from_a_catalogue_that_an_edit_refreshes(tmp_path, monkeypatch):
    """methods and tasks read a cached catalogue (no torch import); any change to a method or
    task file, or to the installed plugins, makes the next call import everything again."""
    import os

    from tests.conftest import ROOT
    from workbench.catalogue import cache as catalogue

    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    built = []
    real = catalogue._build
    monkeypatch.setattr(catalogue, "_build", lambda: built.append(1) or real())
    first = catalogue.load()
    assert built == [1] and {d["key"] for d in first["methods"]} >= {"step_size/constant"}
    assert catalogue.load() == first and built == [1]  # from the cache
    method = ROOT / "methods" / "step_size" / "constant.py"
    stat = method.stat()
    try:
        os.utime(method, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        assert catalogue.load() == first and built == [1, 1]
    finally:
        os.utime(method, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "workbench", "methods"],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "WORKBENCH_CACHE": str(tmp_path)})
    assert out.returncode == 0 and "constant" in out.stdout
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines()}
    assert "torch" not in imported and "transformers" not in imported
