"""The report of a real small sweep: every file, every method, provenance = the store."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.conftest import ROOT, run_cli, tiny_spec
from tests.waiting import scaled
from workbench.cli import main as cli
from workbench.engine.sweep_run import run_sweep
from workbench.spec import sweep as spec

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
    run_sweep(spec.load(path), device="cpu")
    return folder, path


def test_report_writes_every_figure_and_table(swept, capsys):
    folder, path = swept
    out = folder / "out"
    assert cli.main(["report", str(path), "--out", str(out)]) == 0
    for figure in FIGURES:
        for suffix in (".png", ".pdf", ".csv", ".json"):
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
    assert all(f"<a href='{figure}.csv'>numbers (CSV)</a>" in index for figure in FIGURES)


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


def test_every_figure_has_the_numbers_it_draws_beside_it(swept):
    """``<figure>.csv`` beside every figure: the numbers recomputed from the store's values
    with ``workbench.stats``, the lines and points the figure draws, to the last bit."""
    import numpy as np
    import pandas as pd

    from workbench import report
    from workbench.report import data, figures
    from workbench.stats import aggregates as stats

    folder, _ = swept
    out = folder / "out-numbers"
    storage = f"sqlite:///{folder / 'store.db'}"
    written = report.build(report.SweepRef("tiny", storage), out)
    pngs = sorted(p for p in out.glob("*.png"))
    assert {p.stem for p in pngs} >= set(FIGURES)
    for png in pngs:  # the claims' figures (here target_) too
        assert png.with_suffix(".csv") in written, png.name
        files = json.loads(png.with_suffix(".json").read_text())["files"]
        assert f"{png.stem}.csv" in files and f"{png.stem}.pdf" in files, files

    def numbers(stem):  # exactly what was written: repr floats read back equal
        return pd.read_csv(out / f"{stem}.csv", engine="python")  # Python's float()

    client = MlflowClient(f"sqlite:///{folder / 'store.mlflow.db'}")
    d = data.read_sweep(report.SweepRef("tiny", storage))
    style = figures.Style(m.label for m in d.methods)
    low_loss, _ = d.bounds("train/loss")

    # final: each method's IQM and interval of its seeds' objectives as the store holds them
    final = numbers("final")
    for m in d.methods:
        seeds = final[(final["method"] == m.label) & (final["kind"] == "seed")]
        stored = np.array([client.get_run(r).data.metrics["objective"]
                           for r in seeds["run_id"]])
        assert len(stored) == 3 and (seeds["value"].to_numpy() == stored).all()
        (row,) = final[(final["method"] == m.label) & (final["kind"] == "aggregate")].itertuples()
        interval = stats.interval(stored, "iqm", 0.95, (low_loss, np.inf))
        assert (row.value, row.low, row.high, row.n) == (
            stats.aggregate(stored, "iqm"), interval.low, interval.high, 3)
        # curves: the IQM of the seeds' first and last losses, at the grid's ends
        curve = numbers("curves_train-loss_step")
        mine = curve[curve["method"] == m.label]
        for point, step in ((mine.iloc[0], 0), (mine.iloc[-1], 20)):
            assert point["x"] == step and point["n_seeds"] == 3
            at = np.array([[h.value for h in client.get_metric_history(r, "train/loss")
                            if h.step == step][0] for r in seeds["run_id"]])
            band = stats.interval(at, "iqm", 0.95, (low_loss, np.inf))
            assert point["centre"] == pytest.approx(stats.aggregate(at, "iqm"), rel=1e-12)
            assert (point["low"], point["high"]) == pytest.approx((band.low, band.high),
                                                                  rel=1e-12)
        # best_of_k: the expected best of k of its complete trials' stored objectives
        trials = client.search_runs([d.experiment], "tags.`workbench.kind` = 'trial' and "
                                    f"tags.`workbench.method` = '{m.label}' and "
                                    "attributes.status = 'FINISHED'")
        objectives = [t.data.metrics["objective"] for t in trials]
        best = numbers("best_of_k")
        assert best[best["method"] == m.label]["expected_best"].to_numpy() == pytest.approx(
            stats.expected_best_of_k(objectives, "minimize"), rel=1e-12)

    # what each figure draws is its CSV's numbers
    ax = figures.curves([d], "train/loss", "step", d.options, style).figure.axes[0]
    for line, m in zip(ax.lines, d.methods, strict=True):
        mine = curve[curve["method"] == m.label]
        assert (line.get_xdata() == mine["x"].to_numpy()).all()
        assert (line.get_ydata() == mine["centre"].to_numpy()).all()
    ax = figures.final([d], d.options, style).figure.axes[0]
    centres = final[final["kind"] == "aggregate"]["value"].to_numpy()
    assert [float(line.get_xdata()[0]) for line in ax.lines[::3]] == list(centres)
    ticks = np.concatenate([c.get_offsets()[:, 0] for c in ax.collections
                            if type(c).__name__ == "PathCollection"])
    assert sorted(ticks) == sorted(final[final["kind"] == "seed"]["value"])
    ax = figures.profiles([d], style).figure.axes[0]
    profile = numbers("profiles")
    for line, m in zip(ax.lines, d.methods, strict=True):
        mine = profile[profile["method"] == m.label]
        assert (line.get_xdata() == mine["tau"].to_numpy()).all()
        assert (line.get_ydata() == mine["fraction"].to_numpy()).all()
    ax = figures.best_of_k([d], d.options, style).figure.axes[0]
    for line, m in zip(ax.lines, d.methods, strict=True):
        assert (line.get_ydata() == best[best["method"] == m.label]["expected_best"]).all()
    sensitivity = numbers("sensitivity_tiny")
    axes = figures.sensitivity(d, style).figure.axes
    for ax, (method, name) in zip(axes, [(m.label, n) for m in d.methods for n in m.space],
                                  strict=False):
        done = sensitivity[(sensitivity["method"] == method)
                           & (sensitivity["hyperparameter"] == name)
                           & (sensitivity["status"] == "complete")]
        drawn = ax.collections[0].get_offsets()
        assert len(done) == 4 and (drawn[:, 0] == done["x"].to_numpy()).all()
        assert (drawn[:, 1] == done["objective"].to_numpy()).all()


def test_a_report_spec_draws_several_sweeps(swept, tmp_path):
    folder, path = swept
    other = yaml.safe_load(path.read_text())
    other["name"] = "tiny2"
    other["methods"] = {"step_size": ["constant"]}
    other_path = folder / "tiny2.yaml"
    other_path.write_text(yaml.safe_dump(other))
    run_sweep(spec.load(other_path), device="cpu")
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
    assert result.returncode == 2 and "no store at" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "x", "sweeps": ["nope.yaml"]}))
    result = run_cli("report", bad, cwd=tmp_path)
    assert result.returncode == 2 and "sweeps[0]" in result.stderr


def test_across_sweeps_scores_are_normalised_and_stratified(swept, tmp_path):
    from workbench import report
    from workbench.report import data

    folder, path = swept
    other = yaml.safe_load(path.read_text())
    other["name"] = "tiny3"
    other_path = folder / "tiny3.yaml"
    other_path.write_text(yaml.safe_dump(other))
    run_sweep(spec.load(other_path), device="cpu")
    sweeps = [spec.load(path), spec.load(other_path)]
    pooled = data.pooled_scores([data.read_sweep(report.SweepRef(s.name, s.storage),
                                                 sweeps[0].spec.report) for s in sweeps])
    assert set(pooled) == {"constant", "polyak", "normalized_lr"}
    for scores, strata in pooled.values():
        assert len(scores) == 6 and sorted(set(strata)) == ["tiny", "tiny3"]
        assert ((scores >= 0) & (scores <= 1)).all()
    best = max(s.max() for s, _ in pooled.values())
    assert best == 1.0


# ------------------------------------------------- the report reads the store, not the spec

NOT_IMPORTABLE = ["workbench.spec", "workbench.testbeds", "workbench.engine", "workbench.cli",
                  "transformers"]
BUILD_WITHOUT_SPEC = f"""
import sys
for name in {NOT_IMPORTABLE!r}:
    sys.modules[name] = None  # importing it raises ImportError
from workbench import report
written = report.build(report.SweepRef(sys.argv[1], sys.argv[2]), sys.argv[3])
print(len(written), "files")
"""


@pytest.fixture(scope="module")
def forgotten(tmp_path_factory):
    """A small sweep whose spec file is gone: (folder, store URL, the spec as it was)."""
    folder = tmp_path_factory.mktemp("forgotten")
    store = f"sqlite:///{folder / 'store.db'}"
    document = tiny_spec(name="gone", storage=store, trials=2,
                         report={"metrics": ["train/loss"], "x_axes": ["step"],
                                 "aggregate": "mean"})
    path = folder / "gone.yaml"
    path.write_text(yaml.safe_dump(document))
    run_sweep(spec.load(path), device="cpu")
    path.unlink()
    return folder, store, document


def test_a_report_needs_neither_the_sweep_spec_nor_a_testbed(forgotten):
    folder, store, _ = forgotten
    out = folder / "out"
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", BUILD_WITHOUT_SPEC, "gone", store, str(out)],
                            cwd=folder, capture_output=True, text=True, env=env,
                            timeout=scaled(600))
    assert result.returncode == 0, result.stderr
    table = (out / "table_gone.md").read_text()
    for method in ("constant", "polyak"):
        assert f"| {method} |" in table
    assert "train/loss (minimize, final)" in table  # the objective, as the spec had it
    # the report options the sweep ran with: one curve, against steps; the mean
    assert [p.name for p in out.glob("curves_*.png")] == ["curves_train-loss_step.png"]
    assert json.loads((out / "final.json").read_text())["statistics"]["aggregate"] == "mean"
    assert (out / "index.html").is_file() and (out / "sensitivity_gone.png").is_file()


def test_a_sweep_is_reported_by_its_name_from_the_store(forgotten):
    folder, store, _ = forgotten
    out = folder / "by-name"
    result = run_cli("report", "--sweep", "gone", "--storage", store, "--out", out, cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "| polyak |" in (out / "table_gone.md").read_text()
    result = run_cli("report", "--sweep", "nothing", "--storage", store, cwd=folder)
    assert result.returncode == 2 and "no runs of sweep 'nothing'" in result.stderr
    result = run_cli("report", "--sweep", "../x", "--storage", store, cwd=folder)
    assert result.returncode == 2 and "not a sweep name" in result.stderr


def test_a_study_written_before_the_record_says_to_rerun_the_sweep(forgotten):
    from workbench.store import runs

    folder, store, document = forgotten
    client = MlflowClient(store.replace("store.db", "store.mlflow.db"))
    experiment = client.get_experiment_by_name("gone").experiment_id
    (study,) = client.search_runs([experiment],
                                  "tags.`workbench.study_title` = 'gone.step_size=polyak' "
                                  "and tags.`workbench.kind` = 'study'")
    name = study.data.tags["workbench.study"]  # the Optuna study's name, by its fingerprint
    assert name.startswith("logreg.step_size=polyak.")
    client.delete_tag(study.info.run_id, runs.STUDY_RECORD)
    result = run_cli("report", "--sweep", "gone", "--storage", store, "--out", folder / "old",
                     cwd=folder)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    message = result.stderr.strip()
    assert message.startswith(f"error: sweep gone: study '{name}' was written by an older "
                              "workbench: no workbench.store.study_record or "
                              "workbench.common.fingerprint tag"), message
    assert "rerun `workbench sweep`" in message and len(message.splitlines()) == 1
    assert not (folder / "old").exists()

    path = folder / "gone.yaml"
    path.write_text(yaml.safe_dump(document))
    rerun = run_cli("sweep", path, "--quiet", cwd=folder)
    assert rerun.returncode == 0, rerun.stderr
    result = run_cli("report", path, "--out", folder / "old", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "| polyak |" in (folder / "old" / "table_gone.md").read_text()


def test_a_long_study_record_spans_several_tags_and_reads_back():
    from workbench.store import runs
    from workbench.store.study_record import ReportOptions, StudyRecord

    record = StudyRecord(task="logreg", metric="train/loss", direction="minimize", at="final",
                         metric_directions={"train/loss": "minimize"}, seeds=list(range(3000)),
                         report=ReportOptions(aggregate="mean"), position=2, trials=5, space={})
    tags = record.to_tags()
    assert len(tags) > 1 and all(len(v) <= runs.TAG_VALUE_CHARS for v in tags.values())
    assert StudyRecord.from_tags(tags) == record
    longer = StudyRecord(**{**record.model_dump(), "seeds": list(range(6000))}).to_tags()
    assert StudyRecord.from_tags({**longer, **tags}) == record  # leftover parts are ignored
    assert StudyRecord.from_tags({"workbench.kind": "study"}) is None


# ------------------------------------------------- a best value at the edge of its range

def test_range_edge_is_measured_in_the_ranges_own_scale():
    import optuna.distributions as od

    from workbench.report.data import range_edge

    log = od.FloatDistribution(1e-3, 10.0, log=True)  # 4 decades: 5% is 0.2 of a decade
    assert range_edge(9.843, log) == "high" and range_edge("9.843", log) == "high"
    assert range_edge(1.2e-3, log) == "low"
    assert range_edge(5.0, log) is None  # 2.5% below the top linearly, 7.5% in log10
    assert range_edge(1.0, log) is None
    linear = od.FloatDistribution(0.3, 0.95)
    assert range_edge(0.9425, linear) == "high"
    assert range_edge(0.31, linear) == "low"
    assert range_edge(0.9, linear) is None
    assert range_edge(96, od.IntDistribution(1, 100)) == "high"
    assert range_edge(0.5, od.CategoricalDistribution([0.1, 0.5])) is None
    assert range_edge("adam", log) is None


def test_a_band_through_zero_on_a_log_axis_runs_to_the_floor(swept, monkeypatch):
    """matplotlib masks a band's non-positive edge on a log axis and closes the polygon across
    the plot; the report draws such a band down to the axis' floor, half the lowest curve's
    smallest value, instead (not to the lowest raw value, which can be 100 decades down)."""
    import numpy as np

    from workbench.report import data, figures
    from workbench.stats import aggregates as stats

    folder, _ = swept
    d = data.read_sweep(data.SweepRef("tiny", f"sqlite:///{folder / 'store.db'}"), None)
    monkeypatch.setattr(stats, "wants_log_scale", lambda values: True)
    monkeypatch.setattr(stats, "interval_band", lambda values, how, confidence, bounds: (
        np.full(values.shape[1], -1.0), np.full(values.shape[1], 2.0)))  # through 0
    drawing = figures.curves([d], "train/loss", "step", d.options,
                             figures.Style(m.label for m in d.methods))
    ax = drawing.figure.axes[0]
    assert ax.get_yscale() == "log"
    bands = [c for c in ax.collections if "Poly" in type(c).__name__]
    assert len(bands) == len(d.methods)
    lowest = min(float(np.min(line.get_ydata())) for line in ax.lines)
    floor = ax.get_ylim()[0]
    assert floor == pytest.approx(lowest / 2)
    for band in bands:
        ys = np.concatenate([path.vertices[:, 1] for path in band.get_paths()])
        assert np.isfinite(ys).all() and ys.min() == pytest.approx(floor)
