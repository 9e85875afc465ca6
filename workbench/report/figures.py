"""The report's figures, one function each; each returns a ``Drawing`` (or None when there is
nothing to draw) for ``entry`` to save beside its provenance and its numbers.

Each figure is two steps: ``figure_data`` computes its numbers as a tidy table, and a
``draw_*`` function here draws that table and nothing else; the table goes with the drawing,
saved as ``<stem>.csv`` beside ``<stem>.png`` and ``.pdf``. ``curves`` (and so on) do both.

- ``curves``: learning curves of each method's best trial on a common x-grid (each seed
  interpolated onto the grid, then aggregated), with its interval band at every point;
- ``final``: the objective per method (aggregate with its interval, every seed a tick), and
  across several sweeps the normalised scores with a stratified bootstrap;
- ``profiles``: performance profiles (fraction of runs at least as good as tau);
- ``best_of_k``: the expected best objective after k trials, with a bootstrap band;
- ``sensitivity``: the objective against each tuned hyperparameter, per method.

The axes' scales (log or linear) are chosen here, from the values the store holds. No pyplot:
no backend, no global state.
"""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass, field

import numpy as np
import optuna.distributions as od
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, LogLocator, MaxNLocator, NullFormatter

from workbench.report import captions, figure_data, folder
from workbench.report.data import SweepData, edge_trend, range_edge
from workbench.stats import aggregates as stats
from workbench.store.study_record import ReportOptions

# Paul Tol's colour-blind safe "muted" scheme without its pale grey (too faint for a line);
# every method also has its own marker, and past nine methods a dashed, dotted ... line, so 14
# and more stay apart even where two colours are close (the greens) or in black and white.
PALETTE = ["#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677",
           "#882255", "#AA4499"]
STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*", "h", "p", "d", "8"]
UNITS = {"step": "step (optimizer updates)", "cost/samples": "samples seen",
         "cost/grad_evals": "gradient evaluations", "cost/loss_evals": "loss evaluations",
         "time/wall_seconds": "wall seconds (optimizer time)", "cost/tokens": "tokens"}


@dataclass
class Drawing:
    stem: str  # the file name without suffix
    figure: Figure
    run_ids: list[str]  # the runs it shows
    sweeps: list[SweepData]
    numbers: dict[str, str] = field(default_factory=dict)  # file name suffix -> its numbers


class Style:
    """One colour, marker and line style per method label, the same in every figure."""

    def __init__(self, labels):
        self.of = {label: (PALETTE[i % len(PALETTE)], STYLES[i // len(PALETTE) % 4],
                           MARKERS[i % len(MARKERS)])
                   for i, label in enumerate(sorted(set(labels)))}

    def colour(self, label: str) -> str:
        return self.of[label][0]

    def marker(self, label: str) -> str:
        return self.of[label][2]

    def line(self, ax, label: str, x, y, **kwargs):
        colour, style, marker = self.of[label]
        kwargs.setdefault("marker", marker)
        kwargs.setdefault("markevery", max(1, len(x) // 8))
        kwargs.setdefault("markersize", 4)
        kwargs.setdefault("linestyle", style)
        return ax.plot(x, y, color=colour, label=label, **kwargs)


def curves(sweeps: list[SweepData], metric: str, axis: str, options: ReportOptions,
           style: Style) -> Drawing | None:
    """Learning curves: ``figure_data.curves`` drawn by ``draw_curves``."""
    return draw_curves(figure_data.curves(sweeps, metric, axis, options), sweeps, metric, axis,
                       options, style)


def draw_curves(numbers: figure_data.Numbers, sweeps: list[SweepData], metric: str, axis: str,
                options: ReportOptions, style: Style) -> Drawing | None:
    table = numbers.table
    if table.empty:
        return None
    fig, axes = _axes(len(sweeps))
    for ax, d in zip(axes, sweeps, strict=True):
        bands, centres = [], []
        for m in d.methods:
            rows = table[(table["sweep"] == d.name) & (table["method"] == m.label)]
            if rows.empty:
                continue
            grid, centre = rows["x"].to_numpy(dtype=float), rows["centre"].to_numpy(dtype=float)
            style.line(ax, m.label, grid, centre)
            bands.append((grid, rows["low"].to_numpy(dtype=float),
                          rows["high"].to_numpy(dtype=float), style.colour(m.label)))
            centres.append(centre)
            ax.lines[-1].set_label(f"{captions.name(m)} (n={int(rows['n_seeds'].iloc[0])})")
        history = d.history[d.history["key"] == metric]["value"]
        asked = options.log_axes.get(metric, [])  # the report's log_axes
        log = "y" in asked or (d.record.metric_directions.get(metric) == "minimize"
                               and stats.wants_log_scale(history))
        if "x" in asked:
            _log_axis(ax, "x")
        floor = None
        if log:
            _log_axis(ax, "y")
            lines = np.concatenate(centres) if centres else np.array([])
            lines = lines[np.isfinite(lines) & (lines > 0)]
            # the axis ends half a step below the lowest curve: a band reaching 0 or below
            # (an interval of few seeds) runs to it, not off the axis nor down 100 decades
            floor = float(lines.min()) / 2 if lines.size else None
        alpha = 0.18 * min(1.0, 4 / max(len(bands), 1))  # many bands stay see-through
        for grid, low, high, colour in bands:
            if floor is not None:
                low, high = np.maximum(low, floor), np.maximum(high, floor)
            ax.fill_between(grid, low, high, color=colour, alpha=alpha, linewidth=0)
        if floor is not None:
            ax.set_ylim(bottom=floor)
        ax.set_xlabel(UNITS.get(axis, axis))
        ax.set_ylabel(metric)
        ax.set_title(f"{d.name}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2 if len(d.methods) > 7 else 1)
    _caption(fig, f"{metric} of each method's best trial: {options.aggregate} over seeds (n "
                  "in legend) with its band", sweeps, options)
    return _drawing(folder.curves_stem(metric, axis), fig, numbers, sweeps)


def final(sweeps: list[SweepData], options: ReportOptions, style: Style) -> Drawing:
    """Final performance: ``figure_data.final`` drawn by ``draw_final``."""
    return draw_final(figure_data.final(sweeps, options), sweeps, options, style)


def draw_final(numbers: figure_data.Numbers, sweeps: list[SweepData], options: ReportOptions,
               style: Style) -> Drawing:
    table = numbers.table
    several = len(sweeps) > 1
    fig, axes = _axes(len(sweeps) + several, width=5.5)
    if several:
        _final_across(axes[-1], table[table["kind"] == "pooled"], len(sweeps), style)
    for ax, d in zip(axes, sweeps, strict=False):
        mine = table[table["sweep"] == d.name]
        centres = mine[mine["kind"] == "aggregate"]
        methods = {m.label: m for m in d.methods}
        bars = []  # per method: its seeds' values, the centre and the interval
        for row in centres.itertuples():
            values = mine[(mine["kind"] == "seed") & (mine["method"] == row.method)]["value"]
            bars.append((values.to_numpy(dtype=float), row.value, row.low, row.high))
        log = bool(bars) and d.direction == "minimize" and stats.wants_log_scale(
            mine[mine["kind"] == "seed"]["value"])
        floor = _final_floor(bars) if log else None
        for i, (label, (values, centre, low, high)) in enumerate(
                zip(centres["method"], bars, strict=True)):
            if floor is not None:  # an interval reaching 0 stops at the axis' end
                low, high = max(low, floor), max(high, floor)
            err = None if math.isnan(low) else [[centre - low], [high - centre]]
            ax.errorbar(centre, i, xerr=err, fmt=style.marker(label),
                        color=style.colour(label), capsize=3)
            finite = values[np.isfinite(values)]  # every seed as a point below its interval
            ax.scatter(finite, np.full(finite.size, i - 0.18), marker="|", s=40,
                       color=style.colour(label), alpha=0.7)
        ax.set_yticks(range(len(bars)),
                      [f"{captions.name(methods[row.method])} (n={row.n})"
                       for row in centres.itertuples()])
        ax.set_xlabel(f"{d.metric} ({d.record.at}; "
                      f"{'lower' if d.direction == 'minimize' else 'higher'} is better)")
        if floor is not None:
            _log_axis(ax, "x", nonpositive="clip")
            ax.set_xlim(left=floor)
        ax.set_title(d.name, fontsize=10)
        ax.grid(alpha=0.3, axis="x")
    _caption(fig, f"{options.aggregate.upper()} over seeds of each method's best trial with "
                  "its interval; ticks below: every seed", sweeps, options)
    return _drawing("final", fig, numbers, sweeps)


def _final_floor(bars) -> float | None:
    """The left end of ``final``'s log axis: half the smallest positive seed value or centre
    (an interval reaching 0 or below stops there, as a curve's band does)."""
    points = np.concatenate([np.append(values, centre) for values, centre, _, _ in bars])
    points = points[np.isfinite(points) & (points > 0)]
    return float(points.min()) / 2 if points.size else None


def _final_across(ax, pooled: pd.DataFrame, count: int, style: Style) -> None:
    if pooled.empty:
        ax.text(0.5, 0.5, "no method has runs on every sweep:\nno scores to pool",
                ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_axis_off()
        ax.set_title(f"all {count} sweeps", fontsize=10)
        return
    for i, row in enumerate(pooled.itertuples()):
        centre, low, high = row.value, row.low, row.high
        err = None if math.isnan(low) else [[centre - low], [high - centre]]
        ax.errorbar(centre, i, xerr=err, fmt="o", color=style.colour(row.method), capsize=3)
    ax.set_yticks(range(len(pooled)), [f"{row.method} (n={row.n})"
                                       for row in pooled.itertuples()])
    ax.set_xlabel("normalised score per sweep (1 = best run, 0 = worst; higher is better)")
    ax.set_title(f"all {count} sweeps: stratified percentile bootstrap",
                 fontsize=10)
    ax.grid(alpha=0.3, axis="x")


def profiles(sweeps: list[SweepData], style: Style) -> Drawing:
    """Performance profiles: ``figure_data.profiles`` drawn by ``draw_profiles``."""
    return draw_profiles(figure_data.profiles(sweeps), sweeps, style)


def draw_profiles(numbers: figure_data.Numbers, sweeps: list[SweepData],
                  style: Style) -> Drawing:
    table = numbers.table
    fig, axes = _axes(len(sweeps), width=5.5)
    for ax, d in zip(axes, sweeps, strict=True):
        mine = table[table["sweep"] == d.name]
        if mine.empty:
            continue
        taus = mine["tau"].to_numpy(dtype=float)
        for m in d.methods:
            rows = mine[mine["method"] == m.label]
            if rows.empty:
                continue
            style.line(ax, m.label, rows["tau"].to_numpy(dtype=float),
                       rows["fraction"].to_numpy(dtype=float), drawstyle="steps-post")
            ax.lines[-1].set_label(f"{captions.name(m)} (n={int(rows['n_seeds'].iloc[0])})")
        if figure_data.profile_log(d.direction, taus):
            _log_axis(ax, "x")
        sign = "≤" if d.direction == "minimize" else "≥"
        ax.set_xlabel(f"threshold τ on {d.metric}")
        ax.set_ylabel(f"fraction of runs with score {sign} τ")
        ax.set_title(d.name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _caption(fig, "Performance profiles of each method's best trial over seeds", sweeps)
    return _drawing("profiles", fig, numbers, sweeps)


def best_of_k(sweeps: list[SweepData], options: ReportOptions, style: Style) -> Drawing:
    """The tuning budget: ``figure_data.best_of_k`` drawn by ``draw_best_of_k``."""
    return draw_best_of_k(figure_data.best_of_k(sweeps, options), sweeps, style)


def draw_best_of_k(numbers: figure_data.Numbers, sweeps: list[SweepData],
                   style: Style) -> Drawing:
    table = numbers.table
    fig, axes = _axes(len(sweeps), width=5.5)
    for ax, d in zip(axes, sweeps, strict=True):
        shown = []
        for m in d.methods:
            rows = table[(table["sweep"] == d.name) & (table["method"] == m.label)]
            if rows.empty:
                continue
            shown.append(figure_data.complete_trials(m))  # the axis' scale: as the trials'
            k = rows["k"].to_numpy()
            style.line(ax, m.label, k, rows["expected_best"].to_numpy(dtype=float),
                       markevery=1)
            n = int(rows["n_trials"].iloc[0])
            ax.lines[-1].set_label(f"{m.label} ({n} complete trials)")
            if n > 1:
                ax.fill_between(k, rows["low"].to_numpy(dtype=float),
                                rows["high"].to_numpy(dtype=float), color=style.colour(m.label),
                                alpha=0.15, linewidth=0)
        if shown and d.direction == "minimize":  # as the curves and the final figure do
            _log_if_wide(ax, np.concatenate(shown), "y")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("k (trials of tuning)")
        ax.set_ylabel(f"expected best {d.metric}")
        ax.set_title(d.name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Tuning budget: expected best objective after k trials (Dodge et al. "
                 "2019), bootstrap band over trials", fontsize=10)
    fig.tight_layout()
    return _drawing("best_of_k", fig, numbers, sweeps)


def sensitivity(d: SweepData, style: Style) -> Drawing | None:
    """Sensitivity to each tuned hyperparameter: ``figure_data.sensitivity`` drawn by
    ``draw_sensitivity``."""
    return draw_sensitivity(figure_data.sensitivity(d), d, style)


def draw_sensitivity(numbers: figure_data.Numbers, d: SweepData,
                     style: Style) -> Drawing | None:
    tuned = [(m, name) for m in d.methods for name in m.space]
    if not tuned:
        return None
    table = numbers.table
    cols = min(4, len(tuned))
    rows = math.ceil(len(tuned) / cols)
    fig = Figure(figsize=(4 * cols, 3.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    params = d.params.set_index("run_id") if "run_id" in d.params else pd.DataFrame()
    for ax, (m, name) in zip(axes.flat, tuned, strict=False):
        mine = table[(table["method"] == m.label) & (table["hyperparameter"] == name)]
        done, pruned = mine[mine["status"] == "complete"], mine[mine["status"] == "pruned"]
        x, x_pruned = done["x"].to_numpy(dtype=float), pruned["x"].to_numpy(dtype=float)
        dist = m.space[name]
        if isinstance(dist, od.CategoricalDistribution):
            ax.set_xticks(range(len(dist.choices)), [str(c) for c in dist.choices])
        else:
            if getattr(dist, "log", False):
                _log_axis(ax, "x")
                ax.set_xlim(dist.low / 1.3, dist.high * 1.3)
                ax.xaxis.set_major_locator(LogLocator(numticks=5))  # labels that do not touch
                ax.xaxis.set_minor_formatter(NullFormatter())
            else:
                pad = 0.05 * (dist.high - dist.low) or 0.5
                ax.set_xlim(dist.low - pad, dist.high + pad)
            for end in (dist.low, dist.high):  # the search range
                ax.axvline(end, color="0.5", linestyle="--", linewidth=0.8)
        ax.scatter(x, done["objective"], color=style.colour(m.label), s=18,
                   marker=style.marker(m.label))
        if len(x_pruned):  # no objective: a tick on the bottom edge where each was tried
            ax.scatter(x_pruned, np.full(len(x_pruned), 0.03), marker="x", s=22,
                       color="0.45", transform=ax.get_xaxis_transform(), clip_on=False)
        short = name.split('.', 1)[-1]
        title = f"{m.label}: {short}"
        edge = _best_edge(params, m, name, dist)
        if edge:
            title += "\n" + captions.edge_advice(edge, edge_trend(d, m, name), short)
        ax.set_title(title, fontsize=9, color="firebrick" if edge else "black")
        ax.set_ylabel(d.metric, fontsize=8)
        if d.direction == "minimize":
            _log_if_wide(ax, done["objective"], "y")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tuned):]:
        ax.axis("off")
    fig.suptitle(f"{d.name}: objective of every complete trial against each tuned "
                 "hyperparameter (dashed: the search range; x on the bottom edge: a pruned "
                 "or diverged trial)", fontsize=10)
    fig.tight_layout()
    return _drawing(folder.sensitivity_stem(d.name), fig, numbers, [d])


def _drawing(stem: str, fig: Figure, numbers: figure_data.Numbers,
             sweeps: list[SweepData]) -> Drawing:
    """The drawing with its numbers, saved beside it as ``<stem>.csv``."""
    return Drawing(stem, fig, numbers.run_ids, sweeps, {".csv": numbers.csv()})


def _best_edge(params: pd.DataFrame, m, name: str, dist) -> str | None:
    """Which end of its range the best trial's value of ``name`` sits at, if any."""
    if m.best_run is None or m.best_run not in params.index or name not in params:
        return None
    return range_edge(params.loc[m.best_run, name], dist)


_finite = figure_data.finite_seeds


def _caption(fig: Figure, title: str, sweeps: list[SweepData],
             options: ReportOptions | None = None) -> None:
    """The figure's title with what every caption says: the seeds of selection and of the
    figure, the intervals, the marks; wrapped to the figure's width."""
    width = max(60, int(fig.get_figwidth() * 15))
    parts = [title + "."]
    for d in sweeps:
        prefix = f"{d.name}: " if len(sweeps) > 1 else ""
        parts.append(f"{prefix}{captions.selection(d)}.")
    if options is not None:
        counts = [len(m.seeds) for d in sweeps for m in d.methods]
        parts.append(captions.intervals(options.aggregate, options.confidence, counts) + ".")
    marks = captions.marks(m for d in sweeps for m in d.methods)
    if marks:
        parts.append(marks + ".")
    text = "\n".join(textwrap.fill(part, width) for part in parts)
    lines = text.count("\n") + 1
    fig.suptitle(text, fontsize=8, ha="left", x=0.01)
    fig.set_figheight(fig.get_figheight() + 0.14 * lines)
    fig.tight_layout()  # it leaves room for the suptitle


def warm_up() -> None:
    """Load the fonts and the PNG and PDF writers once (a forked worker then inherits them)."""
    fig = Figure(figsize=(1, 1))
    fig.text(0.5, 0.5, "0123456789 warm-up τ ≤ ‡ ⁻³", fontsize=8)
    fig.text(0.5, 0.2, "warm-up", fontsize=10)
    for form in ("png", "pdf"):
        fig.savefig(io.BytesIO(), format=form, dpi=120)


def _axes(count: int, width: float = 6.0):
    fig = Figure(figsize=(max(width * count, 8.0), 4.6))
    axes = fig.subplots(1, count, squeeze=False)
    return fig, axes[0]


def _log_if_wide(ax, values, which: str, nonpositive: str = "mask") -> None:
    """A log scale where ``stats.wants_log_scale`` says so."""
    if stats.wants_log_scale(values):
        _log_axis(ax, which, nonpositive)


def _log_axis(ax, which: str, nonpositive: str = "mask") -> None:
    """A log scale on the ``x`` or ``y`` axis, labelled in plain text (``PlainLogLabels``)."""
    (ax.set_yscale if which == "y" else ax.set_xscale)("log", nonpositive=nonpositive)
    axis = ax.yaxis if which == "y" else ax.xaxis
    axis.set_major_formatter(PlainLogLabels())
    axis.set_minor_formatter(PlainLogLabels(minor=True))


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


class PlainLogLabels(Formatter):
    """Log-axis tick labels as plain text: ``10⁻³`` at the powers of ten (``1`` and ``10`` for
    the first two), ``0.02`` between them, which minor ticks show only where the axis spans
    less than a decade. matplotlib's own labels are mathtext, and parsing each one (pyparsing)
    took a second of a quickstart report."""

    def __init__(self, minor: bool = False):
        self.minor = minor

    def __call__(self, x, pos=None) -> str:
        if not x > 0 or not math.isfinite(x):
            return ""
        exponent = round(math.log10(x))
        if math.isclose(x, 10.0 ** exponent, rel_tol=1e-9):
            if self.minor:
                return ""
            return {0: "1", 1: "10"}.get(exponent, "10" + str(exponent).translate(_SUPERSCRIPT))
        if self.minor:
            low, high = sorted(abs(v) for v in self.axis.get_view_interval())
            if low <= 0 or high / low >= 10:
                return ""
        return f"{x:g}"
