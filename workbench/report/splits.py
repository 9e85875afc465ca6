"""The ``split`` figure: a metric split by a condition (``METRIC_CONDITION``, e.g.
``eval/response_length_correct`` and ``_incorrect``), each condition's curve per method (one
line style per condition: solid, dashed, ...), the aggregate over seeds with its band
(``stats.interval_band``); ``split_METRIC.csv`` beside it holds every curve's numbers, computed
first (``numbers``) and drawn by ``draw``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.report import captions, folder
from workbench.report.data import SweepData, curve_on_grid
from workbench.report.figure_data import Numbers, finite_seeds
from workbench.report.figures import UNITS, Drawing, Style, _axes, _caption
from workbench.stats import aggregates as stats
from workbench.store.study_record import LINE_STYLES, ReportOptions, SplitSpec

COLUMNS = ["sweep", "method", "condition", "metric", "x", "centre", "low", "high", "n"]


def stem(spec: SplitSpec) -> str:
    suffix = "" if spec.x == "step" else f"_{folder.slug(spec.x)}"
    return f"split_{folder.slug(spec.metric)}{suffix}"


def numbers(sweeps: list[SweepData], spec: SplitSpec, options: ReportOptions) -> Numbers:
    """Per sweep, method and condition (``METRIC_CONDITION``) of each method's best trial:
    the seeds' curves on a common grid, the aggregate over seeds at every point and its band
    (``COLUMNS``)."""
    frames, used = [], []
    for d in sweeps:
        for m in d.methods:
            run_ids = finite_seeds(m.seeds)["run_id"].tolist()
            for part, name in zip(spec.by, spec.names(), strict=False):
                grid, values = curve_on_grid(d, run_ids, name, spec.x) if run_ids else (None,
                                                                                        None)
                if grid is None:
                    continue
                centre = np.array([stats.aggregate(values[:, j], options.aggregate)
                                   for j in range(values.shape[1])])
                low, high = stats.interval_band(values, options.aggregate,
                                                options.confidence, bounds=d.bounds(name))
                frames.append(pd.DataFrame({"sweep": d.name, "method": m.label,
                                            "condition": part, "metric": name, "x": grid,
                                            "centre": centre, "low": low, "high": high,
                                            "n": values.shape[0]}))
                used += run_ids
    table = pd.concat(frames, ignore_index=True)[COLUMNS] if frames else pd.DataFrame(
        columns=COLUMNS)
    return Numbers(table, sorted(set(used)))


def split(sweeps: list[SweepData], spec: SplitSpec, options: ReportOptions,
          style: Style) -> Drawing | None:
    """``numbers`` drawn by ``draw``."""
    return draw(numbers(sweeps, spec, options), sweeps, spec, options, style)


def draw(numbers: Numbers, sweeps: list[SweepData], spec: SplitSpec, options: ReportOptions,
         style: Style) -> Drawing | None:
    table = numbers.table
    if table.empty:
        return None
    fig, axes = _axes(len(sweeps))
    for ax, d in zip(axes, sweeps, strict=True):
        for m in d.methods:
            for part, dash in zip(spec.by, LINE_STYLES, strict=False):
                rows = table[(table["sweep"] == d.name) & (table["method"] == m.label)
                             & (table["condition"] == part)]
                if rows.empty:
                    continue
                grid = rows["x"].to_numpy(dtype=float)
                style.line(ax, m.label, grid, rows["centre"].to_numpy(dtype=float),
                           linestyle=dash)
                ax.lines[-1].set_label(f"{captions.name(m)}, {part} "
                                       f"(n={int(rows['n'].iloc[0])})")
                ax.fill_between(grid, rows["low"].to_numpy(dtype=float),
                                rows["high"].to_numpy(dtype=float),
                                color=style.colour(m.label), alpha=0.12, linewidth=0)
        ax.set_xlabel(UNITS.get(spec.x, spec.x))
        ax.set_ylabel(spec.metric)
        ax.set_title(d.name, fontsize=10)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    styles = ", ".join(f"{part} {word}" for part, word in
                       zip(spec.by, ("solid", "dashed", "dotted", "dash-dotted"), strict=False))
    _caption(fig, f"{spec.metric} split by condition ({styles}) of each method's best trial: "
                  f"{options.aggregate} over seeds (n in legend) with its band", sweeps,
             options)
    return Drawing(stem(spec), fig, numbers.run_ids, sweeps, {".csv": numbers.csv()})
