"""The statistics a claim needs, in the report: a power-law slope per seed with an interval
over seeds (``rates``), log axes on learning curves (``log_axes``), the x to a target with
censoring (``target``), and a metric split by a condition (``split``); each figure with its
numbers beside it, rebuilt from a real store."""

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import run_cli, tiny_spec
from workbench import report
from workbench.engine.sweep_run import run_sweep
from workbench.reproduce import checks
from workbench.spec import sweep as spec
from workbench.stats.claims import Reach, first_reach, km_median, loglog_fit, loglog_slope
from workbench.store.database import Store
from workbench.store.sink import MetricSink
from workbench.store.study_record import ReportOptions

SPLIT = {"metric": "eval/response_length", "by": ["correct", "incorrect"]}


def test_the_slope_of_two_over_t_plus_two_is_minus_one():
    t = np.arange(1, 2001, dtype=float)
    slope, intercept = loglog_fit(t, 2 / (t + 2), 10, 1000)
    assert slope == pytest.approx(-1.0, abs=0.05)  # -0.97: the +2 bends it near t = 10
    assert math.exp(intercept) == pytest.approx(2.0, rel=0.2)
    assert loglog_slope(t, 5 * t ** -2.0, 10, 1000) == pytest.approx(-2.0, abs=1e-9)
    assert math.isnan(loglog_slope(t[:5], t[:5], 10, 1000))  # nothing in the window
    assert checks.loglog_slope is loglog_slope  # the reproductions' checks fit the same way


def test_first_reach_censors_a_curve_that_never_reaches():
    assert first_reach([1, 2, 3], [0.1, 0.5, 0.9], 0.5) == Reach(2.0, False)
    assert first_reach([1, 2, 3], [0.1, 0.2, 0.3], 0.5) == Reach(3.0, True)
    assert first_reach([1, 2, 3], [3.0, 1.0, 0.5], 1.0, "minimize") == Reach(2.0, False)
    assert Reach(3.0, True).text() == ">3"


def test_the_kaplan_meier_median_counts_the_censored_seeds():
    # two of five reached: the median of the reached (15) would hide three that never did
    assert math.isnan(km_median([Reach(10, False), Reach(20, False), Reach(100, True),
                                 Reach(100, True), Reach(100, True)]))
    # three of five reached by 30: half are there
    assert km_median([Reach(10, False), Reach(20, False), Reach(30, False), Reach(100, True),
                      Reach(100, True)]) == 30
    # a seed censored early leaves the risk set: 1 - 1/3 after 10, then x (1 - 1/2) at 40
    assert km_median([Reach(10, False), Reach(5, True), Reach(40, False),
                      Reach(50, True)]) == 40
    assert km_median([Reach(7, False)]) == 7


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("claims")
    storage = f"sqlite:///{folder / 'store.db'}"
    document = tiny_spec(
        seeds=3, trials=2, storage=storage, budget={"steps": 40},
        report={"metrics": ["train/loss"], "x_axes": ["step", "cost/samples"],
                "rates": [{"metric": "train/loss", "window": [2, 40]}],
                "log_axes": {"train/loss": ["x", "y"]},
                "target": {"metric": "train/loss", "value": 0.05, "direction": "minimize"}})
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    run_sweep(spec.load(path), device="cpu")
    return folder, path, storage


def test_rates_target_and_log_axes_from_a_sweep_spec(swept):
    folder, path, _ = swept
    out = folder / "out"
    result = run_cli("report", path, "--out", out, cwd=folder)
    assert result.returncode == 0, result.stderr
    for name in ("rates_train-loss.png", "rates_train-loss.pdf", "rates_train-loss.json",
                 "target_train-loss.png", "curves_train-loss_step.png"):
        assert (out / name).exists(), name
    per_seed = pd.read_csv(out / "rates_train-loss.csv")
    assert list(per_seed.columns) == ["sweep", "method", "seed", "run_id", "slope",
                                      "intercept", "window_low", "window_high"]
    assert sorted(set(per_seed["method"])) == ["constant", "polyak"]
    assert len(per_seed) == 6 and per_seed["slope"].notna().all()
    summary = pd.read_csv(out / "rates_train-loss_summary.csv")
    for _, row in summary.iterrows():
        slopes = per_seed[per_seed["method"] == row["method"]]["slope"]
        assert row["n"] == 3 and row["mean_slope"] == pytest.approx(slopes.mean())
        assert row["ci_low"] < row["mean_slope"] < row["ci_high"]
    reaches = pd.read_csv(out / "target_train-loss.csv")
    assert list(reaches.columns) == ["sweep", "method", "seed", "run_id", "axis", "x",
                                     "censored"]
    assert set(reaches["axis"]) == {"step", "cost/samples"} and len(reaches) == 12
    steps = reaches[reaches["axis"] == "step"]
    # constant's loss stays above 0.05 in 40 steps (about 0.1), polyak's falls below it: a
    # censored seed stands at its last step, a reached one at or before it
    assert steps["censored"].any() and not steps["censored"].all()
    assert (steps[steps["censored"]]["x"] == 40).all() and (steps["x"] <= 40).all()
    summary = pd.read_csv(out / "target_train-loss_summary.csv").set_index(["method", "axis"])
    table = (out / "target_train-loss_summary.md").read_text()
    for (method, axis), row in summary.iterrows():
        mine = steps[steps["method"] == method] if axis == "step" else None
        if mine is not None:
            assert row["reached"] == (~mine["censored"]).sum() and row["n"] == 3
        assert f"| {method} | {axis} | {row['reached']} of 3 | {row['median_text']} |" in table
        # the median is the Kaplan-Meier one: none where at most half reached
        assert math.isnan(row["km_median"]) == (row["reached"] < 2)
    assert ">40" in table


def test_a_split_metric_draws_each_condition_per_method(swept):
    folder, _, storage = swept
    data = report.data.read_sweep(report.SweepRef("tiny", storage))
    seeds = [r for m in data.methods for r in m.seeds["run_id"]]
    with MetricSink(Store.from_url(storage).mlflow_url) as sink:
        for i, run_id in enumerate(seeds):
            for step in range(10):
                sink.log(run_id, step, {"eval/response_length_correct": 20.0 + step + i,
                                        "eval/response_length_incorrect": 60.0 - step})
    out = folder / "split"
    report.build(report.SweepRef("tiny", storage), out,
                 options=ReportOptions(metrics=["train/loss"], x_axes=["step"], split=[SPLIT]))
    assert (out / "split_eval-response_length.png").exists()
    numbers = pd.read_csv(out / "split_eval-response_length.csv")
    assert list(numbers.columns) == ["sweep", "method", "condition", "metric", "x", "centre",
                                     "low", "high", "n"]
    assert set(zip(numbers["method"], numbers["condition"], strict=True)) == {
        (m, c) for m in ("constant", "polyak") for c in ("correct", "incorrect")}
    incorrect = numbers[numbers["condition"] == "incorrect"]
    assert np.allclose(incorrect["centre"], 60.0 - incorrect["x"])
    assert (numbers["n"] == 3).all()


@pytest.mark.parametrize(("section", "where"), [
    ({"rates": [{"metric": "train/nope", "window": [1, 10]}]}, "report.rates[0].metric"),
    ({"rates": [{"metric": "train/loss", "windw": [1, 10]}]}, "windw"),
    ({"log_axes": {"train/loss": ["z"]}}, "log_axes"),
    ({"split": [{"metric": "train/loss", "by": ["nope"]}]}, "report.split[0]"),
])
def test_a_bad_claim_key_exits_2_naming_it(write_spec, tmp_path, section, where):
    path = write_spec(tiny_spec(report=section, storage=f"sqlite:///{tmp_path / 's.db'}"))
    result = run_cli("report", path, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert where in result.stderr and "spec.yaml" in result.stderr
    assert not (tmp_path / "out").exists()


def test_log_axes_put_a_learning_curve_on_log_x_and_y(swept):
    from workbench.report import figures

    _, _, storage = swept
    for asked, scales in (({"train/accuracy": ["x", "y"]}, ("log", "log")),
                          ({"train/accuracy": ["x"]}, ("log", "linear")), ({}, ("linear",
                                                                                "linear"))):
        options = ReportOptions(metrics=["train/accuracy"], x_axes=["step"], log_axes=asked)
        data = report.data.read_sweep(report.SweepRef("tiny", storage), options)
        drawing = figures.curves([data], "train/accuracy", "step", options,
                                 figures.Style(m.label for m in data.methods))
        ax = drawing.figure.axes[0]
        assert (ax.get_xscale(), ax.get_yscale()) == scales
