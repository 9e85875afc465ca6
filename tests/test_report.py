"""The report of a real small sweep: every file, every method, provenance = the store."""

import json

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli, tiny_spec
from workbench import cli, engine, spec

FIGURES = ["final", "profiles", "best_of_k", "sensitivity_tiny", "curves_train-loss_step",
           "curves_train-loss_cost-samples", "curves_train-loss_cost-grad_evals",
           "curves_train-loss_time-wall_seconds", "curves_train-accuracy_step"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    document = tiny_spec(
        methods={"step_size": ["constant", "polyak", "normalized_lr"]}, trials=4, seeds=3,
        storage=f"sqlite:///{folder / 'store.db'}",
        task={"name": "logreg", "params": {"n_samples": 64, "dim": 5, "batch_size": 16}},
        report={"metrics": ["train/loss", "train/accuracy"],
                "target": {"metric": "train/accuracy", "value": 0.9}})
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    engine.run_sweep(spec.load(path), device="cpu")
    return folder, path


def test_report_writes_every_figure_and_table(swept, capsys):
    folder, path = swept
    out = folder / "out"
    assert cli.main(["report", str(path), "--out", str(out)]) == 0
    for figure in FIGURES:
        for suffix in (".png", ".pdf", ".json"):
            assert (out / f"{figure}{suffix}").exists(), figure + suffix
    for suffix in (".md", ".tex", ".html", ".csv", ".json"):
        assert (out / f"table_tiny{suffix}").exists()
    assert (out / "poi_tiny.md").exists() and (out / "index.html").exists()
    table = (out / "table_tiny.md").read_text()
    for method in ("constant", "polyak", "normalized_lr"):
        assert f"| {method}" in table
        assert method in (out / "table_tiny.tex").read_text().replace("\\_", "_")
    assert "normalized_lr †" in table  # reconstructed from the paper's text
    assert table.count("**") >= 4  # best IQM, best mean (and steps to target) in bold
    assert "steps to target" in table
    index = (out / "index.html").read_text()
    assert all(f"{figure}.png" in index for figure in FIGURES)


def test_provenance_lists_exactly_the_runs_in_the_store(swept):
    folder, path = swept
    out = folder / "out2"
    assert cli.main(["report", str(path), "--out", str(out)]) == 0
    client = MlflowClient(f"sqlite:///{folder / 'store.mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny").experiment_id
    in_store = {r.info.run_id for r in client.search_runs([experiment], max_results=10_000)}
    whole = json.loads((out / "provenance.json").read_text())
    assert set(whole["run_ids"]) == in_store
    assert whole["git_commits"] and whole["statistics"]["aggregate"] == "iqm"
    final = json.loads((out / "final.json").read_text())
    seeds = {r.info.run_id for r in client.search_runs(
        [experiment], "tags.`workbench.kind` = 'seed'", max_results=10_000)}
    assert set(final["run_ids"]) <= seeds and len(final["run_ids"]) == 3 * 3
    assert final["query"]["experiments"] == {"tiny": experiment}


def test_a_report_spec_draws_several_sweeps(swept, tmp_path):
    folder, path = swept
    other = yaml.safe_load(path.read_text())
    other["name"] = "tiny2"
    other["methods"] = {"step_size": ["constant"]}
    other_path = folder / "tiny2.yaml"
    other_path.write_text(yaml.safe_dump(other))
    engine.run_sweep(spec.load(other_path), device="cpu")
    report_spec = tmp_path / "both.yaml"
    report_spec.write_text(yaml.safe_dump({"name": "both", "sweeps": [str(path),
                                                                      str(other_path)]}))
    out = tmp_path / "out"
    result = run_cli("report", report_spec, "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (out / "table_tiny.md").exists() and (out / "table_tiny2.md").exists()
    assert (out / "final.png").exists()


def test_report_of_a_missing_store_says_so(tmp_path, write_spec):
    path = write_spec(tiny_spec(storage=f"sqlite:///{tmp_path / 'none.db'}"))
    result = run_cli("report", path, cwd=tmp_path)
    assert result.returncode == 1 and "no store at" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "sweeps": ["nope.yaml"]}))
    result = run_cli("report", bad, cwd=tmp_path)
    assert result.returncode == 2 and "sweeps[0]" in result.stderr


def test_across_sweeps_scores_are_normalised_and_stratified(swept, tmp_path):
    from workbench import report

    folder, path = swept
    other = yaml.safe_load(path.read_text())
    other["name"] = "tiny3"
    other_path = folder / "tiny3.yaml"
    other_path.write_text(yaml.safe_dump(other))
    engine.run_sweep(spec.load(other_path), device="cpu")
    both = report.ReportSpec("both", [spec.load(path), spec.load(other_path)],
                             spec.load(path).spec.report)
    built = report.Report(both, tmp_path / "out")
    pooled = built.across_tasks()
    assert set(pooled) == {"constant", "polyak", "normalized_lr"}
    for scores, strata in pooled.values():
        assert len(scores) == 6 and sorted(set(strata)) == ["tiny", "tiny3"]
        assert ((scores >= 0) & (scores <= 1)).all()
    best = max(s.max() for s, _ in pooled.values())
    assert best == 1.0
