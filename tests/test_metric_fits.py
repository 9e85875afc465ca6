"""Fits of one metric against another in the report's ``rates`` figure (``model``: power,
exponential, affine), joined as of each step the metric is logged at; and the ``edge`` verdict
that tells a best value at the end of its search range that still improves toward it from one
that only needs a wider range."""

import re
import typing
from types import SimpleNamespace

import numpy as np
import optuna.distributions as od
import pandas as pd
import pytest
import yaml

from tests.conftest import run_cli, tiny_spec
from workbench import report
from workbench.common.validation import SpecError
from workbench.engine.sweep_run import run_sweep
from workbench.report import captions, rates, tables
from workbench.report.data import MethodData, edge_trend
from workbench.report.series import asof_join, paired_series, run_series
from workbench.spec import sweep as spec
from workbench.stats import aggregates as stats
from workbench.stats.claims import FIT_MODELS, EdgeTrend, loglog_fit, metric_fit, model_curve
from workbench.stats.claims import edge_trend as stats_edge_trend
from workbench.store import runs
from workbench.store.database import Store
from workbench.store.sink import MetricSink
from workbench.store.study_record import RateSpec, ReportOptions

# -- the as-of join


def test_asof_join_takes_the_last_x_logged_at_or_before_each_y_step():
    # y at 0, 10, 20, 30; x at 1, 5, 10 (twice: the later one counts), 25, given unsorted
    x, y = asof_join([0, 10, 20, 30], [0.0, 1.0, 2.0, 3.0],
                     [25, 1, 10, 5, 10], [0.25, 0.01, 0.10, 0.05, 0.11])
    # step 0 has no x at or before it: dropped; 10 takes the x logged at 10 (the last of
    # two), 20 the same (nothing since), 30 the one logged at 25
    assert x.tolist() == [0.11, 0.11, 0.25] and y.tolist() == [1.0, 2.0, 3.0]
    assert [a.size for a in asof_join([0, 1], [1.0, 2.0], [], [])] == [0, 0]


def _history(rows):
    return SimpleNamespace(history=pd.DataFrame(rows, columns=["run_id", "key", "step",
                                                               "value"]))


def test_paired_series_keeps_x_as_logged_and_run_series_makes_an_axis_grow():
    d = _history([("r", "train/entropy", s, h) for s, h in ((1, 0.9), (3, 0.5), (5, 0.7))]
                 + [("r", "eval/accuracy", s, a) for s, a in ((0, 0.1), (2, 0.2), (4, 0.3),
                                                               (6, np.nan))]
                 + [("other", "train/entropy", 0, 5.0)])
    x, y = paired_series(d, "r", "eval/accuracy", "train/entropy")
    # steps 2, 4, 6 take the entropy of steps 1, 3, 5; step 6's NaN accuracy is dropped, and
    # the other run's entropy at step 0 is not this run's
    assert x.tolist() == [0.9, 0.5] and y.tolist() == [0.2, 0.3]
    x, _ = run_series(d, "r", "eval/accuracy", "train/entropy")
    assert x.tolist() == [0.9, 0.9]  # an axis is made non-decreasing


# -- the models


def _noisy(model, truth, seed):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.2, 2.0, 60)) if model != "power" else np.arange(1.0, 201.0)
    y = model_curve(model, truth, x)
    noise = rng.normal(0, 0.02, x.size)
    return x, (y * np.exp(noise) if model == "power" else y + noise)


@pytest.mark.parametrize(("model", "truth"), [("power", (-1.0, np.log(3.0))),
                                              ("exponential", (0.4, 2.5)),
                                              ("affine", (-0.7, 1.3))])
def test_each_model_recovers_its_parameters_and_the_interval_covers_them(model, truth):
    # 200 studies of 6 seeds each, every seed its own noisy curve
    rows = [["s", f"study{study}", seed, f"run{seed}",
             *metric_fit(model, *_noisy(model, truth, 6 * study + seed), 0.1, 250.0), 0.1, 250.0]
            for study in range(200) for seed in range(6)]
    per_seed = pd.DataFrame(rows, columns=rates.seed_columns(model))
    assert list(per_seed.columns)[4:6] == list(FIT_MODELS[model][1])
    summary = rates.summary(per_seed, 0.95, model)
    assert list(summary.columns) == rates.summary_columns(model) and (summary["n"] == 6).all()
    names = FIT_MODELS[model][1][:1] if model == "power" else FIT_MODELS[model][1]
    for name, true in zip(names, truth, strict=False):
        low, high = ((summary["ci_low"], summary["ci_high"]) if model == "power"
                     else (summary[f"{name}_ci_low"], summary[f"{name}_ci_high"]))
        mean = summary["mean_slope" if model == "power" else f"mean_{name}"]
        assert mean.to_numpy() == pytest.approx(true, abs=0.05)  # every study near the truth
        assert ((high - low) < 0.1).all()  # an interval, not the whole line
        covered = ((low <= true) & (true <= high)).mean()
        assert 0.9 <= covered <= 0.99, (name, covered)  # about 95% of the studies


def test_the_exponential_fit_is_not_the_affine_one():
    x = np.linspace(0.1, 2.0, 40)
    y = model_curve("exponential", (0.5, 3.0), x)
    assert metric_fit("exponential", x, y, 0, 3) == pytest.approx((0.5, 3.0))
    a, b = metric_fit("affine", x, y, 0, 3)
    assert (a, b) == pytest.approx(tuple(np.polyfit(x, y, 1)))  # the least-squares line,
    assert np.abs(model_curve("affine", (a, b), x) - y).max() > 0.1  # which misses the curve
    # the window is on x: outside it, nothing counts
    assert metric_fit("affine", x, np.where(x > 1.5, 99.0, y), 0, 1.5) != (a, b)
    assert np.isnan(metric_fit("affine", x, y, 5, 6)).all()


def test_the_power_model_is_loglog_fit_unchanged():
    t = np.arange(1.0, 500.0)
    assert metric_fit("power", t, 2 / (t + 2), 10, 400) == loglog_fit(t, 2 / (t + 2), 10, 400)
    assert rates.seed_columns("power") == rates.SEED_COLUMNS
    assert rates.summary_columns("power") == rates.SUMMARY_COLUMNS
    spec_ = RateSpec(metric="train/loss", window=(2, 40))
    assert spec_.model == "power" and rates.stem(spec_) == "rates_train-loss"
    assert rates.stem(RateSpec(metric="eval/accuracy", x="train/entropy", window=(0, 2),
                               model="exponential")) == \
        "rates_eval-accuracy_train-entropy_exponential"


def test_the_spec_offers_the_models_the_fit_knows_and_checks_the_window():
    field = RateSpec.model_fields["model"].annotation
    assert typing.get_args(field) == tuple(FIT_MODELS)
    assert RateSpec(metric="m", x="h", window=(-1, 2), model="affine").window == (-1, 2)
    with pytest.raises(ValueError, match="0 < low < high"):
        RateSpec(metric="m", x="h", window=(-1, 2))  # a power law needs log x
    with pytest.raises(ValueError, match="low < high"):
        RateSpec(metric="m", x="h", window=(2, 1), model="exponential")


def test_a_bad_rate_model_exits_2_naming_the_allowed_ones(write_spec, tmp_path):
    rate = {"metric": "train/loss", "window": [1, 10], "model": "bogus"}
    path = write_spec(tiny_spec(report={"rates": [rate]},
                                storage=f"sqlite:///{tmp_path / 's.db'}"))
    result = run_cli("report", path, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "spec.yaml: report.rates[0].model: 'bogus'" in result.stderr
    assert "allowed: power, exponential, affine" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_a_rate_against_an_unknown_metric_is_refused(write_spec, tmp_path):
    rate = {"metric": "train/loss", "x": "train/nope", "window": [1, 10], "model": "affine"}
    path = write_spec(tiny_spec(report={"rates": [rate]}))
    with pytest.raises(SpecError) as err:
        spec.load(path)
    assert "report.rates[0].x" in str(err.value) and "train/nope" in str(err.value)


# -- a real store

ENTROPY_LAW = (0.4, 0.9)  # accuracy = -0.4 exp(H) + 0.9


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fits")
    storage = f"sqlite:///{folder / 'store.db'}"
    document = tiny_spec(seeds=3, trials=2, storage=storage, budget={"steps": 40},
                         report={"metrics": ["train/loss"], "x_axes": ["step"]})
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    run_sweep(spec.load(path), device="cpu")
    data = report.data.read_sweep(report.SweepRef("tiny", storage))
    # an entropy at odd steps, an accuracy at even ones: no step holds both; each accuracy
    # follows the law at the entropy last logged before it
    rng = np.random.default_rng(0)
    with MetricSink(Store.from_url(storage).mlflow_url) as sink:
        for run_id in (r for m in data.methods for r in m.seeds["run_id"]):
            entropy = np.linspace(1.2, 0.1, 40) + rng.normal(0, 0.02, 40)
            for step in range(1, 40, 2):
                sink.log(run_id, step, {"train/entropy": float(entropy[step])})
            for step in range(2, 41, 2):
                accuracy = model_curve("exponential", ENTROPY_LAW, entropy[step - 1])
                sink.log(run_id, step, {"eval/accuracy": float(accuracy + rng.normal(0, 0.005))})
    return folder, storage


def _inner_join_slopes(d, spec_: RateSpec) -> list[tuple[float, float]]:
    """The power fit as the report made it before the as-of join: the metric and x on the
    steps both were logged at, x made non-decreasing."""
    out = []
    for m in d.methods:
        for run_id in m.seeds["run_id"]:
            h = d.history[d.history["run_id"] == run_id]
            y = h[h["key"] == spec_.metric].set_index("step")["value"]
            if spec_.x == "step":
                x, v = y.index.to_numpy(dtype=float), y.to_numpy(dtype=float)
            else:
                xs = h[h["key"] == spec_.x].set_index("step")["value"]
                joined = pd.concat([xs.rename("x"), y.rename("y")], axis=1).dropna()
                x, v = np.maximum.accumulate(joined["x"].to_numpy()), joined["y"].to_numpy()
            out.append(loglog_fit(x, v, *spec_.window))
    return out


def test_power_rates_on_a_store_are_the_plain_join_fit(swept):
    _, storage = swept
    asked = [RateSpec(metric="train/loss", window=(2, 40)),
             RateSpec(metric="train/loss", x="cost/samples", window=(50, 2000))]
    options = ReportOptions(metrics=["train/loss"], x_axes=["step"], rates=asked)
    d = report.data.read_sweep(report.SweepRef("tiny", storage), options)
    for spec_ in asked:
        per_seed = rates.fits(d, spec_)
        assert list(per_seed.columns) == rates.SEED_COLUMNS and len(per_seed) == 6
        assert per_seed["slope"].notna().all()
        fitted = list(zip(per_seed["slope"], per_seed["intercept"], strict=True))
        assert fitted == _inner_join_slopes(d, spec_)  # bit for bit


def test_an_entropy_law_is_fitted_across_steps_logged_apart(swept):
    folder, storage = swept
    law = RateSpec(metric="eval/accuracy", x="train/entropy", window=(0.0, 2.0),
                   model="exponential")
    out = folder / "out"
    report.build(report.SweepRef("tiny", storage), out,
                 options=ReportOptions(metrics=["train/loss"], x_axes=["step"], rates=[law]))
    stem = "rates_eval-accuracy_train-entropy_exponential"
    assert (out / f"{stem}.png").exists()
    per_seed = pd.read_csv(out / f"{stem}.csv")
    assert list(per_seed.columns) == ["sweep", "method", "seed", "run_id", "a", "b",
                                      "window_low", "window_high"]
    assert len(per_seed) == 6
    assert per_seed["a"].to_numpy() == pytest.approx(ENTROPY_LAW[0], abs=0.02)
    assert per_seed["b"].to_numpy() == pytest.approx(ENTROPY_LAW[1], abs=0.03)
    summary = pd.read_csv(out / f"{stem}_summary.csv")
    assert list(summary.columns) == rates.summary_columns("exponential")
    for _, row in summary.iterrows():
        assert row["n"] == 3
        assert row["a_ci_low"] <= ENTROPY_LAW[0] <= row["a_ci_high"]
        assert row["b_ci_low"] <= ENTROPY_LAW[1] <= row["b_ci_high"]
        mine = per_seed[per_seed["method"] == row["method"]]["a"]
        ci = stats.interval(mine.to_numpy(), "mean", 0.95)
        assert (row["a_ci_low"], row["a_ci_high"]) == pytest.approx((ci.low, ci.high))
    # the figure: linear axes, the fitted curve with each parameter +- its interval
    d = report.data.read_sweep(report.SweepRef("tiny", storage),
                               ReportOptions(x_axes=["step"], rates=[law]))
    drawing = rates.rates([d], law, d.options, report.figures.Style(m.label for m in d.methods))
    ax = drawing.figure.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("linear", "linear")
    labels = [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]
    assert len(labels) == 2
    for label in labels:
        a, b = re.search(r": a ([-\d.e]+) ± [\d.e-]+, b ([-\d.e]+) ± [\d.e-]+ \(n=3\)",
                         label).groups()
        assert (float(a), float(b)) == pytest.approx(ENTROPY_LAW, abs=0.03), label


# -- the edge verdict

LR = np.geomspace(1e-3, 10, 12)


def test_an_objective_still_falling_toward_the_high_end_is_a_trend_not_an_optimum():
    rng = np.random.default_rng(1)
    loss = 0.5 * LR ** -0.9 * np.exp(rng.normal(0, 0.05, LR.size))
    trend = stats_edge_trend(LR, loss, "high", "minimize", log=True)
    assert trend.improving and trend.n == 8 and trend.rho == 1.0
    assert trend.p == pytest.approx(1 / 40320)  # the one order of 8 as good as this one
    assert trend.form == "power" and trend.slope == pytest.approx(-0.9, abs=0.1)
    assert trend.highest == pytest.approx(10) and trend.lowest == pytest.approx(LR[4])
    text = captions.edge_advice("high", trend, "lr")
    assert "still improving" in text and "lr^-0.9" in text and "widen it" not in text
    # a plateau over the trials nearest the end: the best sits there by noise alone
    plateau = np.where(LR < 0.02, 5.0, 1.0) + rng.normal(0, 0.05, LR.size)
    flat = stats_edge_trend(LR, plateau, "high", "minimize", log=True)
    assert not flat.improving and flat.p > 0.05
    assert captions.edge_advice("high", flat, "lr") == "best at the range's high end: widen it"
    # noise with no trend
    noise = stats_edge_trend(LR, rng.permutation(loss), "high", "minimize", log=True)
    assert not noise.improving and noise.p > 0.05


def test_the_edge_trend_follows_the_edge_and_the_direction():
    accuracy = 1 - 0.1 * np.log10(LR)  # better toward the low end, maximized
    assert stats_edge_trend(LR, accuracy, "low", "maximize", log=True).improving
    assert not stats_edge_trend(LR, accuracy, "low", "minimize", log=True).improving
    assert not stats_edge_trend(LR, accuracy, "high", "maximize", log=True).improving
    linear = stats_edge_trend(np.linspace(0, 1, 9), np.linspace(5, 1, 9), "high", "minimize",
                              log=False)
    assert linear.improving and linear.form == "per_unit" and linear.slope == pytest.approx(-4)
    assert stats_edge_trend(LR[:4], accuracy[:4], "low", "maximize", log=True) is None


def test_the_report_reads_the_trend_from_the_trials_and_marks_the_table():
    rng = np.random.default_rng(2)
    lr = np.geomspace(1e-3, 9.9, 10)
    ids = [f"t{i}" for i in range(lr.size)]
    loss = 0.5 * lr ** -0.9 * np.exp(rng.normal(0, 0.05, lr.size))
    trials = pd.DataFrame({"run_id": ids, "status": runs.FINISHED, "number": range(lr.size),
                           "objective": loss, "reason": ""})
    trials.loc[0, "status"] = runs.KILLED  # a pruned trial counts for nothing
    space = {"step_size.lr": od.FloatDistribution(1e-3, 10, log=True)}
    m = MethodData("constant", "reference-checked", trials, ids[-1], pd.DataFrame(), space, 10)
    d = SimpleNamespace(params=pd.DataFrame({"run_id": ids, "step_size.lr": lr}),
                        direction="minimize")
    trend = edge_trend(d, m, "step_size.lr")
    assert isinstance(trend, EdgeTrend) and trend.improving and trend.edge == "high"
    cell = tables._best_value("step_size.lr", lr[-1], space["step_size.lr"], trend)
    assert cell == "lr=9.9 (edge: high end of 0.001-10) (still improving)"
    assert tables._best_value("step_size.lr", lr[-1], space["step_size.lr"]) == \
        "lr=9.9 (edge: high end of 0.001-10)"
    inside = MethodData("constant", "reference-checked", trials, ids[5], pd.DataFrame(), space,
                        10)
    assert edge_trend(d, inside, "step_size.lr") is None  # best inside the range
