"""Reproductions of the papers' claims (reproductions/NAME): each has its parts, its committed
results still meet every check of its claim, and its quick form, run as a user would, shows
the effect's shape again; bad claims and arguments are refused with one message."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT
from workbench import reproduce
from workbench.cli import main as cli
from workbench.common.validation import SpecError
from workbench.reproduce import checks
from workbench.reproduce import claim as claims
from workbench.spec import sweep as spec

FOLDERS = claims.folders(reproduce.ROOT)


def sweep_names(folder, claim) -> list[str]:
    return [spec.read_yaml(folder / name)["name"] for name in claim.sweeps]


def test_the_reproductions_are_there():
    assert {"tyurin-table1", "polyak-untuned", "frank-wolfe-rate", "gigpo-agent",
            "critical-batch"} <= set(FOLDERS)


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_each_has_a_readme_with_command_cpu_time_and_verdict(name):
    text = (FOLDERS[name] / "README.md").read_text()
    assert f"workbench reproduce {name}" in text
    assert "CPU" in text and "**Verdict" in text
    run = json.loads((FOLDERS[name] / "results" / "run.json").read_text())
    assert run["quick"] is False and run["cpu_seconds"] > 0


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_the_committed_results_give_the_recorded_checks_and_the_verdict_says_so(name):
    """The checks evaluated again on the committed results give what ``checks.json`` records;
    a claim whose checks do not all hold is not called reproduced (a verdict says what the
    numbers say, "not reproduced" included)."""
    folder = FOLDERS[name]
    claim = claims.load(folder)
    outcomes = checks.evaluate(claim, folder / "results", sweep_names(folder, claim),
                               quick=False)
    assert len(outcomes) == len(claim.checks)
    recorded = json.loads((folder / "results" / "checks.json").read_text())
    assert [r["passed"] for r in recorded] == [o.passed for o in outcomes]
    if not all(o.passed for o in outcomes):
        verdict = (folder / "README.md").read_text().split("**Verdict", 1)[1][:80].lower()
        assert not verdict.lstrip(": ").startswith("reproduced"), \
            [o.detail for o in outcomes if not o.passed]


def test_tyurin_matches_the_papers_table_number_for_number():
    table = (FOLDERS["tyurin-table1"] / "results" / "paper_vs_ours.csv").read_text()
    rows = [line.split(",") for line in table.splitlines()[1:]]
    assert len(rows) == 5 and all(float(r[3]) == 0 for r in rows)


def _halves() -> list[list[str]]:
    """The reproductions in two groups of about equal quick-form CPU time (each one's last
    recorded ``results/quick/run.json``), to run side by side on two cores."""
    groups: list[list[str]] = [[], []]
    load = [0.0, 0.0]
    for name in sorted(FOLDERS, key=_quick_seconds, reverse=True):
        lighter = load.index(min(load))
        groups[lighter].append(name)
        load[lighter] += _quick_seconds(name)
    return [g for g in groups if g]


def _quick_seconds(name: str) -> float:
    try:
        return json.loads((FOLDERS[name] / "results" / "quick" / "run.json").read_text())[
            "cpu_seconds"]
    except (OSError, KeyError, ValueError):
        return 0.0


def test_the_quick_forms_show_each_claims_shape(tmp_path):
    """`workbench reproduce --quick` on every reproduction (as two commands side by side):
    exit 0 (every check holds), the results and the work folder where --out says."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "workbench", "reproduce", "--quick",
                               "--out", str(tmp_path), *names], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for names in _halves()]
    outputs = [proc.communicate() for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out + err
    done = subprocess.CompletedProcess([], 0, "".join(out for out, _ in outputs), "")
    committed = [n for n, f in FOLDERS.items() if (f / "results" / "quick").is_dir()]
    # each quick form's numbers are the committed quick numbers (within the claim's stated
    # quick_tolerance): a change that moves a finding fails here, in the commit that made it
    assert done.stdout.count("gives the committed quick numbers") == len(committed), \
        done.stdout
    for name in FOLDERS:
        outcomes = json.loads((tmp_path / name / "results" / "checks.json").read_text())
        assert all(o["passed"] for o in outcomes), outcomes
        run = json.loads((tmp_path / name / "results" / "run.json").read_text())
        assert run["quick"] is True
        assert (tmp_path / name / "work" / "workbench.db").is_file()
    for credit in ("credit_gigpo-agent-credit.csv", "credit_gigpo-agent-credit.png"):
        assert (tmp_path / "gigpo-agent" / "results" / credit).is_file()


def test_a_slope_of_a_power_law_is_its_exponent():
    steps = np.arange(0, 1001, dtype=float)
    values = 3.0 / (steps + 1) ** 2
    assert checks.loglog_slope(steps + 1, values, 10, 1000) == pytest.approx(-2.0)
    assert math.isnan(checks.loglog_slope(steps, values, 2000, 3000))


def test_a_change_is_the_fitted_lines_rise_over_the_window(tmp_path):
    """A change check reads a curve's drift: a noisy line rising 0.05 a step rises 4 over
    steps 20-100 (and NaN where the window holds fewer than 3 steps)."""
    from workbench.stats.claims import linear_change

    steps = np.arange(1, 101, dtype=float)
    noise = np.random.default_rng(0).normal(0, 0.5, steps.size)
    values = 40 + 0.05 * steps + noise
    assert linear_change(steps, values, 20, 100) == pytest.approx(4.0, abs=0.5)
    assert math.isnan(linear_change(steps, values, 200, 300))
    pd.DataFrame({"step": steps, "grpo": values, "dr": 40 + noise}).to_csv(
        tmp_path / checks.curve_file("x", "train/len"), index=False)
    claim = claims.Claim.model_validate({
        "claim": "c", "reference": "r", "sweeps": ["sweep.yaml"], "curves": ["train/len"],
        "checks": [{"says": "s", "op": ">", "left": {"method": "grpo", "change": "train/len",
                                                    "window": [20, 100]},
                    "right": {"method": "dr", "change": "train/len", "window": [20, 100]}}]})
    [outcome] = checks.evaluate(claim, tmp_path, ["x"], quick=False)
    assert outcome.passed and "change of grpo's train/len over steps 20-100" in outcome.detail


def test_a_credit_reference_reads_its_estimators_row_at_g_and_n(tmp_path):
    """A check on a credit study reads the row of its table at the estimator, G and N."""
    (tmp_path / checks.credit_file("study")).write_text(
        "estimator,G,N,spearman\ngrpo,2,256,0.1\ngigpo,2,256,0.3\ngigpo,8,256,0.2\n")
    claim = claims.Claim.model_validate({
        "claim": "c", "reference": "r", "sweeps": ["sweep.yaml"], "checks": [
            {"says": "s", "op": ">", "right": {"method": "grpo", "column": "spearman",
                                               "credit": "study", "G": 2, "N": 256},
             "left": {"method": "gigpo", "column": "spearman", "credit": "study", "G": 8,
                      "N": 256}},
            {"says": "absent", "op": ">", "right": 0,
             "left": {"method": "gigpo", "column": "spearman", "credit": "study", "G": 4,
                      "N": 256}}]})
    first, absent = checks.evaluate(claim, tmp_path, ["x"], quick=False)
    assert (first.left, first.right, first.passed) == (0.2, 0.1, True)
    assert not absent.passed and "has no gigpo.spearman (credit study, G=4" in absent.detail


def write_claim(folder, text: str):
    folder.mkdir(exist_ok=True)
    (folder / "sweep.yaml").write_text("name: x\n")
    (folder / "claim.yaml").write_text(text)


BASE = """claim: c
reference: r
sweeps: [sweep.yaml]
"""


@pytest.mark.parametrize(("body", "key", "says"), [
    ("checks:\n  - {says: s, left: {method: a, slope: train/loss, window: [1, 10]}, "
     "op: '<=', right: -1}\n", "", "needs it under curves"),
    ("checks:\n  - {says: s, left: {method: a, column: iqm}, op: '=<', right: 1}\n",
     "checks[0].op", "allowed: <, <=, >, >=, =="),
    ("checks:\n  - {says: s, left: {method: a}, op: '<=', right: 1}\n", "checks[0].left",
     "one of column, slope or change"),
    ("curves: [train/x]\nchecks:\n  - {says: s, left: {method: a, change: train/x}, "
     "op: '>', right: 0}\n", "checks[0].left", "a change needs window"),
    ("quick: {other.yaml: {}}\nchecks:\n  - {says: s, left: {method: a, column: iqm}, "
     "op: '<=', right: 1}\n", "", "not among sweeps"),
    ("checks: []\n", "checks", "at least 1"),
    ("checks:\n  - {says: s, left: {method: a, column: spearman, credit: c, G: 2}, "
     "op: '<=', right: 1}\n", "checks[0].left", "needs credit, G, N and a column"),
    ("credit: [absent.yaml]\nchecks:\n  - {says: s, left: {method: a, column: iqm}, "
     "op: '<=', right: 1}\n", "credit", "absent.yaml: no such file"),
])
def test_a_bad_claim_is_one_message_naming_the_file_and_key(tmp_path, body, key, says):
    write_claim(tmp_path, BASE + body)
    with pytest.raises(SpecError) as err:
        claims.load(tmp_path)
    assert str(tmp_path / "claim.yaml") in str(err.value)
    assert key in str(err.value) and says in str(err.value)


def test_an_unknown_reproduction_or_a_foreign_out_folder_is_refused(capsys, tmp_path):
    assert cli.main(["reproduce", "tyurin-tabel1"]) == cli.EXIT_BAD_INPUT
    assert "did you mean 'tyurin-table1'" in capsys.readouterr().err
    (tmp_path / "tyurin-table1" / "work").mkdir(parents=True)
    assert cli.main(["reproduce", "tyurin-table1", "--quick", "--out",
                     str(tmp_path)]) == cli.EXIT_BAD_INPUT
    assert "was not made by `workbench reproduce`" in capsys.readouterr().err
    assert list((tmp_path / "tyurin-table1").iterdir()) == [tmp_path / "tyurin-table1" / "work"]
    (tmp_path / "file").write_text("")
    for out in ("", str(tmp_path / "file")):  # the parser refuses an empty one (SystemExit)
        try:
            code = cli.main(["reproduce", "--quick", "--out", out])
        except SystemExit as stop:
            code = stop.code
        assert code == cli.EXIT_BAD_INPUT
        assert "--out" in capsys.readouterr().err
