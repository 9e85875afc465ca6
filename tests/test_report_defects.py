"""Report defects, each reproduced on a real store: a study without trials, sweeps with
disjoint methods, a vocabulary metric the task does not offer as an objective, and intervals
that must stay inside their metric's range."""

import pytest
import yaml

from tests.conftest import run_cli, tiny_spec
from workbench.common.validation import SpecError
from workbench.engine import studies
from workbench.engine.sweep_run import run_sweep
from workbench.report import data
from workbench.spec import sweep as spec
from workbench.store.database import Store


def test_a_study_without_trials_is_reported_as_having_none(tmp_path):
    """A sweep interrupted before a new study's first trial: its study run exists, no trial."""
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_spec(methods={"step_size": ["constant"]}, trials=2,
                                             seeds=2, storage=storage)))
    run_sweep(spec.load(path), device="cpu")
    path.write_text(yaml.safe_dump(tiny_spec(methods={"step_size": ["constant", "polyak"]},
                                             trials=2, seeds=2, storage=storage)))
    sweep = spec.load(path)
    studies.setup(sweep, Store.from_url(sweep.storage))  # the polyak study, no trial yet
    out = tmp_path / "out"
    result = run_cli("report", path, "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = (out / "table_tiny.md").read_text()
    polyak = next(line for line in table.splitlines() if line.startswith("| polyak"))
    assert "| 0/2 |" in polyak and "| — |" in polyak  # no trial counted, no score


def test_sweeps_with_disjoint_methods_report_together(tmp_path):
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    paths = []
    for name, method in (("one", "constant"), ("two", "polyak")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(tiny_spec(name=name, methods={"step_size": [method]},
                                                 trials=1, seeds=2, storage=storage)))
        run_sweep(spec.load(path), device="cpu")
        paths.append(str(path))
    report_spec = tmp_path / "both.yaml"
    report_spec.write_text(yaml.safe_dump({"name": "both", "sweeps": paths}))
    out = tmp_path / "out"
    result = run_cli("report", report_spec, "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (out / "final.png").exists()
    assert (out / "table_one.md").exists() and (out / "table_two.md").exists()
    assert data.pooled_scores([data.read_sweep(data.SweepRef(name, storage))
                               for name in ("one", "two")]) == {}


def test_a_report_may_draw_any_vocabulary_metric_not_only_objective_candidates(write_spec):
    """eval/response_length is logged by the RLVR loop but is no objective candidate."""
    document = tiny_spec(task={"name": "rlvr-arith", "params": {}},
                         methods={"step_size": ["adam_schedule"]},
                         report={"metrics": ["eval/response_length",
                                             "eval/accuracy"]})
    sweep = spec.load(write_spec(document))
    assert sweep.report.metrics == ["eval/response_length", "eval/accuracy"]
    document["report"] = {"metrics": ["eval/response_lenght"]}
    with pytest.raises(SpecError) as refused:
        spec.load(write_spec(document))
    message = str(refused.value)
    assert "report.metrics[0]" in message and "eval/response_length" in message  # did you mean


def test_tables_and_bands_of_a_bounded_metric_stay_inside_its_range(tmp_path, monkeypatch):
    """Two seeds: a t interval with 1 degree of freedom is wide, and unbounded its losses
    reach below 0 and its accuracies above 1; the report's stop at the range's ends."""
    import numpy as np
    import pandas as pd

    from workbench.common import metrics
    from workbench.report import figures
    from workbench.stats import aggregates as stats

    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_spec(
        methods={"step_size": ["constant", "polyak"]}, trials=2, seeds=2, storage=storage,
        task={"name": "logreg", "params": {"n_samples": 64, "dim": 5, "batch_size": 8,
                                           "data_seed": None}},
        report={"metrics": ["train/loss", "train/accuracy"], "x_axes": ["step"]})))
    run_sweep(spec.load(path), device="cpu")
    d = data.read_sweep(data.SweepRef("tiny", storage))
    assert d.bounds("train/loss") == (0.0, np.inf)  # the task's: logistic loss >= 0
    assert d.bounds("train/accuracy") == (0.0, 1.0) == metrics.bounds("train/accuracy")
    out = tmp_path / "out"
    result = run_cli("report", path, "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(out / "table_tiny.csv")
    assert (table[["iqm_low", "mean_low"]] >= 0).all().all()
    unbounded = [stats.interval(m.seeds["objective"], "mean").low for m in d.methods]
    assert min(unbounded) < 0  # the defect the bounds prevent shows on these seeds
    style = figures.Style(m.label for m in d.methods)
    for metric, (low, high) in (("train/loss", (0, np.inf)), ("train/accuracy", (0, 1))):
        drawing = figures.curves([d], metric, "step", d.options, style)
        bands = [c for c in drawing.figure.axes[0].collections if "Poly" in type(c).__name__]
        ys = np.concatenate([p.vertices[:, 1] for band in bands for p in band.get_paths()])
        assert bands and (ys >= low).all() and (ys <= high).all(), metric
    monkeypatch.setattr(stats, "wants_log_scale", lambda values: True)  # a wide loss range
    ax = figures.final([d], d.options, style).figure.axes[0]
    assert ax.get_xscale() == "log"
    left, right = ax.get_xlim()
    bars = [c for c in ax.collections if type(c).__name__ == "LineCollection"]
    xs = np.concatenate([np.asarray(seg)[:, 0] for bar in bars for seg in bar.get_segments()])
    assert bars and np.isfinite(xs).all()
    assert (xs >= left * (1 - 1e-9)).all() and (xs <= right * (1 + 1e-9)).all()
