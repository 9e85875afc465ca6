"""The ``rates`` figure: a power-law rate m(x) ~ C x^a fitted per seed of each method's best
trial (``stats_claims.loglog_fit`` over the spec's window), the mean slope with its interval
over seeds (``stats.interval``, Student-t on the mean); log-log curves with the fitted line,
slope +- interval in the legend; ``rates_METRIC.csv`` (per seed) and ``_summary.csv`` beside."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from workbench.report import captions, folder
from workbench.report.data import SweepData
from workbench.report.figures import UNITS, Drawing, Style, _axes, _caption, _finite, _log_axis
from workbench.report.series import run_series
from workbench.stats import aggregates as stats
from workbench.stats import claims as stats_claims
from workbench.store.study_record import RateSpec, ReportOptions

SEED_COLUMNS = ["sweep", "method", "seed", "run_id", "slope", "intercept", "window_low",
                "window_high"]
SUMMARY_COLUMNS = ["sweep", "method", "n", "mean_slope", "ci_low", "ci_high", "confidence",
                   "interval"]


def stem(spec: RateSpec) -> str:
    suffix = "" if spec.x == "step" else f"_{folder.slug(spec.x)}"
    return f"rates_{folder.slug(spec.metric)}{suffix}"


def slopes(d: SweepData, spec: RateSpec) -> pd.DataFrame:
    """Per seed of each method's best trial: its fitted slope and intercept (``SEED_COLUMNS``)."""
    rows = []
    for m in d.methods:
        for _, seed in _finite(m.seeds).iterrows():
            x, y = run_series(d, seed["run_id"], spec.metric, spec.x)
            slope, intercept = stats_claims.loglog_fit(x, y, *spec.window)
            rows.append([d.name, m.label, int(seed["seed"]), seed["run_id"], slope, intercept,
                         *spec.window])
    return pd.DataFrame(rows, columns=SEED_COLUMNS)


def summary(per_seed: pd.DataFrame, confidence: float) -> pd.DataFrame:
    """Per method: the mean slope over its seeds with its interval (``SUMMARY_COLUMNS``)."""
    rows = []
    for (sweep, method), group in per_seed.groupby(["sweep", "method"], sort=False):
        a = group["slope"].to_numpy(dtype=float)
        a = a[np.isfinite(a)]
        ci = stats.interval(a, "mean", confidence)
        rows.append([sweep, method, a.size, float(a.mean()) if a.size else math.nan, ci.low,
                     ci.high, confidence, ci.note or stats.INTERVAL_METHODS["mean"]])
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def rates(sweeps: list[SweepData], spec: RateSpec, options: ReportOptions,
          style: Style) -> Drawing | None:
    fig, axes = _axes(len(sweeps))
    per_seed = pd.concat([slopes(d, spec) for d in sweeps], ignore_index=True)
    if per_seed.empty:
        return None
    table = summary(per_seed, options.confidence)
    for ax, d in zip(axes, sweeps, strict=True):
        ax.axvspan(*spec.window, color="0.92", zorder=0, label=None)
        for m in d.methods:
            mine = per_seed[(per_seed["sweep"] == d.name) & (per_seed["method"] == m.label)]
            if mine.empty:
                continue
            for run_id in mine["run_id"]:
                x, y = run_series(d, run_id, spec.metric, spec.x)
                keep = (x > 0) & (y > 0)
                ax.plot(x[keep], y[keep], color=style.colour(m.label), alpha=0.35, lw=0.8)
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
        ax.set_xlabel(UNITS.get(spec.x, spec.x))
        ax.set_ylabel(spec.metric)
        ax.set_title(d.name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    low, high = spec.window
    _caption(fig, f"{spec.metric} ~ C {spec.x}^a: a fitted by least squares on log-log per seed "
                  f"over {spec.x} in [{low:g}, {high:g}] (shaded; thin lines: the seeds), "
                  f"the mean slope with its {options.confidence:.0%} Student-t interval over "
                  "seeds in the legend, dashed: the mean fit", sweeps)
    numbers = {".csv": per_seed.to_csv(index=False), "_summary.csv": table.to_csv(index=False)}
    return Drawing(stem(spec), fig, per_seed["run_id"].tolist(), sweeps, numbers)
