"""The report's figures, one function each; each returns a ``Drawing`` (or None when there is
nothing to draw) for ``entry`` to save beside its provenance.

- ``curves``: learning curves of each method's best trial on a common x-grid (each seed
  interpolated onto the grid, then aggregated), with bootstrap bands;
- ``final``: the objective per method (aggregate with its bootstrap interval), and across
  several sweeps the normalised scores with a stratified bootstrap;
- ``profiles``: performance profiles (fraction of runs at least as good as tau);
- ``best_of_k``: the expected best objective after k trials, with a bootstrap band;
- ``sensitivity``: the objective against each tuned hyperparameter, per method.

Every interval is drawn by ``workbench.stats.aggregates``. No pyplot: no backend, no global state.
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

from workbench.report import captions, folder
from workbench.report.data import SweepData, curve_on_grid, pooled_scores, range_edge
from workbench.stats import aggregates as stats
from workbench.store import runs
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
BEST_OF_K_RESAMPLES = 200


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
    fig, axes = _axes(len(sweeps))
    used, drawn = [], False
    for ax, d in zip(axes, sweeps, strict=True):
        bands, centres = [], []
        for m in d.methods:
            shown = _finite(m.seeds)  # a diverged held-out seed has no whole curve
            if shown.empty:
                continue
            grid, values = curve_on_grid(d, shown["run_id"].tolist(), metric, axis)
            if grid is None:
                continue
            centre = np.array([stats.aggregate(values[:, j], options.aggregate)
                               for j in range(values.shape[1])])
            low, high = stats.interval_band(values, options.aggregate, options.confidence,
                                            bounds=d.bounds(metric))
            style.line(ax, m.label, grid, centre)
            bands.append((grid, low, high, style.colour(m.label)))
            centres.append(centre)
            ax.lines[-1].set_label(f"{captions.name(m)} (n={values.shape[0]})")
            used += shown["run_id"].tolist()
            drawn = True
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
    return Drawing(folder.curves_stem(metric, axis), fig, used, sweeps) if drawn else None


def final(sweeps: list[SweepData], options: ReportOptions, style: Style) -> Drawing:
    several = len(sweeps) > 1
    fig, axes = _axes(len(sweeps) + several, width=5.5)
    used = []
    if several:
        _final_across(axes[-1], sweeps, options, style)
    for ax, d in zip(axes, sweeps, strict=False):
        methods = [m for m in d.methods if not m.seeds.empty]
        bars = []  # per method: its seeds' values, the centre and the interval
        for m in methods:
            values = m.seeds["objective"].to_numpy(dtype=float)
            bars.append((values, stats.aggregate(values, options.aggregate),
                         stats.interval(values, options.aggregate, options.confidence,
                                        d.bounds(d.metric))))
            used += m.seeds["run_id"].tolist()
        log = bool(methods) and d.direction == "minimize" and stats.wants_log_scale(
            pd.concat([m.seeds["objective"] for m in methods]))
        floor = _final_floor(bars) if log else None
        for i, (m, (values, centre, interval)) in enumerate(zip(methods, bars, strict=True)):
            low, high = interval.low, interval.high
            if floor is not None:  # an interval reaching 0 stops at the axis' end
                low, high = max(low, floor), max(high, floor)
            err = None if math.isnan(low) else [[centre - low], [high - centre]]
            ax.errorbar(centre, i, xerr=err, fmt=style.marker(m.label),
                        color=style.colour(m.label), capsize=3)
            finite = values[np.isfinite(values)]  # every seed as a point below its interval
            ax.scatter(finite, np.full(finite.size, i - 0.18), marker="|", s=40,
                       color=style.colour(m.label), alpha=0.7)
        ax.set_yticks(range(len(methods)),
                      [f"{captions.name(m)} (n={len(m.seeds)})" for m in methods])
        ax.set_xlabel(f"{d.metric} ({d.record.at}; "
                      f"{'lower' if d.direction == 'minimize' else 'higher'} is better)")
        if floor is not None:
            _log_axis(ax, "x", nonpositive="clip")
            ax.set_xlim(left=floor)
        ax.set_title(d.name, fontsize=10)
        ax.grid(alpha=0.3, axis="x")
    _caption(fig, f"{options.aggregate.upper()} over seeds of each method's best trial with "
                  "its interval; ticks below: every seed", sweeps, options)
    return Drawing("final", fig, used, sweeps)


def _final_floor(bars) -> float | None:
    """The left end of ``final``'s log axis: half the smallest positive seed value or centre
    (an interval reaching 0 or below stops there, as a curve's band does)."""
    points = np.concatenate([np.append(values, centre) for values, centre, _ in bars])
    points = points[np.isfinite(points) & (points > 0)]
    return float(points.min()) / 2 if points.size else None


def _final_across(ax, sweeps: list[SweepData], options: ReportOptions, style: Style) -> None:
    pooled = pooled_scores(sweeps)
    if not pooled:
        ax.text(0.5, 0.5, "no method has runs on every sweep:\nno scores to pool",
                ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_axis_off()
        ax.set_title(f"all {len(sweeps)} sweeps", fontsize=10)
        return
    for i, (label, (scores, strata)) in enumerate(pooled.items()):
        centre = stats.aggregate(scores, options.aggregate)
        low, high = stats.bootstrap_ci(scores, options.aggregate, options.confidence,
                                       options.resamples, strata=strata)
        err = None if math.isnan(low) else [[centre - low], [high - centre]]
        ax.errorbar(centre, i, xerr=err, fmt="o", color=style.colour(label), capsize=3)
    ax.set_yticks(range(len(pooled)), [f"{k} (n={len(v[0])})" for k, v in pooled.items()])
    ax.set_xlabel("normalised score per sweep (1 = best run, 0 = worst; higher is better)")
    ax.set_title(f"all {len(sweeps)} sweeps: stratified percentile bootstrap",
                 fontsize=10)
    ax.grid(alpha=0.3, axis="x")


def profiles(sweeps: list[SweepData], style: Style) -> Drawing:
    fig, axes = _axes(len(sweeps), width=5.5)
    used = []
    for ax, d in zip(axes, sweeps, strict=True):
        methods = [m for m in d.methods if not m.seeds.empty]
        everything = np.concatenate([m.seeds["objective"].to_numpy(dtype=float)
                                     for m in methods]) if methods else np.array([])
        everything = everything[np.isfinite(everything)]
        if everything.size == 0:
            continue
        log = (d.direction == "minimize" and (everything > 0).all()
               and everything.max() > 20 * everything.min())
        taus = (np.geomspace(everything.min(), everything.max(), 200) if log
                else np.linspace(everything.min(), everything.max(), 200))
        for m in methods:
            frac = stats.performance_profile(m.seeds["objective"], taus, d.direction)
            style.line(ax, m.label, taus, frac, drawstyle="steps-post")
            ax.lines[-1].set_label(f"{captions.name(m)} (n={len(m.seeds)})")
            used += m.seeds["run_id"].tolist()
        if log:
            _log_axis(ax, "x")
        sign = "≤" if d.direction == "minimize" else "≥"
        ax.set_xlabel(f"threshold τ on {d.metric}")
        ax.set_ylabel(f"fraction of runs with score {sign} τ")
        ax.set_title(d.name, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _caption(fig, "Performance profiles of each method's best trial over seeds", sweeps)
    return Drawing("profiles", fig, used, sweeps)


def best_of_k(sweeps: list[SweepData], options: ReportOptions, style: Style) -> Drawing:
    fig, axes = _axes(len(sweeps), width=5.5)
    used = []
    rng = np.random.default_rng(0)  # one stream for every band, drawn in turn
    for ax, d in zip(axes, sweeps, strict=True):
        shown = []
        for m in d.methods:
            values = m.trials[m.trials["status"] == runs.FINISHED]["objective"].dropna()
            values = values.to_numpy(dtype=float)
            if values.size == 0:
                continue
            shown.append(values)
            curve = stats.expected_best_of_k(values, d.direction)
            k = np.arange(1, values.size + 1)
            style.line(ax, m.label, k, curve, markevery=1)
            ax.lines[-1].set_label(f"{m.label} ({values.size} complete trials)")
            if values.size > 1:
                low, high = stats.best_of_k_band(values, d.direction, options.confidence,
                                                 BEST_OF_K_RESAMPLES, seed=rng)
                ax.fill_between(k, low, high, color=style.colour(m.label), alpha=0.15,
                                linewidth=0)
            used += m.trials["run_id"].tolist()
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
    return Drawing("best_of_k", fig, used, sweeps)


def sensitivity(d: SweepData, style: Style) -> Drawing | None:
    tuned = [(m, name) for m in d.methods for name in m.space]
    if not tuned:
        return None
    cols = min(4, len(tuned))
    rows = math.ceil(len(tuned) / cols)
    fig = Figure(figsize=(4 * cols, 3.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    used = []
    params = d.params.set_index("run_id") if "run_id" in d.params else pd.DataFrame()
    for ax, (m, name) in zip(axes.flat, tuned, strict=False):
        done = m.trials[(m.trials["status"] == runs.FINISHED) & m.trials["objective"].notna()]
        pruned = m.trials[m.trials["status"] == runs.KILLED]
        dist = m.space[name]
        x, x_pruned = (_positions(params.reindex(t["run_id"]).get(name, pd.Series(
            dtype=object)), dist) for t in (done, pruned))
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
        used += done["run_id"].tolist() + pruned["run_id"].tolist()
        title = f"{m.label}: {name.split('.', 1)[-1]}"
        edge = _best_edge(params, m, name, dist)
        if edge:
            title += f"\nbest at the range's {edge} end: widen it"
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
    return Drawing(folder.sensitivity_stem(d.name), fig, used, [d])


def _positions(raw: pd.Series, dist) -> np.ndarray:
    """Where values of a hyperparameter go on its axis: the number, or a choice's index."""
    if isinstance(dist, od.CategoricalDistribution):
        labels = [str(c) for c in dist.choices]
        return np.array([labels.index(str(v)) if str(v) in labels else np.nan for v in raw],
                        dtype=float)
    return pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)


def _best_edge(params: pd.DataFrame, m, name: str, dist) -> str | None:
    """Which end of its range the best trial's value of ``name`` sits at, if any."""
    if m.best_run is None or m.best_run not in params.index or name not in params:
        return None
    return range_edge(params.loc[m.best_run, name], dist)


def _finite(seeds: pd.DataFrame) -> pd.DataFrame:
    return seeds[np.isfinite(seeds["objective"].to_numpy(dtype=float))]


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
