"""Hostile input (issue 13, items 8-12): unreachable stores, YAML bombs, lenient values, secrets.

Each case exits 2 with one ``error:`` line naming the file and key, writes nothing and prints
no traceback; passwords never reach output or another process's command line.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.conftest import files_under, run_cli, tiny_spec
from tests.test_ui_browser import _free_port, _kill_group
from tests.waiting import communicate, scaled, tail, wait_until
from workbench.cli import main as cli
from workbench.store.database import redact

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/none"


def assert_one_clear_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2, stderr one ``error:`` line holding every fragment, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, (result.returncode, tail(result.stderr))
    assert len(lines) == 1 and lines[0].startswith("error: "), tail(result.stderr)
    for fragment in fragments:
        assert fragment in lines[0], lines[0][:2000]


def in_process(argv: list[str], capsys) -> tuple[int, str]:
    """``workbench ARGV`` in this process: (exit code, stderr)."""
    capsys.readouterr()
    code = cli.main(argv)
    return code, capsys.readouterr().err


def with_fixed_lr(text: str) -> str:
    """A tiny spec's YAML whose ``constant`` method has ``fixed: {lr: TEXT}``."""
    spec = tiny_spec(methods={"step_size": [{"name": "constant", "fixed": {"lr": "LR"}}]})
    return yaml.safe_dump(spec, sort_keys=False).replace("lr: LR", f"lr: {text}")


def laughs(levels: int = 7, width: int = 10) -> str:
    """A flow sequence whose aliases expand to width**levels strings (a 'billion laughs')."""
    parts = ["&a0 [" + ", ".join(["lol"] * width) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


# --------------------------------------------------------- item 8: unreachable PostgreSQL


def test_report_on_an_unreachable_postgres_store_exits_2_and_writes_nothing(write_spec,
                                                                             tmp_path):
    path = write_spec(tiny_spec(storage=UNREACHABLE))
    before = files_under(tmp_path)
    result = run_cli("report", path, "--out", tmp_path / "out", cwd=tmp_path)
    assert_one_clear_error(result, "cannot reach the store", "127.0.0.1:1")
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("how", ["spec", "--storage"])
def test_ui_on_an_unreachable_postgres_store_exits_2_without_starting_mlflow(how, write_spec,
                                                                              tmp_path):
    path = write_spec(tiny_spec(storage=UNREACHABLE))
    target = [str(path)] if how == "spec" else ["--storage", UNREACHABLE]
    before = files_under(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "ui", *target, "--port",
                             str(_free_port())], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = communicate(proc, "the ui to refuse an unreachable store", 120)
    finally:
        _kill_group(proc)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_one_clear_error(result, "cannot reach the store")
    assert "MLflow UI on" not in out
    assert files_under(tmp_path) == before


# ------------------------------------------------------------ item 9: nesting and aliases


def test_deeply_nested_yaml_in_a_spec_exits_2(tmp_path):
    (tmp_path / "spec.yaml").write_text(with_fixed_lr("[" * 10_000 + "]" * 10_000))
    result = run_cli("status", "spec.yaml", cwd=tmp_path)
    assert_one_clear_error(result, "spec.yaml: methods.step_size[0].fixed.lr", "nested deeper")
    assert files_under(tmp_path) == {tmp_path / "spec.yaml"}


def test_deeply_nested_yaml_in_a_command_line_value_exits_2(tmp_path):
    value = "[" * 10_000 + "]" * 10_000
    result = run_cli("run", "logreg", "step_size=constant", f"step_size.lr={value}",
                     cwd=tmp_path)
    assert_one_clear_error(result, "nested deeper")
    assert list(tmp_path.iterdir()) == []


def test_an_alias_bomb_in_a_fixed_value_is_refused_before_it_expands(tmp_path):
    (tmp_path / "spec.yaml").write_text(with_fixed_lr(laughs()))
    result = run_cli("status", "spec.yaml", cwd=tmp_path, timeout=scaled(120))
    assert_one_clear_error(result, "spec.yaml", "aliases expand")
    assert len(result.stderr) < 1000
    assert files_under(tmp_path) == {tmp_path / "spec.yaml"}


def test_an_alias_bomb_in_a_command_line_value_is_refused(tmp_path):
    result = run_cli("run", "logreg", "step_size=constant", f"step_size.lr={laughs()}",
                     cwd=tmp_path, timeout=scaled(120))
    assert_one_clear_error(result, "aliases expand")
    assert len(result.stderr) < 1000


def test_an_alias_bomb_in_a_report_spec_is_refused(write_spec, tmp_path):
    write_spec(tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}"))
    (tmp_path / "report.yaml").write_text(f"name: r\nsweeps: [spec.yaml]\nreport: {laughs()}\n")
    before = files_under(tmp_path)
    result = run_cli("report", "report.yaml", cwd=tmp_path, timeout=scaled(120))
    assert_one_clear_error(result, "report.yaml", "aliases expand")
    assert files_under(tmp_path) == before


def test_a_long_bad_value_is_shortened_in_the_message(write_spec, tmp_path, monkeypatch,
                                                      capsys):
    write_spec(tiny_spec(methods={"step_size": [{"name": "constant",
                                                 "fixed": {"lr": list(range(20_000))}}]}))
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["status", "spec.yaml"], capsys)
    assert code == 2
    assert "spec.yaml: methods.step_size[0].fixed.lr: expected a number" in err, err[:500]
    assert "allowed: a" in err and len(err) < 1000, err[:2000]


def test_anchors_and_merge_keys_within_the_limits_still_work(tmp_path, monkeypatch, capsys):
    spec = tiny_spec(methods={"step_size": [
        {"name": "constant", "label": "a", "fixed": "BASE"},
        {"name": "constant", "label": "b", "fixed": "OVERRIDE"}]})
    text = yaml.safe_dump(spec, sort_keys=False)
    text = text.replace("fixed: BASE", "fixed: &base {lr: 0.1, momentum: 0.5}")
    text = text.replace("fixed: OVERRIDE", "fixed: {<<: *base, lr: 0.2}")
    (tmp_path / "spec.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["status", "spec.yaml"], capsys)
    assert code == 0, err


# ---------------------------------------------------------- item 10: leniency that hides


def test_a_duplicated_top_level_key_names_both_lines(write_spec, tmp_path, monkeypatch,
                                                     capsys):
    text = yaml.safe_dump(tiny_spec(), sort_keys=False) + "trials: 5\n"
    (tmp_path / "spec.yaml").write_text(text)
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.startswith("trials:"))
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["status", "spec.yaml"], capsys)
    assert code == 2
    assert f"spec.yaml: trials: duplicate key (lines {first} and {len(lines)})" in err, err
    assert files_under(tmp_path) == {tmp_path / "spec.yaml"}


def test_a_duplicated_nested_key_names_its_path_and_both_lines(tmp_path, monkeypatch, capsys):
    text = with_fixed_lr("0.1\n      lr: 0.2")
    lines = text.splitlines()
    first, second = (i for i, line in enumerate(lines, 1) if line.strip().startswith("lr:"))
    (tmp_path / "spec.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["status", "spec.yaml"], capsys)
    assert code == 2
    assert (f"spec.yaml: methods.step_size[0].fixed.lr: duplicate key (lines {first} and "
            f"{second})") in err, err


def test_a_duplicated_key_in_a_report_spec_is_refused(write_spec, tmp_path):
    write_spec(tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}"))
    (tmp_path / "report.yaml").write_text("name: r\nsweeps: [spec.yaml]\nname: s\n")
    before = files_under(tmp_path)
    result = run_cli("report", "report.yaml", cwd=tmp_path)
    assert_one_clear_error(result, "report.yaml: name: duplicate key (lines 1 and 3)")
    assert files_under(tmp_path) == before


BOOLEANS = {
    "trials": (tiny_spec(trials=True), "trials"),
    "seed count": (tiny_spec(seeds=True), "seeds"),
    "seed in a list": (tiny_spec(seeds=[0, True]), "seeds[1]"),
    "max_failed_trials": (tiny_spec(max_failed_trials=True), "max_failed_trials"),
    "budget steps": (tiny_spec(budget={"steps": True}), "budget.steps"),
    "sampler seed": (tiny_spec(sampler={"name": "random", "seed": True}), "sampler.seed"),
    "task parameter": (tiny_spec(task={"name": "logreg", "params": {"n_samples": True}}),
                       "task.params.n_samples"),
    "float field": (tiny_spec(objective={"diverge_past": True}), "objective.diverge_past"),
}


@pytest.mark.parametrize("case", sorted(BOOLEANS))
def test_a_boolean_is_not_a_number(case, write_spec, tmp_path, monkeypatch, capsys):
    spec, key = BOOLEANS[case]
    write_spec(spec)
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["status", "spec.yaml"], capsys)
    assert code == 2, err
    assert f"spec.yaml: {key}: a boolean (true); allowed: a" in err, err
    assert files_under(tmp_path) == {tmp_path / "spec.yaml"}


NON_FINITE = {
    "fixed lr": (tiny_spec(methods={"step_size": [{"name": "constant",
                                                   "fixed": {"lr": float("inf")}}]}),
                 "methods.step_size[0].fixed.lr"),
    "search range": (tiny_spec(methods={"step_size": [{
        "name": "constant", "search_space": {"lr": {"low": 0.1, "high": float("inf")}}}]}),
        "methods.step_size[0].search_space.lr.high"),
    "search choices": (tiny_spec(methods={"step_size": [{
        "name": "constant", "search_space": {"lr": {"choices": [0.1, float("inf")]}}}]}),
        "methods.step_size[0].search_space.lr"),
    "task parameter": (tiny_spec(task={"name": "logreg", "params": {"margin": float("inf")}}),
                       "task.params.margin"),
}


@pytest.mark.parametrize("case", sorted(NON_FINITE))
def test_an_infinite_value_is_refused_where_the_domain_is_finite(case, write_spec, tmp_path,
                                                                 monkeypatch, capsys):
    spec, key = NON_FINITE[case]
    write_spec(spec)
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["status", "spec.yaml"], capsys)
    assert code == 2, err
    assert f"spec.yaml: {key}:" in err and "allowed: a finite number" in err, err
    assert files_under(tmp_path) == {tmp_path / "spec.yaml"}


def test_infinity_stays_allowed_where_it_is_the_default(write_spec, tmp_path, monkeypatch,
                                                        capsys):
    write_spec(tiny_spec(methods={"step_size": [{"name": "polyak",
                                                 "fixed": {"gamma_max": float("inf")}}]}))
    monkeypatch.chdir(tmp_path)
    code, err = in_process(["status", "spec.yaml"], capsys)
    assert code == 0, err


# ------------------------------------------------------------------ item 11: the ui's argv


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, command line) of every process we can read."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError):  # ended meanwhile
            continue
        found[int(entry.name)] = (int(fields[1]), int(fields[2]),
                                  command.decode(errors="replace"))
    return found


def _tree(root: int) -> dict[int, str]:
    """pid -> command line of ``root``, its descendants and the members of its group."""
    processes = _processes()

    def below_root(pid: int) -> bool:
        while pid > 1 and pid in processes:
            if pid == root:
                return True
            pid = processes[pid][0]
        return False

    return {pid: command for pid, (_, group, command) in processes.items()
            if group == root or below_root(pid)}


@pytest.mark.slow
def test_the_ui_keeps_the_postgres_password_off_every_command_line(postgres, write_spec,
                                                                   tmp_path):
    password = "s3cret-ui-pw"
    path = write_spec(tiny_spec(trials=1, seeds=1, methods={"step_size": ["constant"]},
                                storage=postgres.new_password_database(password)))
    sweep = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert sweep.returncode == 0, tail(sweep.stderr)
    port = _free_port()
    out_file, err_file = tmp_path / "ui.out", tmp_path / "ui.err"
    with open(out_file, "w") as out, open(err_file, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "workbench", "ui", str(path), "--port",
                                 str(port)], cwd=tmp_path, stdout=out, stderr=err,
                                start_new_session=True)
    url = (f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get-by-name"
           "?experiment_name=tiny")

    def state() -> str:
        return (f"ui process {'running' if proc.poll() is None else proc.returncode}; "
                f"stderr: {tail(err_file.read_text())}")

    def served() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the ui ended before it answered: {state()}")
        try:
            with urllib.request.urlopen(url, timeout=scaled(10)) as response:
                return response.status == 200 and b'"tiny"' in response.read()
        except (urllib.error.URLError, OSError):
            return False

    try:
        wait_until(served, f"HTTP 200 for experiment tiny from {url}", 300, state, 0.5)
        commands = _tree(proc.pid)
        assert any("--backend-store-uri" in line for line in commands.values()), commands
        for pid, line in commands.items():
            assert password not in line, (pid, line)
    finally:
        _kill_group(proc)
    assert password not in out_file.read_text() + err_file.read_text()


# -------------------------------------------------------------------- item 12: redaction


@pytest.mark.parametrize("url, secrets, kept", [
    ("postgresql://u:s3cret@h/db", ["s3cret"], "postgresql://u:***@h/db"),
    ("postgresql://u:se/cret@h:5432/db", ["se/cret", "cret"], "@h:5432/db"),
    ("postgresql://u:se@cret@h/db", ["se@cret", "cret", "se@"], "@h/db"),
    ("postgresql://:s3cret@h/db", ["s3cret"], "@h/db"),
    ("postgresql://u@h/db?password=s3cret&sslmode=require", ["s3cret"], "sslmode=require"),
    ("postgresql://u@h/db?sslmode=require&PASSWORD=s3cret", ["s3cret"], "sslmode=require"),
    ("postgresql://u:s3%40cret@h/db", ["s3%40cret", "s3@cret", "cret"], "@h/db"),
    ("postgresql://u:my secret@h/db", ["my secret", "secret"], "@h/db"),
    ("store postgresql://u:s3cret@h/db: refused", ["s3cret"], "store postgresql://u:"),
    ("a 'postgresql://u:se/cret@h/db' b postgresql+psycopg2://:x@y@h2/d2 c",
     ["se/cret", "cret", ":x@"], "' b postgresql+psycopg2://"),
])
def test_redact_hides_every_form_of_password(url, secrets, kept):
    shown = redact(url)
    for secret in secrets:
        assert secret not in shown, shown
    assert kept in shown and "***" in shown, shown


@pytest.mark.parametrize("text", [
    "postgresql://u@h/db", "sqlite:////tmp/a b/x.db", "plain text: nothing here", "",
    "postgresql+psycopg2://postgres@127.0.0.1:5432/t_1?sslmode=require",
])
def test_redact_leaves_text_without_a_password_alone(text):
    assert redact(text) == text


@pytest.mark.parametrize("text", ["postgresql://[", "://:@", "x://a:b", "postgresql://u:p@h:x/d",
                                  "postgresql://u:p@[::1/d", "\0://\n:@", "a" * 10_000])
def test_redact_never_raises(text):
    assert isinstance(redact(text), str)


@pytest.mark.parametrize("url, secret", [
    ("postgresql://nobody:se/cret@127.0.0.1:1/none", "cret"),
    ("postgresql://:s3cret@127.0.0.1:1/none", "s3cret"),
    ("postgresql://nobody@127.0.0.1:1/none?password=s3cret", "s3cret"),
    ("postgresql://nobody:s3%40cret@127.0.0.1:1/none", "cret"),
])
def test_no_form_of_password_is_printed_by_the_cli(url, secret, write_spec, tmp_path,
                                                   monkeypatch, capsys):
    write_spec(tiny_spec(storage=url))
    monkeypatch.chdir(tmp_path)
    for command in (["status", "spec.yaml"], ["report", "spec.yaml", "--out", "out"]):
        code, err = in_process(command, capsys)
        assert code == 2, err
        assert secret not in err and "***" in err, err

