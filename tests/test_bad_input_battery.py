"""The bad-input battery (Order 22): hundreds of named bad inputs, each refused the same way.

Every case is refused with exit code 2 and exactly one line on stderr, starting ``error:``
(no traceback); a store that existed before is byte for byte the same after, and no file
appears in (or leaves) the working folder. The Python API's bad arguments raise ValueError or
LookupError naming what is allowed. Cases cover every command's flags, every key of a sweep
spec (wrong types, values out of range, the limits of MLflow's and Optuna's tables, names
in unicode, huge values, empty and non-mapping files, duplicate keys), spoiled store files
(zero bytes, a text file, another program's database, a folder, truncated, locked by another
process, read-only), the web servers' flags and the notebook API.

Commands run in-process (``workbench.cli.main.main``); the engine, the servers, the credit
study and the reproductions are replaced by a stub that fails the case if reached, so an input
accepted by mistake costs nothing. The cases of tests/test_bad_input_fuzz.py,
test_hostile_input.py, test_spec_errors.py, test_api_bad_input.py and test_store_creation.py
are not repeated here (README, "Bad input", counts them all).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, tiny_spec
from tests.test_bad_input_fuzz import call
from workbench import load_metrics, load_runs
from workbench.spec import schema

# ------------------------------------------------------------------------------ the case


class WouldRun(Exception):
    """Raised in place of the engine, a server, a credit study or a reproduction: the input
    was accepted."""


def _would_run(*args, **kwargs):
    raise WouldRun


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch):
    from workbench.cli import servers
    from workbench.credit import entry as credit_entry
    from workbench.engine import sweep_run, workers
    from workbench.reproduce import entry as reproduce_entry

    monkeypatch.setattr(sweep_run, "run_sweep", _would_run)
    monkeypatch.setattr(workers, "terminate_gracefully", lambda: None)
    monkeypatch.setattr(servers, "_serve", _would_run)
    monkeypatch.setattr(credit_entry, "run", _would_run)
    monkeypatch.setattr(reproduce_entry, "run", _would_run)


# a valid sweep that `status` reads without running anything; the good store is its store
VALID = tiny_spec(methods={"step_size": ["constant"]}, seeds=1, trials=1, budget={"steps": 2})
STORE = "workbench.db"  # the default store in the working folder
MLFLOW = "workbench.mlflow.db"


@dataclass(frozen=True)
class Case:
    """``workbench ARGV`` in a fresh folder holding ``spec.yaml`` (``spec``: a mapping written
    as YAML, text or bytes written as they are; VALID by default) and ``files`` (name -> text,
    bytes, or DIR for a folder); ``store``: the good store copied in first, then spoiled by
    STORE_SPOILERS[store]. The error line must hold each of ``words``."""

    argv: list[str]
    spec: Any = None
    words: tuple[str, ...] = ()
    files: dict[str, Any] = field(default_factory=dict)
    store: str | None = None


DIR = object()


@dataclass(frozen=True)
class Link:
    """A symbolic link to ``target`` (relative to its folder)."""

    target: str


def photograph(folder: Path) -> dict[str, str]:
    """Every entry under ``folder``: its path -> the SHA-256 of its bytes ('dir' for a
    folder, the target for a link)."""
    shot = {}
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            shot[name] = f"link {os.readlink(path)}"
        elif path.is_dir():
            shot[name] = "dir"
        else:
            shot[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return shot


def write(path: Path, content: Any) -> None:
    if content is DIR:
        path.mkdir(parents=True, exist_ok=True)
    elif isinstance(content, Link):
        path.symlink_to(content.target)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(yaml.safe_dump(content, sort_keys=False, allow_unicode=True))


def assert_one_error_line(code, err: str, words=()) -> str:
    """Exit 2, stderr exactly one line starting ``error:``, no traceback; the line."""
    lines = err.splitlines()
    assert code == 2, (code, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-3000:]
    for word in words:
        assert word in lines[0], (word, lines[0][:2000])
    return lines[0]


def refused(case: Case, folder: Path, capsys, good_store: Path | None = None) -> str:
    """Run ``case`` in ``folder``: refused as the module says; its error line."""
    write(folder / "spec.yaml", VALID if case.spec is None else case.spec)
    for name, content in case.files.items():
        write(folder / name, content)
    if case.store is not None:
        for name in (STORE, MLFLOW):
            shutil.copyfile(good_store / name, folder / name)
        STORE_SPOILERS[case.store](folder)
    before = photograph(folder)
    with contextlib.chdir(folder):
        try:
            code, _, err = call(case.argv, capsys)
        except WouldRun:
            pytest.fail(f"accepted: workbench {' '.join(case.argv)} went on to run")
    line = assert_one_error_line(code, err, case.words)
    assert photograph(folder) == before, "the refused command changed the folder"
    return line


def cases(table: dict[str, Case]) -> list:
    return [pytest.param(case, id=name) for name, case in table.items()]


# ------------------------------------------------------------------ 1. command-line flags

SPEC_ARG = ["spec.yaml"]
CREDIT = yaml.safe_load((ROOT / "reports" / "credit-keydoor.yaml").read_text())


def credit(**overrides) -> dict:
    """The shipped key-door credit spec with ``overrides``."""
    return {**CREDIT, **overrides}


RUN = ["run", "logreg", "step_size=constant"]
FLAGS = {
    # workbench itself
    "no command": Case([], words=("required: command",)),
    "unknown global option": Case(["--colour", "methods"],
                                  words=("unrecognized arguments: --colour",)),
    # sweep
    "sweep: no spec": Case(["sweep"], words=("spec",)),
    "sweep: negative workers": Case(["sweep", *SPEC_ARG, "--workers", "-1"],
                                    words=("--workers", "allowed: 1 to")),
    "sweep: fractional workers": Case(["sweep", *SPEC_ARG, "--workers", "1.5"],
                                      words=("--workers", "invalid int value")),
    "sweep: empty workers": Case(["sweep", *SPEC_ARG, "--workers", ""], words=("--workers",)),
    "sweep: relative artifact root": Case(["sweep", *SPEC_ARG, "--artifact-root", "art"],
                                          words=("--artifact-root", "relative path")),
    "sweep: empty artifact root": Case(["sweep", *SPEC_ARG, "--artifact-root", ""],
                                       words=("--artifact-root", "empty")),
    "sweep: ftp artifact root": Case(["sweep", *SPEC_ARG, "--artifact-root", "ftp://h/x"],
                                     words=("--artifact-root", "allowed:")),
    "sweep: artifact root past MLflow's limit": Case(
        ["sweep", *SPEC_ARG, "--artifact-root", "/" + "a" * 3000],
        words=("--artifact-root", "2,048")),
    "sweep: empty storage": Case(["sweep", *SPEC_ARG, "--storage", ""],
                                 words=("--storage", "allowed: sqlite:///")),
    "sweep: sqlite with two slashes": Case(["sweep", *SPEC_ARG, "--storage", "sqlite://x.db"],
                                           words=("--storage", "allowed: sqlite:///FILE")),
    "sweep: empty device": Case(["sweep", *SPEC_ARG, "--device", ""],
                                words=("--device", "empty")),
    "sweep: negative cuda index": Case(["sweep", *SPEC_ARG, "--device", "cuda:-1"],
                                       words=("device",)),
    "sweep: upper-case device": Case(["sweep", *SPEC_ARG, "--device", "CPU"],
                                     words=("device",)),
    "sweep: a value for a flag": Case(["sweep", *SPEC_ARG, "--quiet=yes"],
                                      words=("--quiet",)),
    "sweep: two specs": Case(["sweep", *SPEC_ARG, "other.yaml"],
                             words=("unrecognized arguments",)),
    "sweep: option without its value": Case(["sweep", *SPEC_ARG, "--storage"],
                                            words=("--storage", "expected one argument")),
    "sweep: spec is a folder": Case(["sweep", "."], words=("a folder; allowed: a YAML file",)),
    "sweep: spec path with NUL": Case(["sweep", "spec\x00.yaml"], words=("no such file",)),
    "sweep: spec path too long": Case(["sweep", "s" * 5000 + ".yaml"],
                                      words=("cannot be read: File name too long",)),
    "sweep: spec is a symlink loop": Case(["sweep", "loop.yaml"],
                                          files={"loop.yaml": Link("loop.yaml")},
                                          words=("loop.yaml",)),
    # run
    "run: no task": Case(["run"], words=("task",)),
    "run: zero steps": Case([*RUN, "--steps", "0"], words=("--steps",)),
    "run: negative steps": Case([*RUN, "--steps", "-3"], words=("--steps",)),
    "run: zero samples": Case([*RUN, "--samples", "0"], words=("--samples",)),
    "run: NaN seconds": Case([*RUN, "--wall-seconds", "nan"], words=("--wall-seconds",)),
    "run: negative seconds": Case([*RUN, "--wall-seconds", "-1"],
                                  words=("--wall-seconds",)),
    "run: infinite seconds": Case([*RUN, "--wall-seconds", "inf"],
                                  words=("--wall-seconds",)),
    "run: negative seed": Case([*RUN, "--seed", "-1"], words=("--seed",)),
    "run: seed is a word": Case([*RUN, "--seed", "x"], words=("--seed",)),
    "run: unknown slot": Case([*RUN, "nosuch=constant"], words=("nosuch", "unknown key")),
    "run: two methods for a slot": Case([*RUN, "step_size=polyak"],
                                        words=("two methods for one slot",)),
    "run: unknown hyperparameter": Case([*RUN, "step_size.rate=1"],
                                        words=("step_size.rate", "allowed: lr")),
    "run: assignment without a name": Case([*RUN, "=1"], words=("allowed:",)),
    "run: hyperparameter without a name": Case([*RUN, "step_size.=1"],
                                               words=("run: step_size.: ", "allowed: lr")),
    "run: task parameter a word": Case([*RUN, "dim=abc"], words=("dim",)),
    "run: task parameter zero": Case([*RUN, "dim=0"], words=("dim",)),
    "run: task parameter empty": Case([*RUN, "dim="], words=("dim",)),
    "run: slot the task lacks": Case([*RUN, "entropy=constant"], words=("entropy",)),
    "run: a list for a number": Case([*RUN, "step_size.lr=[1, 2]"], words=("step_size.lr",)),
    "run: not an assignment": Case([*RUN, "lr"], words=("lr",)),
    "run: unknown task, unicode": Case(["run", "logreg\u202e"], words=("unknown task",)),
    # status
    "status: no spec": Case(["status"], words=("spec",)),
    "status: empty storage": Case(["status", *SPEC_ARG, "--storage", ""],
                                  words=("--storage",)),
    "status: storage is a folder": Case(["status", *SPEC_ARG, "--storage", "sqlite:///sub"],
                                        files={"sub": DIR}, words=("is a directory",)),
    "status: storage name too long": Case(
        ["status", *SPEC_ARG, "--storage", "sqlite:///" + "s" * 5000 + ".db"],
        words=("cannot hold a store: File name too long",)),
    "status: storage path with NUL": Case(["status", *SPEC_ARG, "--storage", "sqlite:///a\x00b"],
                                          words=("--storage",)),
    "status: missing spec": Case(["status", "missing.yaml"], words=("missing.yaml",)),
    "status: extra argument": Case(["status", *SPEC_ARG, "extra"],
                                   words=("unrecognized arguments",)),
    # report
    "report: neither spec nor sweep": Case(["report"], words=("name either a spec",)),
    "report: both spec and sweep": Case(["report", *SPEC_ARG, "--sweep", "tiny"],
                                        words=("name either a spec",)),
    "report: sweep name with a slash": Case(["report", "--sweep", "a/b"],
                                            words=("--sweep", "allowed: a letter")),
    "report: empty sweep name": Case(["report", "--sweep", ""], words=("--sweep",)),
    "report: sweep name with an RTL mark": Case(["report", "--sweep", "tiny\u200f"],
                                                words=("--sweep",)),
    "report: sweep name with NUL": Case(["report", "--sweep", "ti\x00ny"],
                                        words=("--sweep",)),
    "report: unsupported storage": Case(["report", "--sweep", "tiny", "--storage", "mysql://x"],
                                        words=("unsupported storage",)),
    "report: empty storage": Case(["report", "--sweep", "tiny", "--storage", ""],
                                  words=("--storage",)),
    "report: out is a file": Case(["report", *SPEC_ARG, "--out", "spec.yaml"],
                                  words=("--out",)),
    "report: empty out": Case(["report", *SPEC_ARG, "--out", ""], words=("--out", "empty")),
    "report: out is the working folder": Case(["report", *SPEC_ARG, "--out", "."],
                                              words=("--out", "not a report")),
    "report: no store": Case(["report", *SPEC_ARG, "--out", "out"], words=("no store",)),
    "report: out under a file": Case(["report", *SPEC_ARG, "--out", "spec.yaml/x"],
                                     words=("--out spec.yaml/x", "is not a folder")),
    "report: report spec's sweeps a string": Case(
        ["report", "report.yaml"], files={"report.yaml": {"name": "r", "sweeps": "spec.yaml"}},
        words=("report.yaml: sweeps",)),
    "report: report spec without a name": Case(
        ["report", "report.yaml"], files={"report.yaml": {"sweeps": ["spec.yaml"]}},
        words=("report.yaml: name",)),
    "report: report spec's name with a slash": Case(
        ["report", "report.yaml"], files={"report.yaml": {"name": "a/b", "sweeps": ["spec.yaml"]}},
        words=("report.yaml: name",)),
    "report: report spec's sweep missing": Case(
        ["report", "report.yaml"], files={"report.yaml": {"name": "r", "sweeps": ["no.yaml"]}},
        words=("report.yaml: sweeps[0]", "no sweep spec")),
    # credit
    "credit: no spec": Case(["credit"], words=("spec",)),
    "credit: missing spec": Case(["credit", "missing.yaml"], words=("missing.yaml",)),
    "credit: unknown key": Case(["credit", "c.yaml"], files={"c.yaml": credit(nme="c")},
                                words=("c.yaml: nme: unknown key",)),
    "credit: group size zero": Case(["credit", "c.yaml"],
                                    files={"c.yaml": credit(group_sizes=[0])},
                                    words=("c.yaml: group_sizes",)),
    "credit: unknown estimator": Case(["credit", "c.yaml"],
                                      files={"c.yaml": credit(estimators=["nope"])},
                                      words=("c.yaml: estimators[0]",)),
    "credit: device tpu": Case(["credit", "c.yaml", "--device", "tpu"],
                               files={"c.yaml": credit()}, words=("--device", "tpu")),
    "credit: empty device": Case(["credit", "c.yaml", "--device", ""],
                                 files={"c.yaml": credit()}, words=("--device", "empty")),
    "credit: out is a file": Case(["credit", "c.yaml", "--out", "spec.yaml"],
                                  files={"c.yaml": credit()}, words=("--out",)),
    "credit: empty out": Case(["credit", "c.yaml", "--out", ""],
                              files={"c.yaml": credit()}, words=("--out", "empty")),
    "credit: out under a file": Case(["credit", "c.yaml", "--out", "spec.yaml/x"],
                                     files={"c.yaml": credit()}, words=("--out", "spec.yaml")),
    "credit: not a mapping": Case(["credit", "c.yaml"], files={"c.yaml": "- a\n"},
                                  words=("c.yaml", "mapping")),
    # reproduce
    "reproduce: unknown name": Case(["reproduce", "nope"], words=("no such reproduction",)),
    "reproduce: a path for a name": Case(["reproduce", "../etc"],
                                         words=("no such reproduction",)),
    "reproduce: out is a file": Case(["reproduce", "ars-lqr", "--out", "spec.yaml"],
                                     words=("--out",)),
    "reproduce: out is blank": Case(["reproduce", "ars-lqr", "--out", " "], words=("--out",)),
    "reproduce: out under a file": Case(["reproduce", "ars-lqr", "--out", "spec.yaml/x"],
                                        words=("--out", "is not a folder")),
    "reproduce: list an unknown one": Case(["reproduce", "--list", "nope"],
                                           words=("no such reproduction",)),
    "reproduce: status of an unknown one": Case(["reproduce", "--status", "nope"],
                                                words=("no such reproduction",)),
    # methods, check, new-method, tasks
    "methods: unknown family": Case(["methods", "nope/x"], words=("unknown family",)),
    "methods: unknown method": Case(["methods", "step_size/nope"],
                                    words=("unknown step_size method",)),
    "methods: three parts": Case(["methods", "step_size/constant/x"], words=("step_size",)),
    "methods: bad --family": Case(["methods", "--family", "bogus"], words=("--family",)),
    "methods: a bare slash": Case(["methods", "/"], words=("unknown family",)),
    "methods: --family against the method": Case(
        ["methods", "step_size/constant", "--family", "entropy"], words=("no entropy method",)),
    "check: no slash": Case(["check", "constant"], words=("FAMILY/NAME",)),
    "check: unknown method": Case(["check", "step_size/nope"], words=("nope",)),
    "check: unknown family": Case(["check", "bogus/x"], words=("bogus",)),
    "check: empty name": Case(["check", "step_size/"], words=("step_size",)),
    "new-method: unknown family": Case(["new-method", "bogus", "x_y"], words=("family",)),
    "new-method: capitals and dash": Case(["new-method", "step_size", "Bad-Name"],
                                          words=("allowed: lower-case",)),
    "new-method: empty name": Case(["new-method", "step_size", ""],
                                   words=("allowed: lower-case",)),
    "new-method: a path for a name": Case(["new-method", "step_size", "a/b"],
                                          words=("allowed: lower-case",)),
    "new-method: accented name": Case(["new-method", "step_size", "na\u00efve"],
                                      words=("allowed: lower-case",)),
    "new-method: name too long": Case(["new-method", "step_size", "x" * 42],
                                      words=("2-41 characters",)),
    "new-method: root is a file": Case(["new-method", "step_size", "my_rule", "--root",
                                        "spec.yaml"], words=("--root", "not a folder")),
    "new-method: root not a checkout": Case(["new-method", "step_size", "my_rule"],
                                            words=("is not a folder",)),
    "new-method: plugin folder is a file": Case(
        ["new-method", "step_size", "my_rule", "--plugin", "spec.yaml"], words=("--plugin",)),
    "new-method: plugin folder under a file": Case(
        ["new-method", "step_size", "my_rule", "--plugin", "spec.yaml/x"],
        words=("cannot write",)),
    "new-method: plugin folder not empty": Case(
        ["new-method", "step_size", "my_rule", "--plugin", "plug"],
        files={"plug": DIR, "plug/x.txt": "x"}, words=("not empty",)),
    "tasks: unknown task": Case(["tasks", "mnist"], words=("unknown task",)),
    "tasks: a path for a task": Case(["tasks", "logreg/x"], words=("unknown task",)),
    "tasks: json of an unknown task": Case(["tasks", "--json", "nope"], words=("unknown task",)),
}


@pytest.mark.parametrize("case", cases(FLAGS))
def test_a_bad_flag_is_refused_in_one_line(case, tmp_path, capsys):
    refused(case, tmp_path, capsys)


# ------------------------------------------------------------------- 2. the web servers

# (tests/test_server_guard.py tries ports 99999 and -1 of dashboard, 0 and http of ui, and
# dashboard --host 0.0.0.0 without --expose)
SERVERS = {
    "ui: port 65536": Case(["ui", "--port", "65536"], words=("--port", "1-65535")),
    "dashboard: port in exponent form": Case(["dashboard", "--port", "8e3"],
                                             words=("--port", "1-65535")),
    "ui: port with a sign": Case(["ui", "--port", "+80"], words=("--port", "1-65535")),
    "dashboard: port with spaces": Case(["dashboard", "--port", " 80 "],
                                        words=("--port", "1-65535")),
    "ui: the IPv6 wildcard without --expose": Case(["ui", "--host", "::"],
                                                   words=("--expose",)),
}
for _server in ("ui", "dashboard"):
    SERVERS.update({
        f"{_server}: a name for a host without --expose": Case(
            [_server, "--host", "example.com"], words=("--expose",)),
        f"{_server}: unsupported storage": Case([_server, "--storage", "mysql://x"],
                                                words=("unsupported storage",)),
        f"{_server}: no store yet": Case([_server, "--storage", "sqlite:///none.db"],
                                         words=("no store at",)),
        f"{_server}: spec without a store": Case([_server, *SPEC_ARG], words=("no store at",)),
        f"{_server}: missing spec": Case([_server, "missing.yaml"], words=("missing.yaml",)),
        f"{_server}: bad spec": Case([_server, *SPEC_ARG], spec=tiny_spec(trials=0),
                                     words=("spec.yaml: trials",)),
        f"{_server}: empty host": Case([_server, "--host", ""], words=("--host", "empty")),
        f"{_server}: empty allowed host": Case([_server, "--allowed-host", ""],
                                               words=("--allowed-host", "empty")),
        f"{_server}: empty storage": Case([_server, "--storage", ""],
                                          words=("--storage", "empty")),
    })


@pytest.mark.parametrize("case", cases(SERVERS))
def test_a_bad_server_flag_is_refused_before_serving(case, tmp_path, capsys):
    refused(case, tmp_path, capsys)


# --------------------------------------------------------------------- 3. spec fields

def spec_with(**overrides) -> dict:
    return {**VALID, **overrides}


def method(**entry) -> dict:
    return spec_with(methods={"step_size": [{"name": "constant", **entry}]})


def search(space) -> dict:
    return method(search_space={"lr": space})


def control(**overrides) -> dict:
    """A cartpole sweep naming three slots, with ``overrides``."""
    return spec_with(task={"name": "cartpole"}, **overrides)


LONG_LABEL = "L" * 60
SPEC_FIELDS = {
    # name (an experiment's name: [A-Za-z0-9_.-], up to 100)
    "name with a slash": (spec_with(name="a/b"), "name"),
    "name with NUL": (spec_with(name="a\x00b"), "name"),
    "name with an RTL override": (spec_with(name="\u202eevil"), "name"),
    "name with an emoji": (spec_with(name="run\U0001F680"), "name"),
    "name empty": (spec_with(name=""), "name"),
    "name of 101 characters": (spec_with(name="n" * 101), "name"),
    "name starting with a dot": (spec_with(name=".hidden"), "name"),
    "name a number": (spec_with(name=123), "name"),
    "name a list": (spec_with(name=["a"]), "name"),
    # description (an experiment tag)
    "description past MLflow's experiment tag": (spec_with(description="d" * 20_001),
                                                 "description"),
    "description with NUL": (spec_with(description="a\x00b"), "description"),
    "description a number": (spec_with(description=5), "description"),
    "description a mapping": (spec_with(description={"a": 1}), "description"),
    # task
    "task a string": (spec_with(task="logreg"), "task"),
    "task name a number": (spec_with(task={"name": 5}), "task.name"),
    "task name with an emoji": (spec_with(task={"name": "logreg\U0001F600"}), "task.name"),
    "task params a list": (spec_with(task={"name": "logreg", "params": [1]}), "task.params"),
    "task parameter a word": (spec_with(task={"name": "logreg", "params": {"dim": "five"}}),
                              "task.params.dim"),
    "task parameter negative": (spec_with(task={"name": "logreg", "params": {"dim": -1}}),
                                "task.params.dim"),
    "task parameter fractional": (spec_with(task={"name": "logreg", "params": {"dim": 1.5}}),
                                  "task.params.dim"),
    "task parameter huge": (spec_with(task={"name": "logreg",
                                            "params": {"n_samples": 10**30}}),
                            "task.params.n_samples"),
    "task parameter text past a param value": (
        spec_with(task={"name": "rlvr-arith", "params": {"stop": ["s" * 7000]}},
                  methods={"advantage": ["grpo"]}), "task.params.stop"),
    "task parameter text with NUL": (
        spec_with(task={"name": "rlvr-arith", "params": {"model": "a\x00b"}},
                  methods={"advantage": ["grpo"]}), "task.params.model"),
    "environment id with NUL": (
        spec_with(task={"name": "control", "params": {"env": "CartPole-v1\x00"}},
                  methods={"advantage": ["gae"]}), "task.params.env"),
    "varied values a word among numbers": (
        spec_with(task={"name": "logreg", "vary": {"dim": [2, "x"]}}), "task.vary.dim[1]"),
    "vary a list": (spec_with(task={"name": "logreg", "vary": ["dim"]}), "task.vary"),
    "varied values nested lists": (spec_with(task={"name": "logreg", "vary": {"dim": [[2]]}}),
                                   "task.vary.dim[0]"),
    # methods
    "methods a list": (spec_with(methods=["constant"]), "methods"),
    "slot a method name, not a list": (spec_with(methods={"step_size": "constant"}),
                                       "methods.step_size"),
    "slot with no methods": (spec_with(methods={"step_size": []}), "methods"),
    "method a number": (spec_with(methods={"step_size": [5]}), "methods.step_size[0]"),
    "method entry without a name": (spec_with(methods={"step_size": [{"fixed": {}}]}),
                                    "methods.step_size[0].name"),
    "label with a slash": (method(label="a/b"), "methods.step_size[0].label"),
    "label with an emoji": (method(label="fast\U0001F525"), "methods.step_size[0].label"),
    "label with an RTL mark": (method(label="a\u200fb"), "methods.step_size[0].label"),
    "label with NUL": (method(label="a\x00b"), "methods.step_size[0].label"),
    "label of 61 characters": (method(label="l" * 61), "methods.step_size[0].label"),
    "label empty": (method(label=""), "methods.step_size[0].label"),
    "label used twice": (spec_with(methods={"step_size": [
        {"name": "constant", "label": "a"}, {"name": "polyak", "label": "a"}]}),
        "methods.step_size[1].label"),
    "study label past MLflow's run name": (
        control(methods={slot: [{"name": name, "label": LONG_LABEL}] for slot, name in
                         [("step_size", "adam"), ("entropy", "constant"),
                          ("advantage", "gae")]}), "methods"),
    "study label with varied values past MLflow's run name": (
        spec_with(methods={"step_size": [{"name": "constant", "label": LONG_LABEL}],
                           "batch_size": [{"name": "constant", "label": LONG_LABEL}]},
                  task={"name": "logreg", "vary": {"dim": [2, 3], "n_samples": [64, 65]}}),
        "task.vary"),
    "fixed a list": (method(fixed=[1]), "methods.step_size[0].fixed"),
    "fixed value a word": (method(fixed={"lr": "fast"}), "methods.step_size[0].fixed.lr"),
    "fixed value negative": (method(fixed={"lr": -1}), "methods.step_size[0].fixed.lr"),
    "fixed value null": (method(fixed={"lr": None}), "methods.step_size[0].fixed.lr"),
    "fixed choice unknown": (spec_with(methods={"step_size": [
        {"name": "polyak", "fixed": {"f_star": "guess"}}]}),
        "methods.step_size[0].fixed.f_star"),
    "search range low a word": (search({"low": "a"}),
                                "methods.step_size[0].search_space.lr.low"),
    "search choices empty": (search({"choices": []}), "methods.step_size[0].search_space.lr"),
    "search range and choices": (search({"low": 0.1, "choices": [1]}),
                                 "methods.step_size[0].search_space.lr"),
    "search space a word": (search("free"), "methods.step_size[0].search_space.lr"),
    "search log a word": (search({"log": "sometimes"}),
                          "methods.step_size[0].search_space.lr.log"),
    "search log range from a negative": (search({"low": -1.0, "high": 1.0, "log": True}),
                                         "methods.step_size[0].search_space.lr"),
    "search choice a word for a number": (search({"choices": [0.1, "x"]}),
                                          "methods.step_size[0].search_space.lr"),
    "search space of an unknown hyperparameter": (
        method(search_space={"rate": {"low": 0.1, "high": 1.0}}),
        "methods.step_size[0].search_space.rate"),
    # seeds, trials
    "seed count zero": (spec_with(seeds=0), "seeds"),
    "seed count past 10000": (spec_with(seeds=10_001), "seeds"),
    "seed list empty": (spec_with(seeds=[]), "seeds"),
    "seed negative": (spec_with(seeds=[-1]), "seeds"),
    "seed past 2**31 - 1": (spec_with(seeds=[2**31]), "seeds"),
    "seed count a word": (spec_with(seeds="three"), "seeds"),
    "seed count fractional": (spec_with(seeds=2.5), "seeds"),
    "seed fractional in a list": (spec_with(seeds=[1.5]), "seeds[0]"),
    "trials zero": (spec_with(trials=0), "trials"),
    "trials past a million": (spec_with(trials=10**7), "trials"),
    "trials fractional": (spec_with(trials=2.5), "trials"),
    "trials null": (spec_with(trials=None), "trials"),
    "max_failed_trials zero": (spec_with(max_failed_trials=0), "max_failed_trials"),
    "retry_crashed a word": (spec_with(retry_crashed="maybe"), "retry_crashed"),
    # sampler, pruner
    "sampler a number": (spec_with(sampler=5), "sampler"),
    "sampler startup negative": (spec_with(sampler={"startup_trials": -1}),
                                 "sampler.startup_trials"),
    "grid of one point": (spec_with(sampler={"name": "grid", "grid_points": 1}),
                          "sampler.grid_points"),
    "grid past 1000 points": (spec_with(sampler={"name": "grid", "grid_points": 1001}),
                              "sampler.grid_points"),
    "sampler seed a word": (spec_with(sampler={"name": "tpe", "seed": "x"}), "sampler.seed"),
    "pruner threshold zero": (spec_with(pruner={"name": "wilcoxon", "p_threshold": 0}),
                              "pruner.p_threshold"),
    "pruner threshold one": (spec_with(pruner={"name": "wilcoxon", "p_threshold": 1.0}),
                             "pruner.p_threshold"),
    "hyperband reduction one": (spec_with(pruner={"name": "hyperband", "reduction_factor": 1}),
                                "pruner.reduction_factor"),
    "pruner report points zero": (spec_with(pruner={"name": "median", "report_points": 0}),
                                  "pruner.report_points"),
    "pruner warmup negative": (spec_with(pruner={"name": "median", "warmup_steps": -1}),
                               "pruner.warmup_steps"),
    "pruner a number": (spec_with(pruner=7), "pruner"),
    # objective, budget, device
    "direction up": (spec_with(objective={"direction": "up"}), "objective.direction"),
    "aggregate max": (spec_with(objective={"aggregate": "max"}), "objective.aggregate"),
    "objective at last": (spec_with(objective={"at": "last"}), "objective.at"),
    "diverge_past a word": (spec_with(objective={"diverge_past": "high"}),
                            "objective.diverge_past"),
    "diverge_past NaN": (spec_with(objective={"diverge_past": float("nan")}),
                         "objective.diverge_past"),
    "objective a string": (spec_with(objective="train/loss"), "objective"),
    "objective metric a number": (spec_with(objective={"metric": 5}), "objective.metric"),
    "budget samples negative": (spec_with(budget={"samples": -1}), "budget.samples"),
    "budget seconds negative": (spec_with(budget={"wall_seconds": -1}), "budget.wall_seconds"),
    "budget seconds NaN": (spec_with(budget={"wall_seconds": float("nan")}),
                           "budget.wall_seconds"),
    "budget seconds infinite": (spec_with(budget={"wall_seconds": float("inf")}),
                                "budget.wall_seconds"),
    "budget a number": (spec_with(budget=100), "budget"),
    "device gpu": (spec_with(device="gpu"), "device"),
    "device upper case": (spec_with(device="CUDA"), "device"),
    # storage, artifact root
    "storage empty": (spec_with(storage=""), "storage"),
    "storage sqlite without a file": (spec_with(storage="sqlite:///"), "storage"),
    "storage sqlite with two slashes": (spec_with(storage="sqlite://x.db"), "storage"),
    "storage postgres://, not postgresql://": (spec_with(storage="postgres://u@h/d"),
                                               "storage"),
    "storage a number": (spec_with(storage=5), "storage"),
    "artifact root empty": (spec_with(artifact_root=""), "artifact_root"),
    "artifact root relative": (spec_with(artifact_root="art/x"), "artifact_root"),
    "artifact root file URI with a host": (spec_with(artifact_root="file://host/x"),
                                           "artifact_root"),
    "artifact root bucket missing": (spec_with(artifact_root="s3://"), "artifact_root"),
    "artifact root server without a port": (spec_with(artifact_root="mlflow-artifacts://h"),
                                            "artifact_root"),
    "artifact root past MLflow's limit": (spec_with(artifact_root="/" + "a" * 3000),
                                          "artifact_root"),
    "artifact root past runs.artifact_uri on PostgreSQL": (
        spec_with(artifact_root="s3://bucket/" + "p" * 150,
                  storage="postgresql://nobody@127.0.0.1:1/none"), "artifact_root"),
    # launcher, evaluation, execution
    "launcher slurm": (spec_with(launcher="slurm"), "launcher.name"),
    "launcher workers zero": (spec_with(launcher={"name": "ray", "workers": 0}),
                              "launcher.workers"),
    "launcher cpus zero": (spec_with(launcher={"name": "ray", "cpus_per_worker": 0}),
                           "launcher.cpus_per_worker"),
    "launcher one and a half GPUs": (spec_with(launcher={"name": "ray", "gpus_per_worker": 1.5}),
                                     "launcher.gpus_per_worker"),
    "launcher restarts negative": (spec_with(launcher={"name": "ray", "max_restarts": -1}),
                                   "launcher.max_restarts"),
    "launcher address a number": (spec_with(launcher={"name": "ray", "address": 5}),
                                  "launcher.address"),
    "held-out seeds zero": (spec_with(evaluation={"seeds": 0}), "evaluation.seeds"),
    "held-out min one": (spec_with(evaluation={"seeds": {"min": 1}}), "evaluation.seeds.min"),
    "held-out max below min": (spec_with(evaluation={"seeds": {"min": 5, "max": 3}}),
                               "evaluation.seeds"),
    "held-out first seed negative": (spec_with(evaluation={"seeds": 3, "first_seed": -1}),
                                     "evaluation.first_seed"),
    "held-out until never": (spec_with(evaluation={"seeds": {"until": "never"}}),
                             "evaluation.seeds.until"),
    "evaluation a number": (spec_with(evaluation=5), "evaluation"),
    "execution parallel": (spec_with(execution={"seeds": "parallel"}), "execution.seeds"),
    "execution a word": (spec_with(execution="fast"), "execution"),
    # report options
    "report confidence below one half": (spec_with(report={"confidence": 0.4}),
                                         "report.confidence"),
    "report resamples too few": (spec_with(report={"resamples": 10}), "report.resamples"),
    "report aggregate max": (spec_with(report={"aggregate": "max"}), "report.aggregate"),
    "report metric unknown": (spec_with(report={"metrics": ["nope/x"]}), "report.metrics[0]"),
    "report log axis z": (spec_with(report={"log_axes": {"train/loss": ["z"]}}),
                          "report.log_axes.train/loss[0]"),
    "report rate window reversed": (
        spec_with(report={"rates": [{"metric": "train/loss", "window": [2, 1]}]}),
        "report.rates[0]"),
    "report split by nothing": (spec_with(report={"split": [{"metric": "train/loss",
                                                             "by": []}]}),
                                "report.split[0].by"),
    "report target without a value": (spec_with(report={"target": {"metric": "train/loss"}}),
                                      "report.target.value"),
    "report x axes a string": (spec_with(report={"x_axes": "step"}), "report.x_axes"),
}


@pytest.mark.parametrize("spec, key", [pytest.param(*v, id=k) for k, v in SPEC_FIELDS.items()])
def test_a_bad_spec_value_is_refused_naming_its_key(spec, key, tmp_path, capsys):
    refused(Case(["status", "spec.yaml"], spec=spec, words=(f"spec.yaml: {key}: ",)),
            tmp_path, capsys)


# ------------------------------------------------------------- 4. the spec file itself

FILES = {
    "only a comment": ("# nothing yet\n", "mapping"),
    "null": ("null\n", "mapping"),
    "a number": ("42\n", "mapping"),
    "a string": ("hello\n", "mapping"),
    "two documents": ("name: a\n---\nname: b\n", "YAML"),
    "tab indentation": ("task:\n\tname: logreg\n", "YAML"),
    "Latin-1 bytes": (b"name: caf\xe9\n", "UTF-8"),
    "UTF-16": ("name: tiny\n".encode("utf-16"), "UTF-8"),
    "duplicate key in a flow mapping": ("task: {name: logreg, name: quadratic}\n",
                                        "duplicate key"),
    "duplicate slot": (yaml.safe_dump(VALID, sort_keys=False).replace(
        "methods:\n  step_size:\n  - constant\n",
        "methods:\n  step_size:\n  - constant\n  step_size:\n  - polyak\n"), "duplicate key"),
    "a huge description": ("description: " + "d" * 2_000_000 + "\n" +
                           yaml.safe_dump(VALID, sort_keys=False), "description"),
    "a list of 10,001 seeds": (yaml.safe_dump(spec_with(seeds=list(range(10_001)))),
                               "seeds: 10001 seeds; allowed: at most 10000"),
    "NUL byte in the file": (b"name: tiny\x00\n", "spec.yaml"),
}
NAMED_BY_FILE = {  # no name key: the file's name is the sweep's, and must be one
    "a file name with a space and a bang": "bad name!.yaml",
    "a file name with an emoji": "sweep\U0001F680.yaml",
    "a file name with an RTL override": "\u202eevil.yaml",
    "a file name of 101 characters": "f" * 101 + ".yaml",
}


@pytest.mark.parametrize("file", [pytest.param(v, id=k) for k, v in NAMED_BY_FILE.items()])
def test_a_spec_file_whose_name_is_no_sweep_name_is_refused(file, tmp_path, capsys):
    unnamed = {k: v for k, v in VALID.items() if k != "name"}
    refused(Case(["status", file], files={file: unnamed},
                 words=(f"{file}: name: ", "the file name when name is unset")),
            tmp_path, capsys)


@pytest.mark.parametrize("text, word", [pytest.param(*v, id=k) for k, v in FILES.items()])
def test_a_spec_file_that_is_no_spec_is_refused(text, word, tmp_path, capsys):
    refused(Case(["status", "spec.yaml"], spec=text, words=("spec.yaml", word)),
            tmp_path, capsys)


# ------------------------------------------------------------------- 5. store files


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> Path:
    """The store of VALID after one trial, as two SQLite files (their WAL folded in)."""
    from workbench.engine.sweep_run import run_sweep
    from workbench.spec import sweep as spec

    folder = tmp_path_factory.mktemp("good-store")
    write(folder / "spec.yaml", VALID)
    with contextlib.chdir(folder):
        run_sweep(spec.load("spec.yaml"), device="cpu", say=lambda line: None)
    for name in (STORE, MLFLOW):
        with contextlib.closing(sqlite3.connect(folder / name)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return folder


def _text(name: str):
    def spoil(folder: Path) -> None:
        (folder / name).write_text("my notes\n" * 100)
    return spoil


def _empty(name: str):
    def spoil(folder: Path) -> None:
        (folder / name).write_bytes(b"")
    return spoil


def _folder(name: str):
    def spoil(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).mkdir()
    return spoil


def _header_only(name: str):
    def spoil(folder: Path) -> None:
        path = folder / name
        path.write_bytes(path.read_bytes()[:100])
    return spoil


def _foreign_mlflow(folder: Path) -> None:
    (folder / MLFLOW).unlink()
    with contextlib.closing(sqlite3.connect(folder / MLFLOW)) as db, db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")


def _swapped(folder: Path) -> None:
    shutil.copyfile(folder / STORE, folder / MLFLOW)


def _lock_folder(folder: Path) -> None:
    (folder / "workbench.lock").mkdir()


def _wal_folder(folder: Path) -> None:
    (folder / f"{STORE}-wal").mkdir()


WRITING_ONLY = {"folder as the lock file"}  # status and report read such a store
# a sweep completes a store whose MLflow half a kill left unbuilt (tests/test_worker_limits.py);
# status and report, which only read, refuse it
READING_ONLY = {"zero-byte mlflow file", "only the header of the mlflow file"}
STORE_SPOILERS = {
    "zero-byte mlflow file": _empty(MLFLOW),
    "text file as the optuna file": _text(STORE),
    "text file as the mlflow file": _text(MLFLOW),
    "another program's database as the mlflow file": _foreign_mlflow,
    "the optuna file as the mlflow file": _swapped,
    "folder as the mlflow file": _folder(MLFLOW),
    "only the header of the optuna file": _header_only(STORE),
    "only the header of the mlflow file": _header_only(MLFLOW),
    "folder as the lock file": _lock_folder,
    "folder as the write-ahead log": _wal_folder,
}
STORE_CASES = {f"{command}: {spoiler}": Case([command, *SPEC_ARG, *extra], store=spoiler)
               for spoiler in STORE_SPOILERS
               for command, extra in (("status", []), ("sweep", ["--quiet"]),
                                      ("report", ["--out", "out"]))
               if spoiler not in (READING_ONLY if command == "sweep" else WRITING_ONLY)}


@pytest.mark.parametrize("case", cases(STORE_CASES))
def test_a_spoiled_store_is_refused_and_left_as_it_was(case, good_store, tmp_path, capsys):
    refused(case, tmp_path, capsys, good_store)


def test_a_zero_byte_optuna_file_is_no_store_yet(good_store, tmp_path, capsys):
    """As the store check reads it (an empty file: not created yet); `status` said so with
    sqlite3's "no such table: studies" and a traceback."""
    shutil.copyfile(good_store / MLFLOW, tmp_path / MLFLOW)
    (tmp_path / STORE).write_bytes(b"")
    write(tmp_path / "spec.yaml", VALID)
    before = photograph(tmp_path)
    with contextlib.chdir(tmp_path):
        code, out, err = call(["status", "spec.yaml"], capsys)
    assert code == 0, err
    assert err.startswith("no store at ") and "not started" in out, (out, err)
    assert photograph(tmp_path) == before


def test_the_good_store_is_good(good_store, tmp_path, capsys):
    """The store the cases above spoil is accepted as it is: they fail for their spoiling."""
    for name in (STORE, MLFLOW):
        shutil.copyfile(good_store / name, tmp_path / name)
    write(tmp_path / "spec.yaml", VALID)
    with contextlib.chdir(tmp_path):
        code, out, err = call(["status", "spec.yaml"], capsys)
    assert code == 0, err
    assert "1/1" in out, out


HOLD = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA locking_mode=EXCLUSIVE")
db.execute("BEGIN EXCLUSIVE")
db.execute("UPDATE studies SET study_name = study_name")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("command", [["status", *SPEC_ARG], ["sweep", *SPEC_ARG, "--quiet"]])
def test_a_store_another_process_holds_exclusively_is_refused(command, good_store, tmp_path,
                                                               capsys, monkeypatch):
    """Was called corrupt or truncated, to be restored from a backup: now locked."""
    from workbench.store import schema as store_schema

    monkeypatch.setattr(store_schema, "LOCKED_WAIT_S", 0.2)
    for name in (STORE, MLFLOW):
        shutil.copyfile(good_store / name, tmp_path / name)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / STORE)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        write(tmp_path / "spec.yaml", VALID)
        before = photograph(tmp_path)
        with contextlib.chdir(tmp_path):
            code, _, err = call(command, capsys)
        assert_one_error_line(code, err, ("is locked by another process",))
        assert photograph(tmp_path) == before
    finally:
        holder.communicate("")


@contextlib.contextmanager
def read_only_mount(folder: Path):
    """``folder`` as a tmpfs the caller fills (yielded writable), then remounted read-only;
    skips the test where this process cannot mount (not root, or no CAP_SYS_ADMIN)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here to make a read-only file system "
                    f"({mounted.stderr.strip() or 'mount failed'}); chmod would not stop root")
    try:
        yield lambda: subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("command", [["status"], ["sweep", "--quiet"],
                                     ["report", "--out", "out"]])
def test_a_store_on_a_read_only_file_system_is_refused_in_one_line(command, good_store,
                                                                   tmp_path, capsys):
    """Was: OSError on the lock file (sweep), sqlite3.OperationalError (status, report)."""
    with read_only_mount(tmp_path / "ro") as make_read_only:
        for name in (STORE, MLFLOW):
            shutil.copyfile(good_store / name, tmp_path / "ro" / name)
        write(tmp_path / "spec.yaml", spec_with(storage=f"sqlite:///{tmp_path / 'ro' / STORE}"))
        make_read_only()
        before = photograph(tmp_path)
        with contextlib.chdir(tmp_path):
            code, _, err = call([command[0], "spec.yaml", *command[1:]], capsys)
        assert_one_error_line(code, err, (f"the store {tmp_path / 'ro' / STORE} is read-only",
                                          "read-only file system"))
        assert photograph(tmp_path) == before


# -------------------------------------------------------------------- 6. the Python API


@pytest.fixture(scope="module")
def api_store(good_store) -> str:
    return f"sqlite:///{good_store / STORE}"


def _spoiled_copy(good_store: Path, folder: Path, spoiler: str) -> str:
    for name in (STORE, MLFLOW):
        shutil.copyfile(good_store / name, folder / name)
    STORE_SPOILERS[spoiler](folder)
    return f"sqlite:///{folder / STORE}"


API = {
    "storage empty": (lambda s: load_runs("tiny", ""), ValueError, "storage"),
    "storage a folder": (lambda s: load_runs("tiny", f"sqlite:///{Path(s[10:]).parent}"),
                         ValueError, "is a directory"),
    "storage in memory": (lambda s: load_runs("tiny", "sqlite:///:memory:"), ValueError,
                          "in-memory"),
    "storage path with NUL": (lambda s: load_runs("tiny", "sqlite:///a\x00b.db"), ValueError,
                              "storage"),
    "sweep with an RTL mark": (lambda s: load_runs("tiny\u202e", s), LookupError,
                               "no sweep"),
    "sweep a bytes name": (lambda s: load_runs(b"tiny", s), ValueError, "sweep"),
    "kinds a set of numbers": (lambda s: load_runs("tiny", s, kinds={1}), ValueError, "kinds"),
    "kinds a mapping of unknown kinds": (lambda s: load_runs("tiny", s, kinds={"x": 1}),
                                         ValueError, "kinds"),
    "keys a bytes name": (lambda s: load_metrics("tiny", [b"train/loss"], s), ValueError,
                          "keys"),
    "keys an empty name": (lambda s: load_metrics("tiny", [""], s), ValueError, "keys"),
    "keys a number": (lambda s: load_metrics("tiny", 5, s), ValueError, "keys"),
    "storage name too long": (lambda s: load_runs("tiny", "sqlite:///" + "s" * 5000),
                              ValueError, "File name too long"),
    "storage postgres://": (lambda s: load_runs("tiny", "postgres://u@h/d"), ValueError,
                            "unsupported storage"),
    "kinds holding None": (lambda s: load_runs("tiny", s, kinds=[None]), ValueError, "kinds"),
    "kinds an iterator of unknown kinds": (lambda s: load_runs("tiny", s, kinds=iter(["x"])),
                                           ValueError, "kinds"),
    "kinds a string (load_metrics)": (lambda s: load_metrics("tiny", ["train/loss"], s,
                                                             kinds="seed"), ValueError, "kinds"),
    "include_superseded a string": (lambda s: load_metrics("tiny", ["train/loss"], s,
                                                           include_superseded="yes"),
                                    ValueError, "include_superseded"),
}


@pytest.mark.parametrize("call_api, error, word",
                         [pytest.param(*v, id=k) for k, v in API.items()])
def test_a_bad_api_argument_raises_naming_it(call_api, error, word, api_store, good_store):
    before = photograph(good_store)
    with pytest.raises(error, match=word) as raised:
        call_api(api_store)
    assert type(raised.value).__module__.split(".")[0] in ("builtins", "workbench"), \
        type(raised.value)
    assert photograph(good_store) == before


API_STORES = ["text file as the optuna file", "text file as the mlflow file",
              "another program's database as the mlflow file", "folder as the mlflow file",
              "only the header of the optuna file"]


@pytest.mark.parametrize("spoiler", API_STORES)
@pytest.mark.parametrize("function", ["load_runs", "load_metrics"])
def test_a_spoiled_store_is_a_value_error_in_the_api(function, spoiler, good_store, tmp_path):
    storage = _spoiled_copy(good_store, tmp_path, spoiler)
    before = photograph(tmp_path)
    with pytest.raises(ValueError, match="^storage: "):
        if function == "load_runs":
            load_runs("tiny", storage)
        else:
            load_metrics("tiny", ["train/loss"], storage)
    assert photograph(tmp_path) == before


# -------------------------------------------------------- 7. the store's limits, checked


def test_the_limits_in_the_spec_check_are_the_installed_packages():
    """Each number the spec check holds a value to is MLflow's or Optuna's own."""
    import mlflow.environment_variables as mlflow_env
    import mlflow.utils.validation as mlflow_limits
    from mlflow.store.tracking.dbmodels import models as mlflow_tables
    from optuna.storages._rdb import models as optuna_tables

    assert schema.MLFLOW_EXPERIMENT_TAG_CHARS == mlflow_limits.MAX_EXPERIMENT_TAG_VAL_LENGTH
    assert schema.MLFLOW_TAG_CHARS == mlflow_limits.MAX_TAG_VAL_LENGTH
    assert schema.MLFLOW_PARAM_CHARS == mlflow_limits.MAX_PARAM_VAL_LENGTH
    assert schema.MLFLOW_ARTIFACT_LOCATION_CHARS == \
        mlflow_env.MLFLOW_ARTIFACT_LOCATION_MAX_LENGTH.default
    columns = {
        schema.MLFLOW_EXPERIMENT_NAME_CHARS: mlflow_tables.SqlExperiment.__table__.c.name,
        schema.MLFLOW_RUN_NAME_CHARS: mlflow_tables.SqlRun.__table__.c.name,
        schema.MLFLOW_RUN_ARTIFACT_URI_CHARS: mlflow_tables.SqlRun.__table__.c.artifact_uri,
        schema.MLFLOW_TAG_CHARS: mlflow_tables.SqlTag.__table__.c.value,
        schema.OPTUNA_STUDY_NAME_CHARS: optuna_tables.StudyModel.__table__.c.study_name,
    }
    for limit, column in columns.items():
        assert column.type.length == limit, (column, column.type.length, limit)
    assert optuna_tables.MAX_INDEXED_STRING_LENGTH == schema.OPTUNA_STUDY_NAME_CHARS
    longest_name = int(schema.NAME_PATTERN.split("{0,")[1].split("}")[0]) + 1
    assert longest_name <= min(schema.MLFLOW_EXPERIMENT_NAME_CHARS,
                               mlflow_limits.MAX_EXPERIMENT_NAME_LENGTH)
    assert schema.STUDY_LABEL_CHARS + schema.RUN_NAME_SUFFIX_CHARS == \
        schema.MLFLOW_RUN_NAME_CHARS


@pytest.mark.parametrize("spec", [
    pytest.param(spec_with(description="d" * 20_000), id="description at the limit"),
    pytest.param(spec_with(methods={"step_size": [{"name": "constant", "label": "l" * 60}],
                                    "batch_size": [{"name": "constant", "label": "b" * 60}]}),
                 id="two labels of 60 characters"),
])
def test_values_at_the_limits_are_accepted(spec, tmp_path, capsys):
    write(tmp_path / "spec.yaml", spec)
    with contextlib.chdir(tmp_path):
        code, _, err = call(["status", "spec.yaml"], capsys)
    assert code == 0, err


def test_a_description_past_the_limit_was_refused_only_after_the_store_was_made(tmp_path,
                                                                                 capsys):
    """The reproduction of the issue: the spec check passed, the store was created, then
    MLflow raised its length error with a traceback. Now `sweep` refuses it first."""
    line = refused(Case(["sweep", "spec.yaml", "--quiet"],
                        spec=spec_with(description="d" * 20_001)), tmp_path, capsys)
    assert "spec.yaml: description: 20,001 characters as text; allowed: at most 20,000" in line
    assert not (tmp_path / STORE).exists()


# ------------------------------------------------------------------------ the count


def battery_count() -> int:
    """How many bad inputs this file tries: one input given to one command or API function
    is one (README, "Bad input", adds the earlier files' in the same way)."""
    return (len(FLAGS) + len(SERVERS) + len(SPEC_FIELDS) + len(FILES) + len(NAMED_BY_FILE)
            + len(STORE_CASES) + 2 + 3  # locked (status, sweep), read-only (status, sweep, report)
            + len(API) + 2 * len(API_STORES) + 1)  # the description, given to `sweep`


def test_the_readme_says_how_many_bad_inputs_this_file_tries():
    text = " ".join((ROOT / "README.md").read_text().split())
    assert f"{battery_count()} in tests/test_bad_input_battery.py" in text, battery_count()
