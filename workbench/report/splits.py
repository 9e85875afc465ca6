"""The ``split`` figure: a metric split by a condition (``METRIC_CONDITION``, e.g.
``eval/response_length_correct`` and ``_incorrect``), each condition's curve per method (one
line style per condition: solid, dashed, ...), the aggregate over seeds with its band
(``stats.interval_band``); ``split_METRIC.csv`` beside it holds every curve's numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.report import captions, folder
from workbench.report.data import SweepData, curve_on_grid
from workbench.report.figures import UNITS, Drawing, Style, _axes, _caption, _finite
from workbench.stats import aggregates as stats
from workbench.store.study_record import LINE_STYLES, ReportOptions, SplitSpec

COLUMNS = ["sweep", "method", "condition", "metric", "x", "centre", "low", "high", "n"]


def stem(spec: SplitSpec) -> str:
    suffix = "" if spec.x == "step" else f"_{folder.slug(spec.x)}"
    return f"split_{folder.slug(spec.metric)}{suffix}"


def split(sweeps: list[SweepData], spec: SplitSpec, options: ReportOptions,
          style: Style) -> Drawing | None:
    fig, axes = _axes(len(sweeps))
    frames, used = [], []
    for ax, d in zip(axes, sweeps, strict=True):
        for m in d.methods:
            run_ids = _finite(m.seeds)["run_id"].tolist()
            for part, name, dash in zip(spec.by, spec.names(), LINE_STYLES, strict=False):
                grid, values = curve_on_grid(d, run_ids, name, spec.x) if run_ids else (None,
                                                                                        None)
                if grid is None:
                    continue
                centre = np.array([stats.aggregate(values[:, j], options.aggregate)
                                   for j in range(values.shape[1])])
                low, high = stats.interval_band(values, options.aggregate,
                                                options.confidence, bounds=d.bounds(name))
                style.line(ax, m.label, grid, centre, linestyle=dash)
                ax.lines[-1].set_label(f"{captions.name(m)}, {part} (n={values.shape[0]})")
                ax.fill_between(grid, low, high, color=style.colour(m.label), alpha=0.12,
                                linewidth=0)
                frames.append(pd.DataFrame({"sweep": d.name, "method": m.label,
                                            "condition": part, "metric": name, "x": grid,
                                            "centre": centre, "low": low, "high": high,
                                            "n": values.shape[0]}))
                used += run_ids
        ax.set_xlabel(UNITS.get(spec.x, spec.x))
        ax.set_ylabel(spec.metric)
        ax.set_title(d.name, fontsize=10)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    if not frames:
        return None
    styles = ", ".join(f"{part} {word}" for part, word in
                       zip(spec.by, ("solid", "dashed", "dotted", "dash-dotted"), strict=False))
    _caption(fig, f"{spec.metric} split by condition ({styles}) of each method's best trial: "
                  f"{options.aggregate} over seeds (n in legend) with its band", sweeps,
             options)
    numbers = {".csv": pd.concat(frames, ignore_index=True)[COLUMNS].to_csv(index=False)}
    return Drawing(stem(spec), fig, sorted(set(used)), sweeps, numbers)
