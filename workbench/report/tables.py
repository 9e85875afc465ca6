"""The report's tables: one object each, rendered to its formats.

- ``ResultsTable``: a sweep's methods as rows (IQM and mean with bootstrap intervals, steps to a
  target, trials used, pruned, diverged and failed counts, best hyperparameters), the best per
  column in bold and reconstructed methods marked with a dagger; as Markdown, LaTeX, HTML and
  CSV.
- ``ImprovementTable``: the probability of improvement of each method over each other, as
  Markdown and CSV.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from workbench.report import captions
from workbench.report.data import (
    EDGE_FRACTION,
    MethodData,
    SweepData,
    edge_trend,
    range_edge,
    steps_to_target,
)
from workbench.stats import aggregates as stats
from workbench.stats import claims as stats_claims
from workbench.stats.claims import EdgeTrend
from workbench.store import runs
from workbench.store.study_record import ReportOptions


@dataclass
class ResultsTable:
    frame: pd.DataFrame  # the CSV: one row per method
    best: dict[str, int]  # column -> the row that is best in it
    caption: str
    confidence: float
    with_target: bool
    run_ids: list[str]  # the runs it shows

    @classmethod
    def of(cls, d: SweepData, options: ReportOptions) -> ResultsTable:
        rows, used = [], []
        for m in d.methods:
            rows.append(_row(d, m, options))
            used += m.trials["run_id"].tolist() + m.seeds["run_id"].tolist()
        frame = pd.DataFrame(rows)
        caption = (f"{d.name}: {d.metric} ({d.direction}, {d.record.at}); "
                   f"{captions.selection(d)}. "
                   f"{captions.intervals(('iqm', 'mean'), options.confidence, frame['seeds'])}"
                   f"; 'iqm' is the interquartile mean (25% trimmed). Best per column in bold.")
        low, high = d.bounds(d.metric)
        if math.isfinite(low) or math.isfinite(high):
            caption += (f" Intervals stop at the ends of {d.metric}'s range "
                        f"[{low:g}, {high:g}].")
        marks = captions.marks(d.methods)
        if marks:
            caption += f" {marks}."
        if any(EDGE_NOTE in row["best_params"] for row in rows):
            caption += (f" 'edge': the best value lies within {EDGE_FRACTION:.0%} of an end "
                        "of its search range (in the range's scale, log or linear): the range "
                        "may have decided the ranking; widen it and tune again.")
        if any(IMPROVING_NOTE in row["best_params"] for row in rows):
            caption += (f" '{IMPROVING_NOTE[1:-1]}': over the {stats_claims.EDGE_TRIALS} "
                        "complete trials nearest that end the objective still improves "
                        "toward it (one-sided exact Spearman test, p <= "
                        f"{stats_claims.EDGE_ALPHA:g}): no interior optimum was found in the "
                        "range, and a wider one may only move the best to its new end (the "
                        "sensitivity figure gives the trend).")
        current = frame[[m.superseded is None for m in d.methods]]
        return cls(frame, _best_cells(current, d.direction), caption, options.confidence,
                   options.target is not None, used)

    def csv(self) -> str:
        return self.frame.to_csv(index=False)

    def markdown(self) -> str:
        head, body = self._cells(lambda t: f"**{t}**", " †")
        lines = [self.caption, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body]) + "\n"

    def latex(self) -> str:
        head, body = self._cells(lambda t: f"\\textbf{{{_tex(t)}}}", r" $\dagger$")
        lines = [r"\begin{table}[t]", r"\centering", r"\small",
                 r"\begin{tabular}{" + "l" * len(head) + "}", r"\toprule",
                 " & ".join(_tex(h) for h in head) + r" \\", r"\midrule"]
        lines += [" & ".join(c if c.startswith("\\textbf") or "dagger" in c else _tex(c)
                             for c in r) + r" \\" for r in body]
        lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{_tex(self.caption)}}}",
                  r"\end{table}"]
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        head, body = self._cells(lambda t: f"<b>{html.escape(t)}</b>", " †")
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        rows = "".join("<tr>" + "".join(
            f"<td>{c if c.startswith('<b>') else html.escape(c)}</td>" for c in r) + "</tr>"
            for r in body)
        return (f"<table class='results'><caption>{html.escape(self.caption)}</caption>"
                f"<thead><tr>{cells}</tr></thead><tbody>{rows}</tbody></table>\n")

    def _cells(self, bold: Callable[[str], str], dagger: str) -> tuple[list[str], list[list[str]]]:
        head = ["method", f"IQM [{self.confidence:.0%} CI]",
                f"mean [{self.confidence:.0%} CI]", "seeds"]
        if self.with_target:
            head += ["steps to target (median; not reached)"]
        head += ["trials", "pruned", "diverged", "failed", "best hyperparameters"]
        body = []
        for i, row in self.frame.iterrows():
            def cell(column, text, i=i):
                return bold(text) if self.best.get(column) == i else text

            iqm = _interval(row["iqm"], row["iqm_low"], row["iqm_high"])
            if 0 < row["seeds"] < 4:
                iqm += " (= mean)"
            cells = [row["method"] + (dagger if row["fidelity"] != "reference-checked" else "")
                     + (f" {captions.STALE}" if row["stale"] else ""),
                     cell("iqm", iqm),
                     cell("mean", _interval(row["mean"], row["mean_low"], row["mean_high"])),
                     str(row["seeds"])]
            if self.with_target:
                steps = "—" if pd.isna(row["steps_to_target"]) else f"{row['steps_to_target']:g}"
                cells.append(cell("steps_to_target", f"{steps}; {row['not_reached']} of "
                                                     f"{row['seeds']}"))
            cells += [row["trials"], str(row["pruned"]), str(row["diverged"]),
                      str(row["failed"]), row["best_params"]]
            body.append(cells)
        return head, body


def _row(d: SweepData, m: MethodData, options: ReportOptions) -> dict:
    trials = m.trials
    pruned = trials[trials["status"] == runs.KILLED]
    diverged = int((pruned.get("reason") == "diverged").sum())
    counted = int(trials["status"].isin([runs.FINISHED, runs.KILLED]).sum())
    row = {"method": m.label, "fidelity": m.fidelity, "seeds": len(m.seeds),
           "shown_on": "held-out" if m.held_out else "tuning",
           "trials": f"{counted}/{m.n_trials}", "pruned": len(pruned) - diverged,
           "diverged": diverged, "failed": int((trials["status"] == runs.FAILED).sum()),
           "stale": m.stale or "", "fingerprint": m.fingerprint}
    values = m.seeds["objective"].to_numpy(dtype=float)
    for how in ("iqm", "mean"):
        row[how] = stats.aggregate(values, how)
        interval = stats.interval(values, how, options.confidence, d.bounds(d.metric))
        row[f"{how}_low"], row[f"{how}_high"] = interval.low, interval.high
    if options.target:
        row["steps_to_target"], row["not_reached"] = steps_to_target(d, m, options.target)
    row["best_params"] = _best_params(d, m)
    return row


def _best_params(d: SweepData, m: MethodData) -> str:
    if m.best_run is None or not m.space:
        return "" if m.best_run is None else "(none tuned)"
    row = d.params[d.params["run_id"] == m.best_run]
    return ", ".join(_best_value(k, row[k].iloc[0], m.space[k], edge_trend(d, m, k))
                     for k in m.space if k in row)


EDGE_NOTE = "edge:"
IMPROVING_NOTE = "(still improving)"


def _best_value(name: str, value, dist, trend: EdgeTrend | None = None) -> str:
    """``lr=9.843``, flagged where it lies at an end of its search range (``range_edge``),
    and, where the objective still improves toward that end (``trend``), marked so."""
    text = f"{name.split('.', 1)[1]}={_fmt(value)}"
    edge = range_edge(value, dist)
    if not edge:
        return text
    text = f"{text} ({EDGE_NOTE} {edge} end of {_fmt(dist.low)}-{_fmt(dist.high)})"
    return f"{text} {IMPROVING_NOTE}" if trend is not None and trend.improving else text


def _best_cells(table: pd.DataFrame, direction: str) -> dict[str, int]:
    best = {}
    for column, goal in (("iqm", direction), ("mean", direction),
                         ("steps_to_target", "minimize")):
        if column in table and table[column].notna().any():
            values = table[column]
            best[column] = int(values.idxmin() if goal == "minimize" else values.idxmax())
    return best


@dataclass
class ImprovementTable:
    """P(row beats column) for a random seed of each method's best trial; a cell between
    methods with fewer than ``stats.SMALL_N`` seeds is marked unreliable."""

    sweep: str
    matrix: pd.DataFrame
    run_ids: list[str]
    counts: dict[str, int]  # label -> seeds
    selection: str  # the seeds note (``captions.selection``)

    @classmethod
    def of(cls, d: SweepData) -> ImprovementTable | None:
        """None below two methods with seeds."""
        methods = [m for m in d.methods if not m.seeds.empty]
        if len(methods) < 2:
            return None
        labels = [m.label for m in methods]
        matrix = pd.DataFrame(index=labels, columns=labels, dtype=float)
        for a in methods:
            for b in methods:
                matrix.loc[a.label, b.label] = (
                    math.nan if a is b else stats.probability_of_improvement(
                        [a.seeds["objective"]], [b.seeds["objective"]], d.direction))
        return cls(d.name, matrix, [r for m in methods for r in m.seeds["run_id"]],
                   {m.label: len(m.seeds) for m in methods}, captions.selection(d))

    def csv(self) -> str:
        return self.matrix.to_csv()

    def unreliable(self, row: str, column: str) -> bool:
        return min(self.counts[row], self.counts[column]) < stats.SMALL_N

    def markdown(self) -> str:
        labels = list(self.matrix.index)
        caption = (f"P(row beats column) for a random seed of each method's best trial, "
                   f"{self.sweep} (Mann-Whitney U / nm); {self.selection}.")
        if any(self.unreliable(a, b) for a in labels for b in labels):
            caption += (f" * unreliable: fewer than {stats.SMALL_N} seeds on a side, where "
                        "the statistic takes few values and even a perfect 1.00 arises by "
                        "chance alone (5% of the time with 3 seeds each).")
        lines = [caption, "", "| | " + " | ".join(f"{a} (n={self.counts[a]})" for a in labels)
                 + " |", "|" + "---|" * (len(labels) + 1)]
        for a in labels:
            lines.append(f"| {a} (n={self.counts[a]}) | " + " | ".join(
                "—" if pd.isna(v) else f"{v:.2f}" + ("*" if self.unreliable(a, b) else "")
                for b, v in self.matrix.loc[a].items()) + " |")
        return "\n".join(lines) + "\n"


def _fmt(value) -> str:
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


def _interval(centre, low, high) -> str:
    if pd.isna(centre):
        return "—"
    if pd.isna(low):
        return f"{centre:.4g}"
    return f"{centre:.4g} [{low:.4g}, {high:.4g}]"


def _tex(text: str) -> str:
    return re.sub(r"([&%$#_{}])", r"\\\1", str(text)).replace("†", r"$\dagger$").replace(
        "‡", r"$\ddagger$")
