"""What a credit study writes, in the report's style: the figure (``figure.png``, ``.pdf``),
the table (``table.csv``, ``table.md``; a row per (estimator, G, N) naming the sampler whose
steps it was measured on and ``env_steps``, the environment steps that estimator's rows and
its own continuations cost, the ground truth's continuations not counted), a ``.json`` beside
each naming what it shows, and
``provenance.json`` (the spec and its hash, the code's commit and content hash, library
versions, the streams, the checkpoint, the statistics settings, the time); with
``gradient_batches``, the policy-gradient bias too (``gradient.png``, ``.pdf``,
``gradient.csv``, ``.md``: a row per (estimator, G), the turn-count bias among its measures;
``credit.gradient``)."""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import textwrap
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from workbench.credit.gradient import COLUMNS as GRADIENT_COLUMNS
from workbench.credit.gradient import EXACT as EXACT_LABEL
from workbench.credit.gradient import METRICS as GRADIENT_METRICS
from workbench.credit.measures import METRICS, ZERO
from workbench.credit.plan import INDEPENDENT, SEGMENTS, TREE, CreditPlan
from workbench.report.figures import Style

FIGURE, TABLE = "figure", "table"
CEILING_STYLES = {INDEPENDENT: ":", TREE: "-.", SEGMENTS: "--"}
COLUMNS = ["estimator", "G", "N", "sampler", "instances", "steps",
           *(f"{m}{end}" for m in METRICS for end in ("", "_low", "_high")),
           "mc_se", "mc_reliability", "zero_share", "mc_zero_share", "rollout_success",
           "env_steps"]


def figure(plan: CreditPlan, rows: list[dict], checkpoint: str) -> Figure:
    """Each metric against G (one panel per metric, one row of panels per N), a line per
    estimator with its bootstrap interval as a band."""
    s = plan.spec
    labels = [e.label for e in plan.estimators]
    samplers = list(dict.fromkeys(e.sampler for e in plan.estimators))
    style = Style(labels)
    fig = Figure(figsize=(4.3 * len(METRICS), 3.1 * len(s.continuations) + 0.6))
    axes = fig.subplots(len(s.continuations), len(METRICS), squeeze=False)
    log = len(s.group_sizes) > 1 and max(s.group_sizes) >= 4 * min(s.group_sizes)
    gap = min(np.diff(np.log2(s.group_sizes) if log else s.group_sizes), default=1.0)
    # estimators that agree (GRPO, RLOO and Dr. GRPO rank steps alike) would hide each other:
    # each is drawn a little to the side of the true G, within a fifth of the closest gap
    dodge = {label: (i - (len(labels) - 1) / 2) * 0.2 * gap / max(len(labels) - 1, 1)
             for i, label in enumerate(labels)}
    for r, n in enumerate(s.continuations):
        for c, metric in enumerate(METRICS):
            ax = axes[r, c]
            for label in labels:
                mine = sorted((row for row in rows if row["estimator"] == label
                               and row["N"] == n), key=lambda row: row["G"])
                g = np.array([row["G"] for row in mine], dtype=float)
                g = g * 2.0 ** dodge[label] if log else g + dodge[label]
                style.line(ax, label, g, [row[metric] for row in mine], markevery=1)
                ax.fill_between(g, [row[f"{metric}_low"] for row in mine],
                                [row[f"{metric}_high"] for row in mine],
                                color=style.colour(label), alpha=0.12, linewidth=0)
            if metric in ("spearman", "bias"):
                ax.axhline(0.0, color="0.5", linewidth=0.8, linestyle="--")
            if metric == "spearman":  # what a perfect estimator would reach against A_MC
                for sampler in samplers:  # each sampler's steps have their own A_MC
                    ceiling = sorted({(row["G"], row["mc_reliability"]) for row in rows
                                      if row["N"] == n and row["sampler"] == sampler})
                    ax.plot([g for g, _ in ceiling],
                            [math.sqrt(max(r, 0.0)) if math.isfinite(r) else math.nan
                             for _, r in ceiling],
                            color="black", linestyle=CEILING_STYLES[sampler], linewidth=1.2,
                            label="ceiling: √(A_MC's split-half reliability)"
                                  + (f", {sampler} steps" if len(samplers) > 1 else ""))
            if metric == "sign_agreement":
                ax.set_ylim(-0.02, 1.02)
            if log:
                ax.set_xscale("log", base=2)
            ax.xaxis.set_major_locator(FixedLocator(s.group_sizes))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticklabels([str(g) for g in s.group_sizes])
            ax.set_title(f"{METRICS[metric]}, N = {n}", fontsize=9)
            if r == len(s.continuations) - 1:
                ax.set_xlabel("G (rollouts per instance)")
            ax.grid(alpha=0.3)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 7), fontsize=8,
               frameon=False)
    caption = (f"{plan.name}: each estimator's step advantages against the Monte Carlo "
               f"advantage A_MC = Q − V (N continuations each for Q and V from the restored "
               f"state) on {s.steps_per_instance} sampled steps of each of {s.instances} "
               f"held-out {plan.spec.task.name} instances, for the checkpoint {checkpoint}. "
               f"Bands: {s.confidence:.0%} percentile bootstrap over instances "
               f"({s.resamples} resamples); each estimator is drawn slightly to the side of "
               f"its G so that equal values stay visible. Dotted: the square root of A_MC's "
               f"split-half reliability (Spearman-Brown), about the most a perfect "
               f"estimator's rank correlation with A_MC can reach.{_samplers_note(plan)} "
               f"Bias and variance are in each "
               f"estimator's own units. Sign agreement: over the steps whose A_MC is not 0, "
               f"Â's sign the same (Â = 0 a miss; |value| ≤ {ZERO:g} counts as 0).")
    width = max(60, int(fig.get_figwidth() * 15))
    fig.suptitle(textwrap.fill(caption, width), fontsize=8, ha="left", x=0.01)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def _samplers_note(plan: CreditPlan) -> str:
    """Which estimators are measured on tree rows, where any is."""
    parts = []
    for sampler, what, line in ((TREE, "Tree-GRPO's trees, G leaves per instance",
                                 "dash-dotted"),
                                (SEGMENTS, "SPO-tree's trees, up to G leaves per instance",
                                 "dashed")):
        trees = [e.label for e in plan.estimators if e.sampler == sampler]
        if trees:
            parts.append(f" {', '.join(trees)} measured on the steps of {what}, with their "
                         f"own A_MC ({line} ceiling);")
    if not parts:
        return ""
    return "".join(parts) + " the others on G independent rollouts."


def write_table(folder: Path, rows: list[dict]) -> list[Path]:
    csv_path, md_path = folder / f"{TABLE}.csv", folder / f"{TABLE}.md"
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _plain(row[k]) for k in COLUMNS})
    head = ["estimator", "G", "N", "sampler", *(METRICS[m] for m in METRICS), "Â = 0",
            "A_MC = 0", "MC s.e.", "MC reliability", "steps", "env steps"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["estimator"], str(row["G"]), str(row["N"]), row["sampler"],
                 *(_with_interval(row, m) for m in METRICS), _number(row["zero_share"]),
                 _number(row["mc_zero_share"]), _number(row["mc_se"]),
                 _number(row["mc_reliability"]),
                 str(row["steps"]), str(row["env_steps"])]
        lines.append("| " + " | ".join(cells) + " |")
    md_path.write_text("\n".join(lines) + "\n")
    return [csv_path, md_path]


def write_figure(folder: Path, fig: Figure) -> list[Path]:
    paths = [folder / f"{FIGURE}.png", folder / f"{FIGURE}.pdf"]
    for path in paths:
        fig.savefig(path, dpi=130)
    return paths


def write_provenance(folder: Path, record: dict, artifacts: dict[str, str]) -> list[Path]:
    """``provenance.json`` and, beside each artifact stem, a ``.json`` saying what it shows."""
    written = []
    for stem, shows in artifacts.items():
        path = folder / f"{stem}.json"
        path.write_text(json.dumps({"artifact": stem, "shows": shows,
                                    "created": record["created"],
                                    "spec_sha256": record["spec"]["sha256"],
                                    "git_commit": record["code"]["git.commit"],
                                    "provenance": "provenance.json"}, indent=1))
        written.append(path)
    path = folder / "provenance.json"
    path.write_text(json.dumps(record, indent=1, default=str))
    return [*written, path]


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _with_interval(row: dict, metric: str) -> str:
    low, high = row[f"{metric}_low"], row[f"{metric}_high"]
    if not (math.isfinite(low) and math.isfinite(high)):
        return _number(row[metric])
    return f"{_number(row[metric])} [{_number(low)}, {_number(high)}]"


def _number(value: float) -> str:
    return "—" if not math.isfinite(value) else f"{value:.3g}"


def _plain(value):
    return "" if isinstance(value, float) and math.isnan(value) else value


GRADIENT = "gradient"


def gradient_figure(plan: CreditPlan, rows: list[dict], checkpoint: str) -> Figure:
    """The policy-gradient bias (``gradient.METRICS``) against G, a panel per measure, a line
    per estimator (and the exact advantage's) with its bootstrap interval as a band."""
    s = plan.spec
    labels = list(dict.fromkeys(row["estimator"] for row in rows))
    style = Style(labels)
    fig = Figure(figsize=(4.3 * len(GRADIENT_METRICS), 3.7))
    axes = fig.subplots(1, len(GRADIENT_METRICS), squeeze=False)[0]
    log = len(s.group_sizes) > 1 and max(s.group_sizes) >= 4 * min(s.group_sizes)
    for ax, metric in zip(axes, GRADIENT_METRICS, strict=True):
        for label in labels:
            mine = sorted((row for row in rows if row["estimator"] == label),
                          key=lambda row: row["G"])
            g = np.array([row["G"] for row in mine], dtype=float)
            style.line(ax, label, g, [row[metric] for row in mine], markevery=1)
            ax.fill_between(g, [row[f"{metric}_low"] for row in mine],
                            [row[f"{metric}_high"] for row in mine],
                            color=style.colour(label), alpha=0.12, linewidth=0)
        ax.axhline({"grad_rel_bias": 0.0, "grad_turn_bias": 0.0}.get(metric, 1.0), color="0.5",
                   linewidth=0.8, linestyle="--")
        if log:
            ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(s.group_sizes))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(g) for g in s.group_sizes])
        ax.set_title(GRADIENT_METRICS[metric], fontsize=9)
        ax.set_xlabel("G (rollouts per instance)")
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 7), fontsize=8,
               frameon=False)
    caption = (f"{plan.name}: the policy gradient ĝ = mean over rows of Σ_t Â_t ∇log π(a_t|s_t) "
               f"each estimator gives on {s.gradient_batches} independent batches of G "
               f"rollouts of each of {s.instances} held-out {s.task.name} instances, against "
               f"the exact ∇J (dynamic programming over the enumerated states) for the "
               f"checkpoint {checkpoint}; {EXACT_LABEL} is the exact advantage on the same "
               f"batches (unbiased). Relative bias: the debiased ‖E[ĝ] − ∇J‖ / ‖∇J‖ (signed "
               f"root of a squared-norm estimate, about 0 either side without bias). Turn-count "
               f"bias: E[ĝ]'s coefficient along the exact gradient of the expected turn count "
               f"made orthogonal to ∇J (reward per turn: c for Â_t = A_t + c (L − t); 0 "
               f"without bias). Bands: "
               f"{s.confidence:.0%} percentile bootstrap over batches ({s.resamples} "
               f"resamples). Estimators measured on trees are left out.")
    fig.suptitle(textwrap.fill(caption, max(60, int(fig.get_figwidth() * 15))), fontsize=8,
                 ha="left", x=0.01)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def write_gradient(folder: Path, rows: list[dict], fig: Figure) -> list[Path]:
    """``gradient.csv``, ``gradient.md``, ``gradient.png`` and ``.pdf``."""
    csv_path, md_path = folder / f"{GRADIENT}.csv", folder / f"{GRADIENT}.md"
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, GRADIENT_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _plain(row[k]) for k in GRADIENT_COLUMNS})
    head = ["estimator", "G", *(GRADIENT_METRICS[m] for m in GRADIENT_METRICS), "‖∇J‖",
            "batches", "rollout success", "mean turns"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        lines.append("| " + " | ".join([
            row["estimator"], str(row["G"]), *(_with_interval(row, m) for m in GRADIENT_METRICS),
            _number(row["true_grad_norm"]), str(row["batches"]),
            _number(row["rollout_success"]), _number(row["mean_turns"])]) + " |")
    md_path.write_text("\n".join(lines) + "\n")
    paths = [folder / f"{GRADIENT}.png", folder / f"{GRADIENT}.pdf"]
    for path in paths:
        fig.savefig(path, dpi=130)
    return [csv_path, md_path, *paths]
