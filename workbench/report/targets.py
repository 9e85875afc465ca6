"""The ``target`` figure: the x (step, samples, seconds ... each of the report's x-axes) at
which each seed of each method's best trial first reaches the report's ``target``; a seed that
never does is censored at its last x: hollow marker, ``>N`` in the table, ``reached k of n``.
The summary is the Kaplan-Meier median (``stats_claims.km_median``), ``>N`` where fewer than
half reached. ``target_METRIC.csv`` (per seed), ``_summary.csv`` and ``_summary.md`` beside."""

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
from workbench.store.study_record import ReportOptions, TargetSpec

SEED_COLUMNS = ["sweep", "method", "seed", "run_id", "axis", "x", "censored"]
SUMMARY_COLUMNS = ["sweep", "method", "axis", "reached", "n", "km_median", "median_text",
                   "seeds"]


def stem(target: TargetSpec) -> str:
    return f"target_{folder.slug(target.metric)}"


def reaches(d: SweepData, target: TargetSpec, axes: list[str]) -> pd.DataFrame:
    """Per seed of each method's best trial and per x-axis it logs: when it reached the
    target, or its last x, censored (``SEED_COLUMNS``)."""
    rows = []
    for m in d.methods:
        for _, seed in _finite(m.seeds).iterrows():
            for axis in axes:
                x, y = run_series(d, seed["run_id"], target.metric, axis)
                if x.size == 0:
                    continue
                r = stats_claims.first_reach(x, y, target.value, target.direction)
                rows.append([d.name, m.label, int(seed["seed"]), seed["run_id"], axis, r.x,
                             r.censored])
    return pd.DataFrame(rows, columns=SEED_COLUMNS)


def summary(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per method and axis: how many reached, the Kaplan-Meier median (``>N``, N the largest
    x seen, where it is not reached) and every seed's x (``SUMMARY_COLUMNS``)."""
    rows = []
    for (sweep, method, axis), g in per_seed.groupby(["sweep", "method", "axis"], sort=False):
        rs = [stats_claims.Reach(float(x), bool(c)) for x, c in zip(g["x"], g["censored"],
                                                                    strict=True)]
        median = stats_claims.km_median(rs)
        text = f"{median:g}" if math.isfinite(median) else f">{max(r.x for r in rs):g}"
        rows.append([sweep, method, axis, sum(not r.censored for r in rs), len(rs), median,
                     text, ", ".join(r.text() for r in rs)])
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def markdown(table: pd.DataFrame) -> str:
    lines = ["| sweep | method | x | reached | median (Kaplan-Meier) | seeds |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r.sweep} | {r.method} | {r.axis} | {r.reached} of {r.n} | {r.median_text} "
              f"| {r.seeds} |" for r in table.itertuples()]
    return "\n".join(lines) + "\n"


def target(sweeps: list[SweepData], options: ReportOptions, style: Style) -> Drawing | None:
    spec = options.target
    if spec is None:
        return None
    per_seed = pd.concat([reaches(d, spec, options.x_axes) for d in sweeps], ignore_index=True)
    if per_seed.empty:
        return None
    table = summary(per_seed)
    shown = [a for a in options.x_axes if a in set(per_seed["axis"])]
    fig, axes = _axes(len(shown), width=5.0)
    rows = list(dict.fromkeys(zip(per_seed["sweep"], per_seed["method"], strict=True)))
    methods = {(d.name, m.label): m for d in sweeps for m in d.methods}
    for ax, axis in zip(axes, shown, strict=True):
        labels = []
        for i, (sweep, label) in enumerate(rows):
            g = per_seed[(per_seed["sweep"] == sweep) & (per_seed["method"] == label)
                         & (per_seed["axis"] == axis)]
            s = table[(table["sweep"] == sweep) & (table["method"] == label)
                      & (table["axis"] == axis)]
            colour = style.colour(label)
            hit, cut = g[~g["censored"]], g[g["censored"]]
            ax.scatter(hit["x"], np.full(len(hit), i), color=colour, marker="o", s=28,
                       label="reached" if i == 0 else None)
            ax.scatter(cut["x"], np.full(len(cut), i), facecolors="none", edgecolors=colour,
                       marker="o", s=28, label="censored (never reached)" if i == 0 else None)
            if not s.empty and math.isfinite(s["km_median"].iloc[0]):
                ax.plot([s["km_median"].iloc[0]] * 2, [i - 0.3, i + 0.3], color=colour, lw=2)
            prefix = f"{sweep}: " if len(sweeps) > 1 else ""
            k, n = (int(s["reached"].iloc[0]), int(s["n"].iloc[0])) if not s.empty else (0, 0)
            labels.append(f"{prefix}{captions.name(methods[(sweep, label)])} "
                          f"(reached {k} of {n}; median {s['median_text'].iloc[0]})")
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        if stats.wants_log_scale(per_seed[per_seed["axis"] == axis]["x"]):
            _log_axis(ax, "x")
        ax.set_xlabel(UNITS.get(axis, axis))
        ax.grid(alpha=0.3, axis="x")
        ax.legend(fontsize=7, loc="lower right")
    word = ">=" if spec.direction == "maximize" else "<="
    _caption(fig, f"When each seed first reached {spec.metric} {word} {spec.value:g}: filled, "
                  "reached; hollow, censored at its last x (never reached); bar: the "
                  "Kaplan-Meier median (>N where at most half reached)", sweeps)
    numbers = {".csv": per_seed.to_csv(index=False), "_summary.csv": table.to_csv(index=False),
               "_summary.md": markdown(table)}
    return Drawing(stem(spec), fig, per_seed["run_id"].tolist(), sweeps, numbers)
