"""The ``rates`` figure: a curve of one metric against ``x`` fitted per seed of each method's
best trial over the spec's window of x (``stats_claims.metric_fit``), each parameter's mean
with its interval over seeds (``stats.interval``, Student-t on the mean).

The spec's ``model`` picks the curve (``stats_claims.FIT_MODELS``): ``power`` m(x) ~ C x^a
(the default: log-log axes, the slope +- interval in the legend), ``exponential``
m = -a exp(x) + b (Cui et al. 2025's entropy-performance law R = -a e^H + b) or ``affine``
m = a x + b (linear axes, the curve at the mean parameters drawn, each parameter +- half its
interval in the legend). ``x`` is ``step``, a cost or time counter (made non-decreasing), or any
other metric as logged; the metric and x are joined as of each step the metric is logged at
(``series.asof_join``: x is the last value logged at or before it). ``rates_METRIC[_X][_MODEL]
.csv`` (per seed: each parameter, named as the model names it) and ``_summary.csv`` beside."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from workbench.report import captions, folder
from workbench.report.data import SweepData
from workbench.report.figures import UNITS, Drawing, Style, _axes, _caption, _finite, _log_axis
from workbench.report.series import CUMULATIVE, paired_series, run_series
from workbench.stats import aggregates as stats
from workbench.stats import claims as stats_claims
from workbench.store.study_record import RateSpec, ReportOptions

# the power model's columns (its parameters: slope, intercept = log C)
SEED_COLUMNS = ["sweep", "method", "seed", "run_id", "slope", "intercept", "window_low",
                "window_high"]
SUMMARY_COLUMNS = ["sweep", "method", "n", "mean_slope", "ci_low", "ci_high", "confidence",
                   "interval"]


def parameters(model: str) -> tuple[str, str]:
    return stats_claims.FIT_MODELS[model][1]


def seed_columns(model: str) -> list[str]:
    """The per-seed CSV's columns: ``SEED_COLUMNS`` with the model's parameters."""
    return ["sweep", "method", "seed", "run_id", *parameters(model), "window_low",
            "window_high"]


def summary_columns(model: str) -> list[str]:
    """The summary CSV's columns: ``SUMMARY_COLUMNS`` for ``power`` (its slope); else each
    parameter's mean and interval (``mean_a``, ``a_ci_low``, ``a_ci_high``, ...)."""
    if model == "power":
        return SUMMARY_COLUMNS
    named = [f"{kind}{p}{end}" for p in parameters(model)
             for kind, end in (("mean_", ""), ("", "_ci_low"), ("", "_ci_high"))]
    return ["sweep", "method", "n", *named, "confidence", "interval"]


def stem(spec: RateSpec) -> str:
    suffix = "" if spec.x == "step" else f"_{folder.slug(spec.x)}"
    model = "" if spec.model == "power" else f"_{spec.model}"
    return f"rates_{folder.slug(spec.metric)}{suffix}{model}"


def is_axis(x: str) -> bool:
    """``step`` or a counter that only grows: drawn as a line (else each point alone)."""
    return x == "step" or x in CUMULATIVE


def series(d: SweepData, run_id: str, spec: RateSpec) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of one seed: against ``step`` or a counter (``run_series``, made
    non-decreasing), else against another metric as logged (``paired_series``); both joined
    as of each step the metric is logged at."""
    if is_axis(spec.x):
        return run_series(d, run_id, spec.metric, spec.x)
    return paired_series(d, run_id, spec.metric, spec.x)


def fits(d: SweepData, spec: RateSpec) -> pd.DataFrame:
    """Per seed of each method's best trial: its fitted parameters (``seed_columns``)."""
    rows = []
    for m in d.methods:
        for _, seed in _finite(m.seeds).iterrows():
            x, y = series(d, seed["run_id"], spec)
            fitted = stats_claims.metric_fit(spec.model, x, y, *spec.window)
            rows.append([d.name, m.label, int(seed["seed"]), seed["run_id"], *fitted,
                         *spec.window])
    return pd.DataFrame(rows, columns=seed_columns(spec.model))


def summary(per_seed: pd.DataFrame, confidence: float, model: str = "power") -> pd.DataFrame:
    """Per method: each parameter's mean over its seeds with its interval
    (``summary_columns``; for ``power``, the slope's)."""
    summarised = parameters(model)[:1] if model == "power" else parameters(model)
    rows = []
    for (sweep, method), group in per_seed.groupby(["sweep", "method"], sort=False):
        finite = np.all(np.isfinite(group[list(summarised)].to_numpy(dtype=float)), axis=1)
        cells, note = [], None
        for name in summarised:
            a = group[name].to_numpy(dtype=float)[finite]
            ci = stats.interval(a, "mean", confidence)
            cells += [float(a.mean()) if a.size else math.nan, ci.low, ci.high]
            note = note or ci.note
        rows.append([sweep, method, int(finite.sum()), *cells, confidence,
                     note or stats.INTERVAL_METHODS["mean"]])
    return pd.DataFrame(rows, columns=summary_columns(model))


def rates(sweeps: list[SweepData], spec: RateSpec, options: ReportOptions,
          style: Style) -> Drawing | None:
    per_seed = pd.concat([fits(d, spec) for d in sweeps], ignore_index=True)
    if per_seed.empty:
        return None
    table = summary(per_seed, options.confidence, spec.model)
    draw = _draw_power if spec.model == "power" else _draw_curve
    fig = draw(sweeps, spec, options, style, per_seed, table)
    numbers = {".csv": per_seed.to_csv(index=False), "_summary.csv": table.to_csv(index=False)}
    return Drawing(stem(spec), fig, per_seed["run_id"].tolist(), sweeps, numbers)


def _draw_power(sweeps, spec, options, style, per_seed, table):
    fig, axes = _axes(len(sweeps))
    for ax, d in zip(axes, sweeps, strict=True):
        ax.axvspan(*spec.window, color="0.92", zorder=0, label=None)
        for m in d.methods:
            mine = per_seed[(per_seed["sweep"] == d.name) & (per_seed["method"] == m.label)]
            if mine.empty:
                continue
            for run_id in mine["run_id"]:
                x, y = series(d, run_id, spec)
                keep = (x > 0) & (y > 0)
                _seed(ax, spec, x[keep], y[keep], style.colour(m.label))
            row = table[(table["sweep"] == d.name) & (table["method"] == m.label)].iloc[0]
            ok = mine[np.isfinite(mine["slope"])]
            if ok.empty:
                continue
            fit_x = np.geomspace(*spec.window, 20)
            fit_y = np.exp(ok["intercept"].mean()) * fit_x ** row["mean_slope"]
            interval = ("" if math.isnan(row["ci_low"])
                        else f", {options.confidence:.0%} CI [{row['ci_low']:.2f}, "
                             f"{row['ci_high']:.2f}]")
            style.line(ax, m.label, fit_x, fit_y, lw=2, linestyle="--", markevery=4)
            ax.lines[-1].set_label(f"{captions.name(m)}: slope {row['mean_slope']:.2f}"
                                   f"{interval} (n={int(row['n'])})")
        _log_axis(ax, "x")
        _log_axis(ax, "y")
        _label(ax, d, spec)
    low, high = spec.window
    _caption(fig, f"{spec.metric} ~ C {spec.x}^a: a fitted by least squares on log-log per seed "
                  f"over {spec.x} in [{low:g}, {high:g}] (shaded; {_seeds_drawn(spec)}), "
                  f"the mean slope with its {options.confidence:.0%} Student-t interval over "
                  f"seeds in the legend, dashed: the mean fit{_joined(spec)}", sweeps)
    return fig


def _draw_curve(sweeps, spec, options, style, per_seed, table):
    """Linear axes; each seed's points, the curve at the mean parameters over the window's
    part that holds points, each parameter +- half its interval in the legend."""
    fig, axes = _axes(len(sweeps))
    a, b = parameters(spec.model)
    for ax, d in zip(axes, sweeps, strict=True):
        seen = []
        for m in d.methods:
            mine = per_seed[(per_seed["sweep"] == d.name) & (per_seed["method"] == m.label)]
            if mine.empty:
                continue
            for run_id in mine["run_id"]:
                x, y = series(d, run_id, spec)
                keep = np.isfinite(x) & np.isfinite(y)
                _seed(ax, spec, x[keep], y[keep], style.colour(m.label))
                seen.append(x[keep])
            row = table[(table["sweep"] == d.name) & (table["method"] == m.label)].iloc[0]
            if not row["n"]:
                continue
            inside = np.concatenate(seen)
            inside = inside[(inside >= spec.window[0]) & (inside <= spec.window[1])]
            if inside.size == 0:
                continue
            fit_x = np.linspace(inside.min(), inside.max(), 50)
            fit_y = stats_claims.model_curve(spec.model, (row[f"mean_{a}"], row[f"mean_{b}"]),
                                             fit_x)
            style.line(ax, m.label, fit_x, fit_y, lw=2, linestyle="--", markevery=10)
            ax.lines[-1].set_label(f"{captions.name(m)}: {_estimate(row, a)}, "
                                   f"{_estimate(row, b)} (n={int(row['n'])})")
        if seen:
            every = np.concatenate(seen)
            low, high = max(spec.window[0], every.min()), min(spec.window[1], every.max())
            if low < high and (low > every.min() or high < every.max()):
                ax.axvspan(low, high, color="0.92", zorder=0, label=None)
        _label(ax, d, spec)
    low, high = spec.window
    formula = (f"{spec.metric} = -a exp({spec.x}) + b" if spec.model == "exponential"
               else f"{spec.metric} = a {spec.x} + b")
    _caption(fig, f"{formula} fitted by least squares per seed on its points with {spec.x} in "
                  f"[{low:g}, {high:g}] (shaded where it cuts the points; "
                  f"{_seeds_drawn(spec)}), each parameter's mean over seeds +- half its "
                  f"{options.confidence:.0%} Student-t interval in the legend, dashed: the "
                  f"curve at the mean parameters{_joined(spec)}", sweeps)
    return fig


def _seed(ax, spec: RateSpec, x, y, colour: str) -> None:
    """One seed's points: a thin line along an axis, dots against another metric."""
    if is_axis(spec.x):
        ax.plot(x, y, color=colour, alpha=0.35, lw=0.8)
    else:
        ax.plot(x, y, color=colour, alpha=0.35, lw=0, marker=".", markersize=3)


def _seeds_drawn(spec: RateSpec) -> str:
    return "thin lines: the seeds" if is_axis(spec.x) else "dots: the seeds' points"


def _label(ax, d: SweepData, spec: RateSpec) -> None:
    ax.set_xlabel(UNITS.get(spec.x, spec.x))
    ax.set_ylabel(spec.metric)
    ax.set_title(d.name, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _estimate(row: pd.Series, name: str) -> str:
    """``a 0.31 +- 0.04``: the mean and half the (symmetric, Student-t) interval's width."""
    if math.isnan(row[f"{name}_ci_low"]):
        return f"{name} {row[f'mean_{name}']:.3g}"
    half = (row[f"{name}_ci_high"] - row[f"{name}_ci_low"]) / 2
    return f"{name} {row[f'mean_{name}']:.3g} ± {half:.2g}"


def _joined(spec: RateSpec) -> str:
    if is_axis(spec.x):
        return ""
    return (f"; {spec.x} at each step {spec.metric} is logged: the last value logged at or "
            "before it")
