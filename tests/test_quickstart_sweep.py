"""The quickstart sweep, for real, into a temporary SQLite store."""

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.conftest import ROOT, run_cli, study_name
from workbench import registry

pytestmark = pytest.mark.slow

STUDIES = ["quickstart.step_size=constant", "quickstart.step_size=polyak",
           "quickstart.step_size=armijo"]  # titles: SWEEP.SLOT=LABEL


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    folder = tmp_path_factory.mktemp("quickstart")
    db = folder / "store.db"
    args = ("sweep", ROOT / "sweeps" / "quickstart.yaml", "--storage", f"sqlite:///{db}",
            "--quiet")
    first = run_cli(*args, cwd=folder)
    assert first.returncode == 0, first.stderr
    return folder, db, args, first


def all_runs(client, name):
    experiment = client.get_experiment_by_name(name)
    return client.search_runs([experiment.experiment_id], max_results=5000)


def test_each_study_holds_its_number_of_finished_trials(quickstart):
    _, db, _, first = quickstart
    storage = f"sqlite:///{db}"
    for title in STUDIES:
        name = study_name(storage, title)
        trials = optuna.load_study(study_name=name, storage=storage).get_trials()
        assert len(trials) == 10, name
        assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
        assert sum(t.state == TrialState.COMPLETE for t in trials) >= 4  # startup trials
    assert "10/10" in first.stdout


def test_mlflow_holds_one_run_per_trial_and_seed_with_every_step(quickstart):
    _, db, _, _ = quickstart
    client = MlflowClient(f"sqlite:///{db.with_name('store.mlflow.db')}")
    runs = all_runs(client, "quickstart")
    by_id = {r.info.run_id: r for r in runs}
    storage = f"sqlite:///{db}"
    for title in STUDIES:
        study = optuna.load_study(study_name=study_name(storage, title), storage=storage)
        study_run = by_id[study.user_attrs["mlflow_run_id"]]
        assert study_run.data.tags["workbench.kind"] == "study"
        for trial in study.get_trials():
            trial_run = by_id[trial.user_attrs["mlflow_run_id"]]
            assert trial_run.data.tags["mlflow.parentRunId"] == study_run.info.run_id
            assert trial_run.data.tags["optuna.trial_number"] == str(trial.number)
            seeds = [r for r in runs if r.data.tags.get("mlflow.parentRunId")
                     == trial_run.info.run_id]
            expected_status = {TrialState.COMPLETE: "FINISHED", TrialState.PRUNED: "KILLED"}
            assert trial_run.info.status == expected_status[trial.state]
            if trial.state == TrialState.COMPLETE:
                assert sorted(int(r.data.tags["workbench.seed"]) for r in seeds) == [0, 1, 2]
                assert trial_run.data.metrics["objective"] == pytest.approx(trial.value)
            else:
                assert trial_run.data.tags["workbench.prune_reason"] in ("pruned", "diverged")
                assert 1 <= len(seeds) <= 3
            for seed_run in seeds:
                assert seed_run.data.params["method.step_size"] == title.split("=")[1]
                for key, value in trial.params.items():
                    assert float(seed_run.data.params[key]) == pytest.approx(value)
                if seed_run.info.status == "FINISHED":
                    history = client.get_metric_history(seed_run.info.run_id, "train/loss")
                    assert [m.step for m in history] == list(range(201))
                    steps = client.get_metric_history(seed_run.info.run_id, "cost/grad_evals")
                    assert [m.value for m in steps] == [float(s) for s in range(201)]


def test_runs_carry_provenance_and_readable_names(quickstart):
    _, db, _, _ = quickstart
    client = MlflowClient(f"sqlite:///{db.with_name('store.mlflow.db')}")
    seed_run = next(r for r in all_runs(client, "quickstart")
                    if r.data.tags["workbench.kind"] == "seed" and r.info.status == "FINISHED")
    tags = seed_run.data.tags
    for key in ("git.commit", "git.dirty", "version.torch", "version.mlflow",
                "version.optuna", "device", "workbench.seed", "optuna.study_name",
                "optuna.trial_id", "workbench.fidelity"):
        assert key in tags, key
    method = tags["workbench.method"]
    assert seed_run.info.run_name.startswith(f"{method} t")
    assert f"s{tags['workbench.seed']} | loss=" in seed_run.info.run_name
    trial_run = client.get_run(tags["mlflow.parentRunId"])
    config = client.download_artifacts(trial_run.info.run_id, "config.yaml")
    assert "step_size" in open(config).read()


def test_running_again_adds_no_trial_and_no_run(quickstart):
    folder, db, args, _ = quickstart
    client = MlflowClient(f"sqlite:///{db.with_name('store.mlflow.db')}")
    runs_before = len(all_runs(client, "quickstart"))
    again = run_cli(*args, cwd=folder)
    assert again.returncode == 0, again.stderr
    storage = f"sqlite:///{db}"
    for title in STUDIES:
        study = optuna.load_study(study_name=study_name(storage, title), storage=storage)
        assert len(study.get_trials()) == 10
    assert len(all_runs(client, "quickstart")) == runs_before


def readme_report_files(sweep: str) -> list[str]:
    """The report files README's "Where results go" names, for ``sweep`` (``{a,b}``
    expanded, SWEEP and the quickstart's first curve filled in)."""
    import re

    text = (ROOT / "README.md").read_text()
    section = text[text.index("- Reports: `reports/out/SWEEP/`"):]
    section = section[: section.index("\n\n")]
    names = []
    for pattern in re.findall(r"`([\w.{},-]+)`", section):
        pattern = pattern.replace("SWEEP", sweep)
        if "METRIC" in pattern or pattern.startswith(".") or "." not in pattern:
            continue
        stem, _, suffixes = pattern.partition(".")
        for suffix in suffixes.strip("{}").split(","):
            names.append(f"{stem}.{suffix}")
    assert len(names) >= 15, names
    return names


def test_status_and_report_read_the_store(quickstart):
    folder, db, _, _ = quickstart
    spec = ROOT / "sweeps" / "quickstart.yaml"
    status = run_cli("status", spec, "--storage", f"sqlite:///{db}", cwd=folder)
    assert status.returncode == 0 and status.stdout.count("10/10") == 3
    out = folder / "report"
    report = run_cli("report", spec, "--storage", f"sqlite:///{db}", "--out", out, cwd=folder)
    assert report.returncode == 0, report.stderr
    files = sorted(path.name for path in out.iterdir())
    assert report.stdout.startswith(f"{len(files)} files in ")  # what it says it wrote
    for name in readme_report_files("quickstart"):  # every file README names
        assert name in files, (name, files)
    table = (out / "table_quickstart.csv").read_text().splitlines()
    assert table[0].startswith("method,") and len(table) == 4
    for figure in ("final", "profiles", "best_of_k", "curves_train-loss_step",
                   "curves_train-loss_cost-grad_evals", "sensitivity_quickstart"):
        assert (out / f"{figure}.png").stat().st_size > 10_000, figure
        assert (out / f"{figure}.pdf").exists() and (out / f"{figure}.json").exists()
    markdown = (out / "table_quickstart.md").read_text()
    # constant's best lr sits at the top of its search range [0.001, 10]: flagged, and said why
    constant = next(line for line in markdown.splitlines() if line.startswith("| constant"))
    assert "(edge: high end of 0.001-10)" in constant, constant
    assert "'edge': the best value lies within 5% of an end of its search range" in markdown
    for name in ("constant", "polyak", "armijo"):
        marked = registry.get("step_size", name).fidelity == "reconstructed"
        assert (f"| {name} † |" in markdown) == marked, name
