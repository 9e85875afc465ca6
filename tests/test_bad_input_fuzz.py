"""Fuzzing the real CLI with bad input: mutated and random sweep specs, random arguments.

Whatever the input, the answer is exit code 0 or 2 (``report`` also 1 when it has no store to
read), never an uncaught exception; exit 2 comes with an ``error:`` line; and bad input writes
nothing. Commands run in-process (``cli.main``), each example in a fresh folder, so "nothing
written" is checked per example; one test runs the installed entry point in a child process.
"""

from __future__ import annotations

import contextlib
import copy
import math
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, files_under, run_cli, tiny_spec
from workbench import registry
from workbench.cli import main as cli
from workbench.engine import sweep_run, workers

FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# --------------------------------------------------------------------------------- helpers


class WouldRun(Exception):
    """Raised in place of the sweep engine: the CLI accepted its input and would start trials."""


@contextlib.contextmanager
def fresh_folder():
    """A new empty working folder for one example."""
    with tempfile.TemporaryDirectory() as name, contextlib.chdir(name):
        yield Path(name).resolve()


def call(argv: list[str], capsys) -> tuple[int | str | None, str, str]:
    """``workbench ARGV`` in-process: (exit code, stdout, stderr); argparse exits via SystemExit.
    Any other exception propagates: it is the traceback a user would see."""
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_clear_rejection(code, err: str) -> None:
    assert code == 2, (code, err)
    assert any(line.startswith("error: ") for line in err.splitlines()), err
    assert "Traceback" not in err, err


def write_yaml(path: str, document) -> None:
    Path(path).write_text(yaml.safe_dump(document, sort_keys=False))


# ------------------------------------------------------------------------- random values

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
ARG_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=10)
NUMBERS = st.sampled_from([0, -1, 1, 2, 2**31, 2**63, 2**64, 10**400, -10**400, 0.5, -0.0,
                           1e308, 1e-320, math.nan, math.inf, -math.inf])
WORDS = st.sampled_from([
    "", "all", "fixed", "none", "auto", "cpu", "cuda", "tpe", "grid", "random", "median",
    "minimize", "maximize", "final", "train/loss", "train/accuracy", "constant", "polyak",
    "logreg", "quadratic", "sqlite:///store.db", "sqlite:///:memory:", "sqlite:///",
    "mysql://db/x", "postgresql://nobody@127.0.0.1:1/x", "sqlite:///~nobody-here/x.db",
    "sqlite:///a\x00b.db",
])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | NUMBERS | TEXT | WORDS
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)

# ------------------------------------------------------------------ 1. mutated valid specs

RICH_SPEC = tiny_spec(
    methods={
        "step_size": ["constant", {"name": "armijo", "fixed": {"c": 0.2},
                                   "search_space": {"eta0": {"low": 0.1, "high": 10.0,
                                                             "log": True}}}],
        "batch_size": [{"name": "constant", "fixed": {"size": 16}}, "linear_ramp"],
    },
    seeds=[0, 3],
    sampler={"name": "grid", "grid_points": 3},
    pruner={"name": "median", "startup_trials": 1, "report_points": 5},
    objective={"metric": "train/loss", "direction": "minimize", "aggregate": "iqm",
               "at": "final"},
    budget={"steps": 20, "samples": 1000, "wall_seconds": 5.0},
    device="cpu",
    storage="sqlite:///tiny.db",
    report={"metrics": ["train/loss"], "target": {"metric": "train/accuracy", "value": 0.9}},
)
BASES = {
    "tiny": tiny_spec(),
    "rich": RICH_SPEC,
    "quickstart": yaml.safe_load((ROOT / "sweeps" / "quickstart.yaml").read_text()),
}


def positions(node, path=()):
    """(path, container, key) of every value below ``node``."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in list(items):
        yield (*path, key), node, key
        if isinstance(value, dict | list):
            yield from positions(value, (*path, key))


def is_name(path: tuple) -> bool:
    """A task name, or a method name in a ``methods`` list (plain or an entry's ``name``)."""
    return path == ("task", "name") or (
        path[0] == "methods" and len(path) in (3, 4) and isinstance(path[2], int)
        and (len(path) == 3 or path[3] == "name"))


@st.composite
def mutated_specs(draw):
    spec = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 3))):
        operation = draw(st.sampled_from(["replace", "delete", "add", "rename"]))
        spots = list(positions(spec))
        if operation == "rename":
            names = [(c, k) for path, c, k in spots if is_name(path)]
            if names:
                container, key = draw(st.sampled_from(names))
                container[key] = draw(TEXT | WORDS)
        elif operation == "add":
            dicts = [spec, *(c[k] for _, c, k in spots if isinstance(c[k], dict))]
            draw(st.sampled_from(dicts))[draw(TEXT)] = draw(VALUES)
        else:
            _, container, key = draw(st.sampled_from(spots))
            if operation == "replace":
                container[key] = draw(VALUES)
            elif isinstance(container, dict):
                del container[key]
            else:
                container.pop(key)
    return spec


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_unmutated_specs_are_valid(base, capsys):
    with fresh_folder() as here:
        write_yaml("spec.yaml", BASES[base])
        code, out, err = call(["status", "spec.yaml"], capsys)
        assert code == 0, err
        assert out.startswith("sweep "), out
        assert files_under(here) == {here / "spec.yaml"}


@settings(FUZZ, max_examples=80)
@given(spec=mutated_specs())
def test_a_mutated_spec_is_accepted_or_rejected_clearly_and_nothing_is_written(spec, capsys):
    with fresh_folder() as here:
        write_yaml("spec.yaml", spec)
        before = files_under(here)
        code, out, err = call(["status", "spec.yaml"], capsys)
        event(f"status exit {code}")
        assert code in (0, 2), (code, err)
        assert files_under(here) == before  # status never creates the store
        if code == 0:
            assert out.startswith("sweep "), out
            return
        assert err.startswith("error: spec.yaml: "), err
        assert "Traceback" not in err
        status_err = err
        code, out, err = call(["sweep", "spec.yaml", "--quiet"], capsys)
        assert code == 2, (code, err)
        assert err == status_err  # the same check, the same message
        assert files_under(here) == before


# ------------------------------------------------------------ 2. random text and documents

YAML_PIECES = st.sampled_from([
    "task:", "name:", " name: logreg", "methods:", "step_size:", "- ", "  ", "\t", "\n", ":",
    "{", "}", "[", "]", ",", "&a ", "*a", "*b", "!!python/object:os.system ", "!!binary ",
    "!!int ", "---\n", "...\n", "%YAML 1.1\n", "? ", "|\n", ">\n", "'", '"', "#", "\\x00",
    "\ufeff", "\x85", "1e999", ".nan", "~", "<<: *a\n", "2020-13-45 ", "2020-01-01 ",
])
DOCUMENTS = st.one_of(
    st.binary(max_size=200),
    st.text(st.characters(codec="utf-8"), max_size=200).map(str.encode),
    st.lists(YAML_PIECES, max_size=25).map(lambda pieces: "".join(pieces).encode()),
    VALUES.map(lambda value: yaml.safe_dump(value).encode()),
    st.dictionaries(TEXT | st.sampled_from(["task", "seeds", "trials", "budget", "sampler"]),
                    VALUES, max_size=5).map(lambda value: yaml.safe_dump(value).encode()),
)


@settings(FUZZ, max_examples=100)
@given(document=DOCUMENTS)
def test_a_random_document_is_rejected_clearly_and_nothing_is_written(document, capsys):
    with fresh_folder() as here:
        Path("spec.yaml").write_bytes(document)
        before = files_under(here)
        code, _, err = call(["sweep", "spec.yaml", "--quiet"], capsys)
        assert_clear_rejection(code, err)
        assert err.startswith("error: spec.yaml: "), err
        assert files_under(here) == before


REPORT_SPECS = st.fixed_dictionaries(
    {"name": TEXT | st.sampled_from(["r", "../../escaped", "a/b"]),
     "sweeps": st.lists(st.sampled_from(["good.yaml", "bad.yaml", "missing.yaml", "", ".",
                                         "..", "/"]) | TEXT | VALUES, max_size=3)},
    optional={"report": VALUES | st.just({"aggregate": "mean"}), "extra": VALUES},
)
GOOD_SPEC = tiny_spec(trials=1, seeds=1, budget={"steps": 2}, methods={"step_size": ["constant"]})
BAD_SPEC = tiny_spec(task={"name": "no_such_task"})  # no argument can make it valid


@settings(FUZZ, max_examples=60)
@given(spec=REPORT_SPECS)
def test_a_random_report_spec_is_rejected_clearly_and_nothing_is_written(spec, capsys):
    with fresh_folder() as here:
        write_yaml("good.yaml", GOOD_SPEC)
        write_yaml("bad.yaml", BAD_SPEC)
        write_yaml("report.yaml", spec)
        before = files_under(here)
        code, _, err = call(["report", "report.yaml"], capsys)
        if err.startswith("error: no store at "):  # every sweep it names is valid, none ran
            assert code == 2, (code, err)
        else:
            assert_clear_rejection(code, err)
            # the error line names the file (several problems follow it, one per line)
            error_line = [line for line in err.splitlines() if line.startswith("error: ")][-1]
            assert "report.yaml" in error_line or "bad.yaml" in err, err
        assert files_under(here) == before


# ------------------------------------------------------------- 3. random command lines

GARBAGE = ARG_TEXT | st.sampled_from([
    "", " ", "-", "--", "-h", "-1", "0", "=", "step_size", "logreg", "good.yaml", "--steps",
    "--workers=", "--no-such-option", "sweep",
])
OPTION_VALUES = {
    "--workers": st.sampled_from(["-1", "0", "1", "2", "two", "1e3", "99999999999999999999999"]),
    "--storage": st.sampled_from(["sqlite:///store.db", "sqlite:///:memory:", "sqlite:///",
                                  "mysql://x", "postgresql://nobody@127.0.0.1:1/x", "good.yaml",
                                  ""]) | ARG_TEXT,
    "--device": st.sampled_from(["auto", "cpu", "cuda", "cuda:0", "cuda:x", "tpu", "CPU", ""])
    | ARG_TEXT,
    "--seed": st.sampled_from(["-1", "0", "7", "2.5", "x", str(2**63), str(2**64)]),
    "--out": st.sampled_from(["out", ".", "", "/dev/null/x"]) | ARG_TEXT,
    "--family": st.sampled_from(["step_size", "batch_size", "entropy", "advantage", "Step_size",
                                 ""]),
}
# command -> (takes a spec file, options with a value, flags)
COMMANDS = {
    "sweep": (True, ["--workers", "--storage", "--device"], ["--quiet"]),
    "status": (True, ["--storage"], []),
    "report": (True, ["--storage", "--out"], []),
    "methods": (False, ["--family"], ["--json"]),
    "run": (False, ["--seed", "--device"], ["--json"]),
    "credit": (True, ["--out", "--device"], []),
}
SPEC_FILES = st.sampled_from(["good.yaml", "bad.yaml", "missing.yaml", ".", ""]) | ARG_TEXT
TASK_VALUES = st.sampled_from([
    ".nan", ".inf", "-1", "0", "1", "x", "[1, 2]", "[3, 3]", "null", "true", "1e3", "{a: 1}",
    "[unclosed", "!!int x", "2020-13-45", "2020-01-01",
    "gaussian", "breast_cancer", "digits_binary", "tyurin_two_point", "tyurin_worst_case",
]) | st.integers(-2, 64).map(str)
HP_VALUES = TASK_VALUES | st.sampled_from(["1" * 400, "1.0e999", "-.inf", "0.001", "lower_bound",
                                           "exact", "cosine"]) | ARG_TEXT
METHOD_NAMES = st.sampled_from(sorted({key.split("/")[1] for key in registry.available()}))


@st.composite
def assignments(draw):
    """One ``run`` assignment: SLOT=METHOD, SLOT.PARAM=VALUE, PARAM=VALUE or random text."""
    slot = draw(st.sampled_from(["step_size", "batch_size"]))
    kind = draw(st.sampled_from(["method", "hyperparameter", "task", "random"]))
    if kind == "method":
        return f"{slot}={draw(METHOD_NAMES | ARG_TEXT | st.integers(-1, 64).map(str))}"
    if kind == "hyperparameter":
        names = {name for key in registry.available(slot)
                 for name in registry.get(slot, key).hyperparameters}
        name = draw(st.sampled_from(sorted(names)) | ARG_TEXT)
        return f"{slot}.{name}={draw(HP_VALUES)}"
    if kind == "task":
        key = draw(st.sampled_from(["n_samples", "dim", "margin", "label_noise", "l2", "bias",
                                    "batch_size", "dataset", "digits_classes", "samples"]))
        return f"{key}={draw(TASK_VALUES)}"
    return f"{draw(ARG_TEXT)}={draw(ARG_TEXT)}"


@st.composite
def command_lines(draw):
    """``workbench COMMAND ...``: options with plausible or odd values, flags and garbage; for
    ``run`` the task logreg, a step-size method and ``--steps 2``, so what it accepts runs in
    milliseconds."""
    command = draw(st.sampled_from(sorted(COMMANDS)))
    takes_spec, valued, flags = COMMANDS[command]
    chunk = st.sampled_from(valued).flatmap(lambda o: OPTION_VALUES[o].map(lambda v: [o, v]))
    chunk = chunk | GARBAGE.map(lambda token: [token])
    if flags:
        chunk = chunk | st.sampled_from(flags).map(lambda flag: [flag])
    if command == "run":
        chunk = chunk | assignments().map(lambda item: [item])
    chunks = draw(st.lists(chunk, max_size=4))
    if command == "run" and draw(st.booleans()):  # the documented order: assignments first
        chunks.sort(key=lambda c: c[0].startswith("-"))
    tokens = [token for c in chunks for token in c]
    if command == "run":
        return ["run", "logreg", f"step_size={draw(METHOD_NAMES)}", *tokens, "--steps", "2"]
    return [command, *([draw(SPEC_FILES)] if takes_spec else []), *tokens]


@settings(FUZZ, max_examples=150)
@given(argv=command_lines())
def test_random_arguments_are_accepted_or_rejected_clearly_and_nothing_is_written(
        argv, capsys, monkeypatch):
    def would_run(*args, **kwargs):
        raise WouldRun

    monkeypatch.setattr(sweep_run, "run_sweep", would_run)
    monkeypatch.setattr(workers, "terminate_gracefully", lambda: None)
    with fresh_folder() as here:
        write_yaml("good.yaml", GOOD_SPEC)
        write_yaml("bad.yaml", BAD_SPEC)
        before = files_under(here)
        try:
            code, out, err = call(argv, capsys)
        except WouldRun:  # a valid sweep: everything before the engine must have written nothing
            code, out, err = 0, "", capsys.readouterr().err
        event(f"{argv[0]} exit {code}")
        assert files_under(here) == before
        assert "Traceback" not in err
        if code != 0:  # `report` of a store or sweep that is not there too (it exited 1)
            assert_clear_rejection(code, err)
        elif argv[0] == "run" and not {"-h", "--help"} & set(argv):
            assert "train/loss" in out, out


# ------------------------------------------------------ reproducers of bugs found by fuzzing

def huge_lr(value):
    return tiny_spec(methods={"step_size": [{"name": "constant", "fixed": {"lr": value}}]})


def batch_size(value):
    return tiny_spec(methods={"step_size": ["constant"],
                              "batch_size": [{"name": "constant", "fixed": {"size": value}}]})


FOUND = {
    "int too large for a float hyperparameter": (["status", "spec.yaml"], huge_lr(10**400)),
    "nan for an int hyperparameter": (["status", "spec.yaml"], batch_size(math.nan)),
    "inf for an int hyperparameter": (["status", "spec.yaml"], batch_size(math.inf)),
    "int log range from 0": (["status", "spec.yaml"], tiny_spec(methods={"batch_size": [
        {"name": "linear_ramp", "search_space": {"ramp_samples": {"low": 0}}}],
        "step_size": ["constant"]})),
    "nul byte in the storage path": (["status", "spec.yaml"],
                                     tiny_spec(storage="sqlite:///a\x00b.db")),
    "unknown user in the storage path": (["status", "spec.yaml"],
                                         tiny_spec(storage="sqlite:///~nobody-here/x.db")),
    "unreachable postgres store (status)": (
        ["status", "spec.yaml", "--storage", "postgresql://nobody@127.0.0.1:1/x"], tiny_spec()),
    "unreachable postgres store (sweep)": (
        ["sweep", "spec.yaml", "--quiet", "--storage", "postgresql://nobody@127.0.0.1:1/x"],
        tiny_spec()),
    "report spec naming no sweeps": (["report", "spec.yaml"], {"name": "r", "sweeps": []}),
    "report into a folder that is not a report": (["report", "spec.yaml", "--out", "."],
                                                   tiny_spec()),
    "malformed cuda device (sweep)": (["sweep", "spec.yaml", "--device", "cuda:x"], tiny_spec()),
    "malformed cuda device (run)": (
        ["run", "logreg", "step_size=constant", "--steps", "2", "--device", "cuda:x"], None),
    "seed beyond 64 bits (spec)": (["status", "spec.yaml"], tiny_spec(seeds=[0, 2**64])),
    "seed beyond 64 bits (run)": (
        ["run", "logreg", "step_size=constant", "--steps", "2", "--seed", str(2**64)], None),
    "impossible date in a spec": (["status", "spec.yaml"], "name: x\nseeds: 2020-13-45\n"),
    "bad !!int tag in a spec": (["status", "spec.yaml"], "name: !!int x\n"),
    "bad !!float tag in a spec": (["status", "spec.yaml"], "name: !!float .\n"),
    "empty !!int tag in a spec": (["status", "spec.yaml"], "name: !!int\n"),
    "bad !!bool tag in a spec": (["status", "spec.yaml"], "name: !!bool maybe\n"),
    "bad !!timestamp tag in a spec": (["status", "spec.yaml"], "name: !!timestamp x\n"),
    "impossible date in an argument (run)": (
        ["run", "logreg", "step_size=constant", "step_size.lr=2020-13-45", "--steps", "2"], None),
    "int too large for a float hyperparameter (run)": (
        ["run", "logreg", "step_size=constant", f"step_size.lr={10**400}", "--steps", "2"], None),
}


@pytest.mark.parametrize("case", sorted(FOUND))
def test_inputs_found_by_fuzzing_are_rejected_clearly(case, capsys):
    argv, spec = FOUND[case]
    with fresh_folder() as here:
        if isinstance(spec, str):
            Path("spec.yaml").write_text(spec)
        elif spec is not None:
            write_yaml("spec.yaml", spec)
        before = files_under(here)
        code, _, err = call(argv, capsys)
        assert_clear_rejection(code, err)
        assert files_under(here) == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_an_indexed_cuda_device_without_a_gpu_is_rejected_clearly(capsys):
    with fresh_folder() as here:
        code, _, err = call(["run", "logreg", "step_size=constant", "--steps", "2",
                             "--device", "cuda:0"], capsys)
        assert_clear_rejection(code, err)
        assert files_under(here) == set()


@pytest.mark.parametrize("family", ["step_size", "batch_size", "entropy", "advantage"])
def test_methods_lists_every_family_even_an_empty_one(family, capsys):
    code, out, err = call(["methods", "--family", family], capsys)
    assert code == 0, err
    table = out.split("\n\n")[0].splitlines()[2:]  # the footer says how to see one whole
    assert [line.split()[0] for line in table] == registry.available(family)


# ------------------------------------------------------------ the installed entry point

def test_the_real_command_rejects_garbage_without_a_traceback(tmp_path):
    (tmp_path / "spec.yaml").write_bytes(bytes(range(256)) * 2)
    before = files_under(tmp_path)
    result = run_cli("sweep", "spec.yaml", "--quiet", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: spec.yaml: not a UTF-8 text file"), result.stderr
    assert "Traceback" not in result.stderr
    result = run_cli("run", "logreg", "step_size=constant", "--steps", "two", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "error: argument --steps: invalid int value: 'two'" in result.stderr
    assert "Traceback" not in result.stderr
    assert files_under(tmp_path) == before
