"""A first report, rebuilt from the store alone: learning curves of each study's best trial
(mean over seeds with a 95% bootstrap band) and a results table (CSV, Markdown, HTML)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from workbench import results, stats  # noqa: E402
from workbench.spec import Sweep  # noqa: E402
from workbench.store import Store  # noqa: E402

# Okabe & Ito (2008) colour-blind safe palette.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000"]


class ReportError(RuntimeError):
    """Nothing to report: the store or the sweep's runs are missing."""


def build(sweep: Sweep, out_dir: Path) -> list[Path]:
    store = Store.from_url(sweep.storage)
    if not store.exists():
        raise ReportError(f"no store at {sweep.storage}; run `workbench sweep` first")
    experiment = results.experiment_id(store, sweep.name)
    if experiment is None:
        raise ReportError(f"the store has no runs of sweep {sweep.name!r}")
    run_table = results.runs(store, experiment)
    param_table = results.params(store, experiment)
    seeds = run_table[run_table.get("workbench.kind") == "seed"]
    trials = run_table[run_table.get("workbench.kind") == "trial"]
    if seeds.empty:
        raise ReportError(f"sweep {sweep.name!r} has no finished runs yet")
    history = results.metric_history(store, experiment, [sweep.metric, "objective"])

    rows, curves = [], {}
    for plan in sweep.studies:
        study_trials = trials[trials["workbench.study"] == plan.name]
        objective = history[(history["key"] == "objective")
                            & history["run_id"].isin(study_trials["run_id"])]
        done = study_trials.merge(objective[["run_id", "value"]], on="run_id")
        row = {"method": plan.label,
               "fidelity": _fidelity(study_trials),
               "complete": int((study_trials["status"] == "FINISHED").sum()),
               "pruned": int((study_trials["status"] == "KILLED").sum()),
               "failed": int((study_trials["status"] == "FAILED").sum())}
        if done.empty:
            rows.append(row)
            continue
        pick = done["value"].idxmin() if sweep.direction == "minimize" else done["value"].idxmax()
        best = done.loc[pick]
        best_seeds = seeds[seeds["mlflow.parentRunId"] == best["run_id"]]
        seed_values = history[(history["key"] == "objective")
                              & history["run_id"].isin(best_seeds["run_id"])]["value"].to_numpy()
        low, high = stats.bootstrap_ci(seed_values, sweep.spec.objective.aggregate)
        best_params = param_table[param_table["run_id"] == best["run_id"]]
        tuned = [name for name in plan.search_space()]
        row.update({
            "best_trial": best["optuna.trial_number"],
            "objective": stats.aggregate(seed_values, sweep.spec.objective.aggregate),
            "ci_low": low, "ci_high": high, "seeds": len(seed_values),
            "best_params": ", ".join(f"{k}={_fmt(best_params[k].iloc[0])}" for k in tuned
                                     if k in best_params) or "(none tuned)",
        })
        rows.append(row)
        curves[plan.label] = history[(history["key"] == sweep.metric)
                                     & history["run_id"].isin(best_seeds["run_id"])]

    table = pd.DataFrame(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [_curve_figure(sweep, curves, out_dir / "learning_curves.png")]
    written += _tables(sweep, table, out_dir)
    written.append(_index(sweep, table, out_dir))
    return written


def _fidelity(trials: pd.DataFrame) -> str:
    values = trials.get("workbench.fidelity", pd.Series(dtype=str)).dropna().unique()
    return values[0] if len(values) else ""


def _fmt(value) -> str:
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


def _curve_figure(sweep: Sweep, curves: dict[str, pd.DataFrame], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for i, (label, frame) in enumerate(curves.items()):
        wide = frame.pivot_table(index="step", columns="run_id", values="value")
        wide = wide.interpolate(limit_direction="both")
        values = wide.to_numpy()
        mean = np.nanmean(values, axis=1)
        bands = np.array([stats.bootstrap_ci(v[np.isfinite(v)], "mean", resamples=500)
                          for v in values])
        colour = PALETTE[i % len(PALETTE)]
        ax.plot(wide.index, mean, color=colour, label=f"{label} (n={values.shape[1]} seeds)")
        if values.shape[1] > 1:
            ax.fill_between(wide.index, bands[:, 0], bands[:, 1], color=colour, alpha=0.2,
                            linewidth=0)
    positive = all((f["value"].dropna() > 0).all() for f in curves.values() if not f.empty)
    if positive and sweep.direction == "minimize":
        ax.set_yscale("log")
    ax.set_xlabel("step (optimizer updates)")
    ax.set_ylabel(sweep.metric)
    ax.set_title(f"{sweep.name}: best trial per method, mean and 95% bootstrap CI over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _tables(sweep: Sweep, table: pd.DataFrame, out_dir: Path) -> list[Path]:
    csv_path = out_dir / "results.csv"
    table.to_csv(csv_path, index=False)
    md_path = out_dir / "results.md"
    lines = [
        f"# {sweep.name}: {sweep.metric} ({sweep.direction}, {sweep.spec.objective.at}, "
        f"{sweep.spec.objective.aggregate} over seeds)",
        "",
        "| method | objective [95% CI] | seeds | complete | pruned | failed | best params |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        name = row["method"] + (" †" if row.get("fidelity") == "reconstructed" else "")
        value = row.get("objective", math.nan)
        cell = "—" if pd.isna(value) else (
            f"{value:.4g} [{row['ci_low']:.4g}, {row['ci_high']:.4g}]")
        lines.append(f"| {name} | {cell} | {row.get('seeds', 0)} | {row['complete']} | "
                     f"{row['pruned']} | {row['failed']} | {row.get('best_params', '')} |")
    lines += ["", "† reconstructed from the paper's text (not checked against a reference "
                  "implementation)."]
    md_path.write_text("\n".join(lines) + "\n")
    return [csv_path, md_path]


def _index(sweep: Sweep, table: pd.DataFrame, out_dir: Path) -> Path:
    path = out_dir / "index.html"
    body = table.to_html(index=False, na_rep="—", float_format=lambda v: f"{v:.4g}")
    path.write_text(
        "<!doctype html><meta charset='utf-8'>"
        f"<title>{html.escape(sweep.name)} report</title>"
        f"<h1>{html.escape(sweep.name)}</h1>"
        f"<p>Task {html.escape(sweep.task.name)}; objective {html.escape(sweep.metric)} "
        f"({sweep.direction}); seeds {sweep.seeds}.</p>"
        "<img src='learning_curves.png' alt='learning curves' style='max-width:100%'>"
        f"{body}")
    return path
