"""Studies keyed by what determined them: the fingerprint, superseded studies, studies shared
between sweeps, held-out evaluation seeds and the Wilcoxon pruner, on real stores."""

from __future__ import annotations

import importlib
import json

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.conftest import tiny_spec
from workbench import registry, report
from workbench.common import fingerprint
from workbench.common.validation import SpecError
from workbench.engine.status import sweep_status
from workbench.engine.studies import make_pruner, setup
from workbench.engine.sweep_run import run_sweep
from workbench.engine.workers import resolve_device
from workbench.spec import sweep as spec
from workbench.spec.plan import Sweep
from workbench.spec.resolve import evaluation_plan
from workbench.spec.schema import EvaluationSpec
from workbench.store import runs
from workbench.store.database import Store

PLUGIN = "fp_plugin"
MY_RULE = '''"""A constant step scaled by helpers.SCALE: a method in a package of its own."""

from typing import TYPE_CHECKING

from fp_plugin import helpers
from methods.step_size.constant import Constant
from workbench.registry import register

if TYPE_CHECKING:
    from fp_plugin import unused  # never imported at run time


@register
class MyRule(Constant):
    name = "my_rule_fp"

    def step_size_cap(self):
        return self.hp.lr * helpers.SCALE
'''


class Plugin:
    """The package ``fp_plugin`` under a temporary folder: my_rule.py imports helpers.py;
    unused.py is imported only for type checking; README.md is not code."""

    def __init__(self, root):
        self.folder = root / PLUGIN
        self.folder.mkdir(parents=True)
        for name, text in (("__init__.py", ""), ("helpers.py", "SCALE = 1.0\n"),
                           ("unused.py", "X = 1\n"), ("README.md", "notes\n"),
                           ("my_rule.py", MY_RULE)):
            (self.folder / name).write_text(text)
        self.module = importlib.import_module(f"{PLUGIN}.my_rule")

    def edit(self, name: str, extra: str = "\n# edited\n") -> None:
        """Change a file's content (and run the new code, as a new process would)."""
        path = self.folder / name
        path.write_text(path.read_text() + extra)
        if name == "my_rule.py":
            self.module = importlib.reload(self.module)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path / "plugin"))
    yield Plugin(tmp_path / "plugin")
    registry.forget_module(PLUGIN)


def load(write_spec, document: dict, name: str = "spec.yaml") -> Sweep:
    return spec.load(write_spec(document, name))


def fingerprints(sweep: Sweep) -> dict[str, str]:
    return {plan.label: plan.fingerprint for plan in sweep.studies}


# ------------------------------------------------------------------------------ the document


CHANGES = {  # what a user edits -> the fingerprint entry it changes
    "budget": ({"budget": {"steps": 10}}, "budget.steps 20 → 10"),
    "task parameter": ({"task": {"name": "logreg", "params": {"n_samples": 32, "dim": 5}}},
                       "task.params.n_samples 64 → 32"),
    "objective": ({"objective": {"at": "best"}}, 'objective.at final → best'),
    "sampler": ({"sampler": {"name": "random", "seed": 1}}, "sampler.seed 0 → 1"),
    "pruner": ({"pruner": {"name": "median"}}, "pruner.name none → median"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_that_can_change_a_number_changes_every_fingerprint(change, write_spec,
                                                                      plugin):
    document = tiny_spec(methods={"step_size": ["constant", "my_rule_fp"]})
    before = load(write_spec, document)
    assert fingerprints(load(write_spec, document)) == fingerprints(before)  # stable
    edit, said = CHANGES[change]
    after = load(write_spec, {**document, **edit})
    for old, new in zip(before.studies, after.studies, strict=True):
        assert old.fingerprint != new.fingerprint and old.name != new.name
        assert said in fingerprint.changes(old.document, new.document)


def test_a_search_range_or_fixed_value_changes_only_its_method(write_spec, plugin):
    document = tiny_spec(methods={"step_size": ["constant", "my_rule_fp"]})
    before = fingerprints(load(write_spec, document))
    ranged = {"step_size": [{"name": "constant", "search_space": {
        "lr": {"low": 0.01, "high": 1.0, "log": True}}}, "my_rule_fp"]}
    after = load(write_spec, {**document, "methods": ranged})
    assert fingerprints(after)["constant"] != before["constant"]
    assert fingerprints(after)["my_rule_fp"] == before["my_rule_fp"]
    assert "methods.step_size.space.lr" in fingerprint.changes(
        load(write_spec, document).studies[0].document, after.studies[0].document)
    fixed = {"step_size": [{"name": "constant", "fixed": {"momentum": 0.5}}, "my_rule_fp"]}
    assert fingerprints(load(write_spec, {**document, "methods": fixed}))["constant"] != \
        before["constant"]


def test_what_only_counts_or_shows_results_leaves_the_fingerprint_alone(write_spec, plugin):
    document = tiny_spec(methods={"step_size": ["constant", "my_rule_fp"]})
    before = fingerprints(load(write_spec, document))
    for edit in ({"trials": 7}, {"max_failed_trials": 9}, {"retry_crashed": False},
                 {"description": "another text"}, {"report": {"aggregate": "mean"}},
                 {"evaluation": {"seeds": 4}}, {"name": "renamed"},
                 {"seeds": 3}, {"seeds": [5, 1]}):  # seeds: tests/test_seed_reuse.py
        assert fingerprints(load(write_spec, {**document, **edit})) == before, edit
    labelled = {"step_size": [{"name": "constant", "label": "C"}, "my_rule_fp"]}
    assert set(fingerprints(load(write_spec, {**document, "methods": labelled})).values()) \
        == set(before.values())


def test_the_code_is_every_module_the_run_imports_and_nothing_else(write_spec, plugin):
    document = tiny_spec(methods={"step_size": ["constant", "my_rule_fp"]})
    sweep = load(write_spec, document)
    code = sweep.studies[1].document["code"]
    for module in (f"{PLUGIN}.my_rule", f"{PLUGIN}.helpers", PLUGIN,
                   "methods.step_size.constant", "workbench.engine.trial",
                   "workbench.testbeds.optimisation.logreg", "workbench.common.seeds"):
        assert module in code, module
    for module in (f"{PLUGIN}.unused", "workbench.report", "workbench.cli.main",
                   "workbench.testbeds.rlvr.model", "methods.step_size.polyak"):
        assert module not in code, module
    assert set(sweep.studies[1].document["versions"]) >= {"torch", "numpy", "optuna"}
    before = fingerprints(sweep)
    plugin.edit("README.md")
    plugin.edit("unused.py")
    assert fingerprints(load(write_spec, document)) == before
    plugin.edit("helpers.py", "\nSCALE = 2.0\n")
    after = load(write_spec, document)
    assert fingerprints(after)["constant"] == before["constant"]
    assert fingerprints(after)["my_rule_fp"] != before["my_rule_fp"]
    assert "code: fp_plugin.helpers" in fingerprint.changes(sweep.studies[1].document,
                                                            after.studies[1].document)


def _imports_by_ast(text: str) -> set:
    """The import statements ``ast`` finds, outside ``if TYPE_CHECKING:`` blocks."""
    import ast

    found = set()

    def walk(body):
        for node in body:
            test = getattr(node, "test", None)
            if isinstance(node, ast.If) and getattr(test, "id", getattr(test, "attr", None)) \
                    == "TYPE_CHECKING":
                walk(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update((alias.name, 0, ()) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                found.add((node.module or "", node.level, tuple(a.name for a in node.names)))
            for field in ("body", "orelse", "finalbody", "handlers"):
                if isinstance(getattr(node, field, None), list):
                    walk(getattr(node, field))

    walk(ast.parse(text).body)
    return found


def test_the_line_scanner_finds_every_import_ast_finds_in_the_project():
    from tests.conftest import ROOT

    files = [*(ROOT / "workbench").rglob("*.py"), *(ROOT / "methods").rglob("*.py")]
    assert len(files) > 100
    for path in files:
        text = path.read_text()
        assert _imports_by_ast(text) <= set(fingerprint.imports(text)), path
    tricky = ("from . import (a,\n    b as c)  # x\nimport os, sys as system\n"
              "if TYPE_CHECKING:\n    import hidden\nelse:\n    import shown\n"
              "def f():\n    from .. x import y\n")
    assert fingerprint.imports(tricky.replace(".. x", "..x")) == [
        ("", 1, ("a", "b")), ("os", 0, ()), ("sys", 0, ()), ("shown", 0, ()),
        ("x", 2, ("y",))]


def test_two_entries_that_are_the_same_study_are_refused(write_spec):
    document = tiny_spec(methods={"step_size": [{"name": "constant", "label": "A"},
                                                {"name": "constant", "label": "B"}]})
    with pytest.raises(SpecError, match="step_size=A and step_size=B are the same study"):
        load(write_spec, document)


def test_held_out_seeds_are_disjoint_from_the_tuning_seeds(write_spec):
    plan = evaluation_plan(EvaluationSpec(seeds=4, first_seed=1), [0, 1, 2, 5])
    assert plan.seeds == [3, 4, 6, 7] and plan.rule == "fixed"
    adaptive = load(write_spec, tiny_spec(evaluation={"seeds": {"min": 3, "max": 6}}))
    assert adaptive.evaluation.seeds == [1000, 1001, 1002, 1003, 1004, 1005]
    assert (adaptive.evaluation.first, adaptive.evaluation.step) == (3, 3)
    with pytest.raises(SpecError, match="evaluation.seeds"):
        load(write_spec, tiny_spec(evaluation={"seeds": {"min": 6, "max": 3}}))


# ------------------------------------------------------------------------- sweeps for real


def sweep_once(sweep: Sweep) -> list[str]:
    notes: list[str] = []
    run_sweep(sweep, device="cpu", say=notes.append)
    return notes


def store_runs(sweep: Sweep, name: str | None = None) -> list:
    client = Store.from_url(sweep.storage).mlflow_client()
    experiment = client.get_experiment_by_name(name or sweep.name)
    return client.search_runs([experiment.experiment_id], max_results=10_000)


def trials_of(sweep: Sweep, plan) -> list:
    return optuna.load_study(study_name=plan.name, storage=sweep.storage).get_trials()


def build_report(sweep: Sweep, tmp_path, **ref) -> str:
    out = tmp_path / f"report-{sweep.name}"
    report.build(report.SweepRef(sweep.name, sweep.storage, **ref), out)
    return (out / f"table_{sweep.name}.md").read_text()


EDITS = {  # change -> (edit, what the note says); method source: an edit to my_rule.py
    "budget": ({"budget": {"steps": 10}}, "budget.steps 20 → 10"),
    "task parameter": ({"task": {"name": "logreg", "params": {"n_samples": 32, "dim": 5}}},
                       "task.params.n_samples 64 → 32"),
    "search range": ({"methods": {"step_size": [{"name": "my_rule_fp", "search_space": {
        "lr": {"low": 0.01, "high": 1.0, "log": True}}}]}}, "methods.step_size.space.lr"),
    "method source": ({}, "code: fp_plugin.my_rule"),
}


@pytest.mark.slow
@pytest.mark.parametrize("change", sorted(EDITS))
def test_a_changed_sweep_starts_a_new_study_and_supersedes_the_old(change, write_spec, plugin,
                                                                   tmp_path):
    document = tiny_spec(methods={"step_size": ["my_rule_fp"]}, trials=2,
                         storage=f"sqlite:///{tmp_path / 'store.db'}")
    first = load(write_spec, document)
    assert sweep_once(first) == []
    count = len(store_runs(first))
    assert sweep_once(load(write_spec, document)) == []  # unchanged: nothing added
    assert len(store_runs(first)) == count
    edit, said = EDITS[change]
    if change == "method source":
        plugin.edit("my_rule.py")
    second = load(write_spec, {**document, **edit})
    notes = sweep_once(second)
    (old, new) = first.studies[0], second.studies[0]
    assert len(notes) == 1 and notes[0].startswith(f"my_rule_fp: {said}") and notes[0].endswith(
        f"; starting a new study {new.name}"), notes
    assert len(trials_of(second, new)) == 2 and len(trials_of(first, old)) == 2
    states = {s.fingerprint: s for s in sweep_status(second, Store.from_url(
        second.storage))}
    assert states[new.fingerprint].state == "up to date"
    assert states[old.fingerprint].state == "superseded"
    assert said in states[old.fingerprint].note
    study_runs = {r.data.tags[runs.FINGERPRINT]: r for r in store_runs(second)
                  if r.data.tags.get(runs.KIND) == runs.STUDY}
    assert study_runs[old.fingerprint].data.tags[runs.STUDY_STATE] == runs.SUPERSEDED
    assert study_runs[new.fingerprint].data.tags[runs.STUDY_STATE] == runs.CURRENT
    table = build_report(second, tmp_path)
    assert "superseded" not in table and "| my_rule_fp |" in table
    both = build_report(second, tmp_path, include_superseded=True)
    assert f"my_rule_fp (superseded {old.fingerprint[:7]})" in both and said in both


@pytest.mark.slow
def test_going_back_to_an_earlier_spec_returns_to_its_study(write_spec, plugin, tmp_path):
    document = tiny_spec(methods={"step_size": ["constant"]}, trials=2,
                         storage=f"sqlite:///{tmp_path / 'store.db'}")
    first = load(write_spec, document)
    sweep_once(first)
    sweep_once(load(write_spec, {**document, "budget": {"steps": 10}}))
    count = len(store_runs(first))
    notes = sweep_once(load(write_spec, document))
    assert notes == [f"constant: budget.steps 10 → 20; returning to its earlier study "
                     f"{first.studies[0].name}"]
    assert len(store_runs(first)) == count  # its trials were all there
    statuses = sweep_status(first, Store.from_url(first.storage))
    assert [s.state for s in statuses] == ["up to date", "superseded"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_second_sweep_reuses_the_first_ones_studies_and_reruns_only_what_changed(
        backend, write_spec, plugin, tmp_path, request, monkeypatch):
    """Sweep A compares three methods; sweep B is A plus a fourth: B runs only the fourth
    method's study and its report shows all four; an edit to the fourth's file reruns only
    its study."""
    monkeypatch.chdir(tmp_path)  # a PostgreSQL store's artifacts go to ./DB-artifacts
    storage = (f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite"
               else request.getfixturevalue("postgres").new_database())
    baselines = ["constant", "polyak", "armijo"]
    a = load(write_spec, tiny_spec(name="sweep-a", storage=storage,
                                   methods={"step_size": baselines}), "a.yaml")
    b_document = tiny_spec(name="sweep-b", storage=storage,
                           methods={"step_size": [*baselines, "my_rule_fp"]})
    sweep_once(a)
    notes = sweep_once(load(write_spec, b_document, "b.yaml"))
    assert sorted(notes) == sorted(f"{label}: reusing study {plan.name}, run by another sweep"
                                   for label, plan in zip(baselines, a.studies, strict=True))
    b = load(write_spec, b_document, "b.yaml")
    for plan in a.studies:  # A's trials only, once each
        assert len(trials_of(a, plan)) == 3
    assert len(trials_of(b, b.studies[3])) == 3
    ran_for_b = {r.data.tags[runs.STUDY_NAME] for r in store_runs(b, "sweep-a") +
                 store_runs(b) if r.data.tags.get(runs.SWEEP) == "sweep-b"
                 and r.data.tags.get(runs.KIND) in (runs.TRIAL, runs.SEED)}
    assert ran_for_b == {b.studies[3].name}
    table = build_report(b, tmp_path)
    for label in [*baselines, "my_rule_fp"]:
        assert f"| {label} |" in table and "3/3" in table.split(f"| {label} |")[1].split("\n")[0]

    plugin.edit("my_rule.py")
    edited = load(write_spec, b_document, "b.yaml")
    notes = sweep_once(edited)
    assert notes == [f"my_rule_fp: code: {PLUGIN}.my_rule; starting a new study "
                     f"{edited.studies[3].name}"]
    for plan in a.studies:
        assert len(trials_of(a, plan)) == 3
    assert [p.fingerprint for p in edited.studies[:3]] == [p.fingerprint for p in a.studies]
    assert len(trials_of(edited, edited.studies[3])) == 3
    assert len(trials_of(b, b.studies[3])) == 3  # the old study stays in the store


# -------------------------------------------------------------------- held-out evaluation


@pytest.mark.slow
def test_held_out_seeds_evaluate_each_best_trial_and_the_report_shows_them(write_spec,
                                                                           tmp_path):
    document = tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}", trials=3,
                         evaluation={"seeds": 3, "first_seed": 1})
    sweep = load(write_spec, document)
    sweep_once(sweep)
    every = store_runs(sweep)
    by_id = {r.info.run_id: r for r in every}
    held_out = [r for r in every if r.data.tags.get(runs.KIND) == runs.EVALUATION]
    assert len(held_out) == 2 * 3
    for plan in sweep.studies:
        study = optuna.load_study(study_name=plan.name, storage=sweep.storage)
        best = study.best_trial
        mine = [r for r in held_out if r.data.tags[runs.STUDY_NAME] == plan.name]
        assert sorted(int(r.data.tags[runs.SEED_TAG]) for r in mine) == [2, 3, 4]
        assert not {2, 3, 4} & set(sweep.seeds)
        for run in mine:
            assert run.data.tags[runs.EVALUATES] == str(best.number)
            assert run.data.tags["mlflow.parentRunId"] == best.user_attrs["mlflow_run_id"]
            assert by_id[run.data.tags["mlflow.parentRunId"]].data.tags[runs.KIND] == runs.TRIAL
            assert run.info.status == "FINISHED" and "objective" in run.data.metrics
            for key, value in best.params.items():
                assert float(run.data.params[key]) == pytest.approx(value)
    assert sweep_once(sweep) == [] and len(store_runs(sweep)) == len(every)  # nothing twice
    table = build_report(sweep, tmp_path)
    assert "best of 3 trials chosen on seeds 0, 1; shown on 3 held-out seeds (2-4)" in table
    csv = (tmp_path / "report-tiny" / "table_tiny.csv").read_text()
    assert csv.count(",held-out,") == 2
    provenance = json.loads((tmp_path / "report-tiny" / "final.json").read_text())
    assert {r.info.run_id for r in held_out} <= set(provenance["run_ids"])

    plain = load(write_spec, {**document, "name": "plain", "evaluation": None}, "plain.yaml")
    sweep_once(plain)
    assert "selection and reporting used the same seeds" in build_report(plain, tmp_path)


@pytest.mark.slow
def test_adaptive_held_out_seeds_stop_when_the_best_separates_or_at_the_maximum(write_spec,
                                                                                 tmp_path):
    document = tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}", trials=2,
                         evaluation={"seeds": {"min": 2, "max": 6, "step": 2}})
    sweep = load(write_spec, document)
    notes = sweep_once(sweep)
    client = Store.from_url(sweep.storage).mlflow_client()
    tags = client.get_experiment_by_name("tiny").tags
    outcome = json.loads(tags[runs.EVALUATION_OUTCOME])
    assert outcome["reason"] in ("separated", "maximum") and outcome["seeds"] in (2, 4, 6)
    held_out = [r for r in store_runs(sweep) if r.data.tags.get(runs.KIND) == runs.EVALUATION]
    assert len(held_out) == 2 * outcome["seeds"]
    rounds = [n for n in notes if "seeds next" in n]
    assert len(rounds) == outcome["seeds"] // 2 - 1
    table = build_report(sweep, tmp_path)
    assert f"shown on {outcome['seeds']} held-out seeds" in table
    assert ("separated from the second's" in table)
    if outcome["reason"] == "maximum":
        assert "still overlap at the maximum" in table


@pytest.mark.slow
def test_the_wilcoxon_pruner_sees_one_value_per_seed_in_the_spec_order(write_spec, tmp_path):
    document = tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}", seeds=[4, 2, 7],
                         trials=4, methods={"step_size": ["constant"]},
                         pruner={"name": "wilcoxon", "startup_seeds": 1})
    sweep = load(write_spec, document)
    sweep_once(sweep)
    objective = {(r.data.tags["optuna.trial_number"], int(r.data.tags[runs.SEED_TAG])):
                 r.data.metrics["objective"] for r in store_runs(sweep)
                 if r.data.tags.get(runs.KIND) == runs.SEED and r.info.status == "FINISHED"}
    for trial in trials_of(sweep, sweep.studies[0]):
        assert trial.state in (TrialState.COMPLETE, TrialState.PRUNED)
        for step, value in trial.intermediate_values.items():
            assert value == pytest.approx(objective[(str(trial.number), [4, 2, 7][step])])
        if trial.state == TrialState.COMPLETE:
            assert sorted(trial.intermediate_values) == [0, 1, 2]
    assert isinstance(make_pruner(sweep), optuna.pruners.WilcoxonPruner)


def test_status_names_each_study_state_and_what_changed(write_spec, tmp_path):
    """``workbench status`` on a store the sweep has not reached yet, and the CLI's columns."""
    from tests.conftest import run_cli

    path = write_spec(tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}"))
    result = run_cli("status", path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[1]
    assert header.split()[:4] == ["study", "state", "fingerprint", "done"]
    assert result.stdout.count("not started") == 2
    sweep = spec.load(path)
    assert all(plan.fingerprint[:fingerprint.SHORT] in result.stdout for plan in sweep.studies)
    assert yaml.safe_load(path.read_text())["name"] == "tiny"


@pytest.mark.slow
def test_a_study_superseded_after_a_kill_leaves_no_run_running(write_spec, tmp_path):
    """A worker killed mid-trial, then the spec edited and the sweep run again: the old study
    is superseded, and what the kill left in it (a RUNNING trial, its RUNNING runs) is failed
    all the same, though no worker claims in that study again."""
    import subprocess
    import sys

    from workbench.engine.claims import Claims
    from workbench.engine.trial import TrialRunner
    from workbench.store.run_writer import RunWriter
    from workbench.store.sink import MetricSink

    document = tiny_spec(methods={"step_size": ["constant"]}, trials=2,
                         storage=f"sqlite:///{tmp_path / 'store.db'}")
    first = load(write_spec, document)
    store = Store.from_url(first.storage)
    setup(first, store)
    storage, client = store.optuna_storage(), store.mlflow_client()
    plan = first.studies[0]
    study = optuna.load_study(study_name=plan.name, storage=storage)
    trial = Claims(first, store, storage, client).claim(study, plan)
    with MetricSink(store.mlflow_url) as sink:  # its trial run and first seed run, opened
        runner = TrialRunner(first, client, RunWriter(client, store.mlflow_url), storage, sink,
                             resolve_device("cpu"), set())
        opened = runner._open(study, plan, trial)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    trial.set_user_attr("worker", {"host": trial.user_attrs["worker"]["host"],
                                   "pid": int(dead.stdout)})  # its worker is gone
    assert client.get_run(opened.run_id).info.status == "RUNNING"

    sweep_once(load(write_spec, {**document, "budget": {"steps": 10}}))
    (old,) = optuna.load_study(study_name=plan.name, storage=storage).get_trials()
    assert old.state == TrialState.FAIL
    assert client.get_run(opened.run_id).info.status == "FAILED"
    running = [r for r in store_runs(first) if r.info.status == "RUNNING"]
    assert running == []
