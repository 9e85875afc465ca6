"""Reports rebuilt from the store alone: figures, tables and their provenance.

``build(report_spec, out_dir)`` reads each sweep's runs with a handful of SQL queries
(``workbench.results``), then writes:

- ``curves_<metric>_<axis>.{png,pdf}``: learning curves of each method's best trial on a
  common x-grid (each seed interpolated onto the grid, then aggregated), with bootstrap bands;
- ``final``: the objective per method (aggregate with its bootstrap interval);
- ``profiles``: performance profiles (fraction of runs at least as good as tau);
- ``best_of_k``: the expected best objective after k trials, with a bootstrap band;
- ``sensitivity_<sweep>``: the objective against each tuned hyperparameter, per method;
- ``table_<sweep>.{md,tex,html,csv}``: methods as rows (best per column in bold,
  reconstructed methods marked with a dagger); ``poi_<sweep>.{md,csv}``: probability of
  improvement of each method over each other;
- a ``.json`` beside every file (query, run ids, git commits, statistics settings, time),
  ``provenance.json`` for the whole report, and ``index.html`` showing everything.

The best trial is chosen on the same seeds it is reported on (as the tuning saw them);
captions say so.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna.distributions as od
import pandas as pd
from matplotlib.figure import Figure  # no pyplot: no backend, no global state
from pydantic import Field, ValidationError

from workbench import results, stats
from workbench import runs as layout  # the run layout: "runs" here are DataFrames
from workbench.processes import process_alive
from workbench.spec import ReportOptions, Sweep, load
from workbench.store import Store, redact
from workbench.validation import SpecError, Strict, shorten, spec_error

# Paul Tol's colour-blind safe "muted" scheme; line styles repeat it past ten methods.
PALETTE = ["#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677",
           "#882255", "#AA4499", "#DDDDDD"]
STYLES = ["-", "--", ":", "-."]
UNITS = {"step": "step (optimizer updates)", "cost/samples": "samples seen",
         "cost/grad_evals": "gradient evaluations", "cost/loss_evals": "loss evaluations",
         "time/wall_seconds": "wall seconds (optimizer time)", "cost/tokens": "tokens"}
GRID_POINTS = 100


class ReportError(RuntimeError):
    """Nothing to report: the store or the sweep's runs are missing."""


class ReportFile(Strict):
    """A report spec in ``reports/``: several sweeps drawn together."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    sweeps: list[str] = Field(min_length=1)
    report: ReportOptions = ReportOptions()


@dataclass
class ReportSpec:
    name: str
    sweeps: list[Sweep]
    options: ReportOptions


def load_spec(path: str | Path, storage: str | None = None) -> ReportSpec:
    """A sweep spec (one sweep, its own ``report`` options) or a report spec (``sweeps:``)."""
    from workbench.spec import read_yaml

    data = read_yaml(path)
    if "sweeps" not in data:
        sweep = load(path, storage=storage)
        return ReportSpec(sweep.name, [sweep], sweep.spec.report)
    try:
        spec = ReportFile.model_validate(data)
    except ValidationError as err:
        raise spec_error(str(path), err) from None
    base = Path(path).resolve().parent
    sweeps = []
    for i, entry in enumerate(spec.sweeps):
        target = Path(entry) if Path(entry).is_absolute() else base.parent / entry
        if not target.is_file():
            target = base / entry
        if not target.is_file():
            raise SpecError(str(path), f"sweeps[{i}]", f"no sweep spec at {shorten(entry)}")
        sweeps.append(load(target, storage=storage))
    return ReportSpec(spec.name, sweeps, spec.report)


# --------------------------------------------------------------------------- the data


@dataclass
class MethodData:
    label: str
    fidelity: str
    trials: pd.DataFrame  # one row per trial run: run_id, status, number, objective, reason
    best_run: str | None
    seeds: pd.DataFrame  # the best trial's seed runs: run_id, seed, objective
    space: dict


@dataclass
class SweepData:
    sweep: Sweep
    experiment: str
    runs: pd.DataFrame
    params: pd.DataFrame
    history: pd.DataFrame
    methods: list[MethodData] = field(default_factory=list)


def read_sweep(sweep: Sweep, options: ReportOptions) -> SweepData:
    store = Store.from_url(sweep.storage)
    if not store.exists():
        raise ReportError(f"no store at {redact(sweep.storage)}; run `workbench sweep` first")
    experiment = results.experiment_id(store, sweep.name)
    if experiment is None:
        raise ReportError(f"the store has no runs of sweep {sweep.name!r}")
    runs = results.runs(store, experiment)
    if layout.KIND not in runs or not (runs[layout.KIND] == layout.SEED).any():
        raise ReportError(f"sweep {sweep.name!r} has no runs yet")
    keys = {sweep.metric, "objective", *(options.metrics or []),
            *(a for a in options.x_axes if a != "step")}
    if options.target:
        keys.add(options.target.metric)
    history = results.metric_history(store, experiment, sorted(keys))
    history["run_id"] = history["run_id"].astype(str)
    history["key"] = history["key"].astype(str)
    data = SweepData(sweep, experiment, runs, results.params(store, experiment), history)
    objective = (history[history["key"] == "objective"].groupby("run_id")["value"].last())
    for plan in sweep.studies:
        trials = runs[(runs[layout.KIND] == layout.TRIAL)
                      & (runs[layout.STUDY_NAME] == plan.name)].copy()
        trials["objective"] = trials["run_id"].map(objective)
        trials["number"] = trials["optuna.trial_number"].astype(int)
        trials["reason"] = trials.get(layout.PRUNE_REASON)
        done = trials[(trials["status"] == layout.FINISHED) & trials["objective"].notna()]
        best_run, seeds = None, pd.DataFrame(columns=["run_id", "seed", "objective"])
        if not done.empty:
            pick = (done["objective"].idxmin() if sweep.direction == "minimize"
                    else done["objective"].idxmax())
            best_run = done.loc[pick, "run_id"]
            seeds = runs[(runs[layout.KIND] == layout.SEED)
                         & (runs["mlflow.parentRunId"] == best_run)
                         & (runs["status"] == layout.FINISHED)].copy()
            seeds["seed"] = seeds[layout.SEED_TAG].astype(int)
            seeds["objective"] = seeds["run_id"].map(objective)
        tagged = trials.get(layout.FIDELITY, pd.Series(dtype=str)).dropna().unique()
        fidelity = (set(tagged) if len(tagged)
                    else {m.cls.fidelity for m in plan.methods if not m.implicit})
        data.methods.append(MethodData(
            plan.label, fidelity.pop() if len(fidelity) == 1 else "mixed",
            trials.sort_values("number"), best_run, seeds.sort_values("seed"),
            plan.search_space()))
    return data


# -------------------------------------------------------------------------- the report


class Report:
    def __init__(self, spec: ReportSpec, out_dir: Path):
        self.spec, self.out = spec, out_dir
        self.options = spec.options
        self.data = [read_sweep(s, self.options) for s in spec.sweeps]
        labels = sorted({m.label for d in self.data for m in d.methods})
        self.style = {label: (PALETTE[i % len(PALETTE)], STYLES[i // len(PALETTE) % 4])
                      for i, label in enumerate(labels)}
        self.written: list[Path] = []
        self.created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")

    # ------------------------------------------------------------------ provenance

    def _stats_settings(self) -> dict:
        o = self.options
        return {"aggregate": o.aggregate, "confidence": o.confidence, "resamples": o.resamples,
                "bootstrap": "percentile; stratified over sweeps where several", "seed": 0,
                "best_trial": "best objective among complete trials, on the same seeds"}

    def _provenance(self, path: Path, run_ids, sweeps: list[SweepData]) -> None:
        runs = pd.concat([d.runs for d in sweeps])
        used = runs[runs["run_id"].isin(set(run_ids))]
        record = {
            "artifact": path.name, "created": self.created,
            "query": {"store": sorted({redact(d.sweep.storage) for d in sweeps}),
                      "experiments": {d.sweep.name: d.experiment for d in sweeps},
                      "filters": "runs.lifecycle_stage = 'active'; tags workbench.kind in "
                                 "(study, trial, seed)"},
            "run_ids": sorted(set(run_ids)),
            "git_commits": sorted(used.get("git.commit", pd.Series(dtype=str)).dropna()
                                  .unique().tolist()),
            "statistics": self._stats_settings(),
        }
        path.with_suffix(".json").write_text(json.dumps(record, indent=1))

    def _save(self, fig, stem: str, run_ids, sweeps) -> None:
        for suffix in (".png", ".pdf"):
            path = self.out / f"{stem}{suffix}"
            fig.savefig(path, dpi=120)
            self.written.append(path)
        self._provenance(self.out / f"{stem}.png", run_ids, sweeps)

    def _line(self, ax, label: str, x, y, **kwargs):
        colour, style = self.style[label]
        return ax.plot(x, y, color=colour, linestyle=style, label=label, **kwargs)

    # ----------------------------------------------------------------------- build

    def build(self) -> list[Path]:
        self.out.mkdir(parents=True, exist_ok=True)
        metrics = self.options.metrics or sorted({d.sweep.metric for d in self.data})
        for metric in metrics:
            for axis in self.options.x_axes:
                self.curves(metric, axis)
        self.final()
        self.profiles()
        self.best_of_k()
        for d in self.data:
            self.sensitivity(d)
            self.table(d)
            self.poi(d)
        self.index()
        every_run = pd.concat([d.runs for d in self.data])["run_id"]
        self._provenance(self.out / "provenance.png", every_run, self.data)
        self.written.append(self.out / "provenance.json")
        return self.written

    def _axes(self, count: int, width: float = 6.0):
        fig = Figure(figsize=(max(width * count, 8.0), 4.6))
        axes = fig.subplots(1, count, squeeze=False)
        return fig, axes[0]

    def curves(self, metric: str, axis: str) -> None:
        fig, axes = self._axes(len(self.data))
        used, drawn = [], False
        for ax, d in zip(axes, self.data, strict=True):
            for m in d.methods:
                if m.seeds.empty:
                    continue
                grid, values = self._on_grid(d, m.seeds["run_id"].tolist(), metric, axis)
                if grid is None:
                    continue
                centre = np.array([stats.aggregate(values[:, j], self.options.aggregate)
                                   for j in range(values.shape[1])])
                low, high = self._bands(values)
                self._line(ax, f"{m.label}", grid, centre)
                colour, _ = self.style[m.label]
                ax.fill_between(grid, low, high, color=colour, alpha=0.18, linewidth=0)
                ax.lines[-1].set_label(f"{m.label} (n={values.shape[0]})")
                used += m.seeds["run_id"].tolist()
                drawn = True
            if d.sweep.task.metrics.get(metric) == "minimize":
                _log_if_wide(ax, d.history[d.history["key"] == metric]["value"], "y")
            ax.set_xlabel(UNITS.get(axis, axis))
            ax.set_ylabel(metric)
            ax.set_title(f"{d.sweep.name}", fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2 if len(d.methods) > 7 else 1)
        fig.suptitle(f"{metric} of each method's best trial: {self.options.aggregate} over "
                     f"seeds (n in legend),\n{self.options.confidence:.0%} bootstrap band",
                     fontsize=9)
        fig.tight_layout()
        if drawn:
            self._save(fig, f"curves_{_slug(metric)}_{_slug(axis)}", used, self.data)

    def _on_grid(self, d: SweepData, run_ids, metric: str, axis: str):
        """Each seed's curve interpolated onto a common grid over the range all seeds cover."""
        h = d.history[d.history["run_id"].isin(run_ids)]
        series = []
        for run_id in run_ids:
            y = h[(h["run_id"] == run_id) & (h["key"] == metric)].set_index("step")["value"]
            if y.empty:
                return None, None
            if axis == "step":
                x = y.index.to_numpy(dtype=float)
            else:
                xs = h[(h["run_id"] == run_id) & (h["key"] == axis)].set_index("step")["value"]
                joined = pd.concat([xs.rename("x"), y.rename("y")], axis=1).dropna()
                if joined.empty:
                    return None, None
                x, y = joined["x"].to_numpy(), joined["y"]
            series.append((np.maximum.accumulate(x), y.to_numpy(dtype=float)))
        end = min(x[-1] for x, _ in series)
        start = max(x[0] for x, _ in series)
        if not end > start:
            return None, None
        grid = np.linspace(start, end, GRID_POINTS)
        return grid, np.vstack([np.interp(grid, x, y) for x, y in series])

    def _bands(self, values: np.ndarray):
        """Bootstrap band over seeds (rows) at every grid point (columns)."""
        n = values.shape[0]
        if n < 2:
            return values[0], values[0]
        rng = np.random.default_rng(0)
        picks = rng.integers(0, n, size=(min(self.options.resamples, 1000), n))
        samples = values[picks]  # resamples x seeds x grid
        if self.options.aggregate == "mean":
            stat = samples.mean(axis=1)
        elif self.options.aggregate == "median":
            stat = np.median(samples, axis=1)
        else:
            from scipy.stats import trim_mean

            stat = trim_mean(samples, 0.25, axis=1)
        alpha = (1 - self.options.confidence) / 2
        return np.quantile(stat, alpha, axis=0), np.quantile(stat, 1 - alpha, axis=0)

    def _summary(self, values) -> tuple[float, float, float]:
        o = self.options
        low, high = stats.bootstrap_ci(values, o.aggregate, o.confidence, o.resamples)
        return stats.aggregate(values, o.aggregate), low, high

    def across_tasks(self) -> dict[str, tuple[np.ndarray, list[str]]]:
        """Per method present in every sweep: its runs' scores normalised per sweep to [0, 1]
        (1 = the best run of any method on that sweep, 0 = the worst) and the sweep of each,
        the strata of the bootstrap."""
        common = set.intersection(*({m.label for m in d.methods if not m.seeds.empty}
                                    for d in self.data))
        pooled: dict[str, tuple[list, list]] = {label: ([], []) for label in sorted(common)}
        for d in self.data:
            values = pd.concat([m.seeds["objective"] for m in d.methods if m.label in common])
            low, high = float(values.min()), float(values.max())
            span = (high - low) or 1.0
            for m in d.methods:
                if m.label in common:
                    v = m.seeds["objective"].to_numpy(dtype=float)
                    score = (v - low) / span if d.sweep.direction == "maximize" else \
                        (high - v) / span
                    pooled[m.label][0].extend(score)
                    pooled[m.label][1].extend([d.sweep.name] * len(v))
        return {k: (np.asarray(v), s) for k, (v, s) in pooled.items()}

    def final(self) -> None:
        several = len(self.data) > 1
        fig, axes = self._axes(len(self.data) + several, width=5.5)
        used = []
        if several:
            self._final_across(axes[-1])
        for ax, d in zip(axes, self.data, strict=False):
            methods = [m for m in d.methods if not m.seeds.empty]
            for i, m in enumerate(methods):
                centre, low, high = self._summary(m.seeds["objective"])
                colour, _ = self.style[m.label]
                err = None if math.isnan(low) else [[centre - low], [high - centre]]
                ax.errorbar(centre, i, xerr=err, fmt="o", color=colour, capsize=3)
                used += m.seeds["run_id"].tolist()
            ax.set_yticks(range(len(methods)),
                          [f"{m.label}{' †' if m.fidelity != 'reference-checked' else ''} "
                           f"(n={len(m.seeds)})" for m in methods])
            ax.set_xlabel(f"{d.sweep.metric} ({d.sweep.spec.objective.at}; "
                          f"{'lower' if d.sweep.direction == 'minimize' else 'higher'} "
                          "is better)")
            if methods and d.sweep.direction == "minimize":
                _log_if_wide(ax, pd.concat([m.seeds["objective"] for m in methods]), "x")
            ax.set_title(d.sweep.name, fontsize=10)
            ax.grid(alpha=0.3, axis="x")
        fig.suptitle(f"{self.options.aggregate.upper()} over seeds of each method's best "
                     f"trial, {self.options.confidence:.0%} bootstrap CI", fontsize=10)
        fig.tight_layout()
        self._save(fig, "final", used, self.data)

    def _final_across(self, ax) -> None:
        o = self.options
        pooled = self.across_tasks()
        for i, (label, (scores, strata)) in enumerate(pooled.items()):
            centre = stats.aggregate(scores, o.aggregate)
            low, high = stats.bootstrap_ci(scores, o.aggregate, o.confidence, o.resamples,
                                           strata=strata)
            colour, _ = self.style[label]
            err = None if math.isnan(low) else [[centre - low], [high - centre]]
            ax.errorbar(centre, i, xerr=err, fmt="o", color=colour, capsize=3)
        ax.set_yticks(range(len(pooled)), [f"{k} (n={len(v[0])})" for k, v in pooled.items()])
        ax.set_xlabel("normalised score per sweep (1 = best run, 0 = worst; higher is better)")
        ax.set_title(f"all {len(self.data)} sweeps: stratified bootstrap", fontsize=10)
        ax.grid(alpha=0.3, axis="x")

    def profiles(self) -> None:
        fig, axes = self._axes(len(self.data), width=5.5)
        used = []
        for ax, d in zip(axes, self.data, strict=True):
            methods = [m for m in d.methods if not m.seeds.empty]
            everything = np.concatenate([m.seeds["objective"].to_numpy(dtype=float)
                                         for m in methods]) if methods else np.array([])
            everything = everything[np.isfinite(everything)]
            if everything.size == 0:
                continue
            log = (d.sweep.direction == "minimize" and (everything > 0).all()
                   and everything.max() > 20 * everything.min())
            taus = (np.geomspace(everything.min(), everything.max(), 200) if log
                    else np.linspace(everything.min(), everything.max(), 200))
            for m in methods:
                frac = stats.performance_profile(m.seeds["objective"], taus, d.sweep.direction)
                self._line(ax, m.label, taus, frac, drawstyle="steps-post")
                ax.lines[-1].set_label(f"{m.label} (n={len(m.seeds)})")
                used += m.seeds["run_id"].tolist()
            if log:
                ax.set_xscale("log")
            sign = "≤" if d.sweep.direction == "minimize" else "≥"
            ax.set_xlabel(f"threshold τ on {d.sweep.metric}")
            ax.set_ylabel(f"fraction of runs with score {sign} τ")
            ax.set_title(d.sweep.name, fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle("Performance profiles of each method's best trial over seeds",
                     fontsize=10)
        fig.tight_layout()
        self._save(fig, "profiles", used, self.data)

    def best_of_k(self) -> None:
        fig, axes = self._axes(len(self.data), width=5.5)
        used = []
        rng = np.random.default_rng(0)
        for ax, d in zip(axes, self.data, strict=True):
            for m in d.methods:
                values = m.trials[m.trials["status"] == layout.FINISHED]["objective"].dropna()
                values = values.to_numpy(dtype=float)
                if values.size == 0:
                    continue
                curve = stats.expected_best_of_k(values, d.sweep.direction)
                k = np.arange(1, values.size + 1)
                self._line(ax, m.label, k, curve, marker=".")
                ax.lines[-1].set_label(f"{m.label} ({values.size} complete trials)")
                if values.size > 1:
                    boot = np.array([stats.expected_best_of_k(
                        values[rng.integers(0, values.size, values.size)], d.sweep.direction)
                        for _ in range(200)])
                    alpha = (1 - self.options.confidence) / 2
                    colour, _ = self.style[m.label]
                    ax.fill_between(k, np.quantile(boot, alpha, axis=0),
                                    np.quantile(boot, 1 - alpha, axis=0), color=colour,
                                    alpha=0.15, linewidth=0)
                used += m.trials["run_id"].tolist()
            ax.set_xlabel("k (trials of tuning)")
            ax.set_ylabel(f"expected best {d.sweep.metric}")
            ax.set_title(d.sweep.name, fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle("Tuning budget: expected best objective after k trials (Dodge et al. "
                     "2019), bootstrap band over trials", fontsize=10)
        fig.tight_layout()
        self._save(fig, "best_of_k", used, self.data)

    def sensitivity(self, d: SweepData) -> None:
        tuned = [(m, name) for m in d.methods for name in m.space]
        if not tuned:
            return
        cols = min(4, len(tuned))
        rows = math.ceil(len(tuned) / cols)
        fig = Figure(figsize=(4 * cols, 3.2 * rows))
        axes = fig.subplots(rows, cols, squeeze=False)
        used = []
        params = d.params.set_index("run_id") if "run_id" in d.params else pd.DataFrame()
        for ax, (m, name) in zip(axes.flat, tuned, strict=False):
            done = m.trials[(m.trials["status"] == layout.FINISHED) & m.trials["objective"].notna()]
            raw = params.reindex(done["run_id"]).get(name, pd.Series(dtype=object))
            colour, _ = self.style[m.label]
            dist = m.space[name]
            if isinstance(dist, od.CategoricalDistribution):
                labels = [str(c) for c in dist.choices]
                x = [labels.index(str(v)) if str(v) in labels else np.nan for v in raw]
                ax.set_xticks(range(len(labels)), labels)
            else:
                x = pd.to_numeric(raw, errors="coerce").to_numpy()
                if getattr(dist, "log", False):
                    ax.set_xscale("log")
            ax.scatter(x, done["objective"], color=colour, s=18)
            used += done["run_id"].tolist()
            ax.set_title(f"{m.label}: {name.split('.', 1)[-1]}", fontsize=9)
            ax.set_ylabel(d.sweep.metric, fontsize=8)
            if d.sweep.direction == "minimize":
                _log_if_wide(ax, done["objective"], "y")
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(tuned):]:
            ax.axis("off")
        fig.suptitle(f"{d.sweep.name}: objective of every complete trial against each tuned "
                     "hyperparameter", fontsize=10)
        fig.tight_layout()
        self._save(fig, f"sensitivity_{_slug(d.sweep.name)}", used, [d])

    # ---------------------------------------------------------------------- tables

    def _steps_to_target(self, d: SweepData, m: MethodData):
        target = self.options.target
        if target is None or m.seeds.empty:
            return math.nan, 0
        h = d.history[(d.history["key"] == target.metric)]
        reached = []
        for run_id in m.seeds["run_id"]:
            run = h[h["run_id"] == run_id]
            reached.append(stats.steps_to_target(run["step"], run["value"], target.value,
                                                 target.direction))
        reached = np.asarray(reached)
        hits = reached[np.isfinite(reached)]
        return (float(np.median(hits)) if hits.size else math.nan,
                int(np.sum(~np.isfinite(reached))))

    def table(self, d: SweepData) -> None:
        rows, used = [], []
        for m in d.methods:
            trials = m.trials
            pruned = trials[trials["status"] == layout.KILLED]
            diverged = int((pruned.get("reason") == "diverged").sum())
            row = {"method": m.label, "fidelity": m.fidelity, "seeds": len(m.seeds),
                   "trials": f"{int(trials['status'].isin(['FINISHED', 'KILLED']).sum())}/"
                             f"{next(p.n_trials for p in d.sweep.studies if p.label == m.label)}",
                   "pruned": len(pruned) - diverged, "diverged": diverged,
                   "failed": int((trials["status"] == layout.FAILED).sum())}
            values = m.seeds["objective"].to_numpy(dtype=float)
            row["iqm"], row["iqm_low"], row["iqm_high"] = (
                stats.aggregate(values, "iqm"),
                *stats.bootstrap_ci(values, "iqm", self.options.confidence,
                                    self.options.resamples))
            row["mean"], row["mean_low"], row["mean_high"] = (
                stats.aggregate(values, "mean"),
                *stats.bootstrap_ci(values, "mean", self.options.confidence,
                                    self.options.resamples))
            if self.options.target:
                row["steps_to_target"], row["not_reached"] = self._steps_to_target(d, m)
            row["best_params"] = self._best_params(d, m)
            rows.append(row)
            used += trials["run_id"].tolist() + m.seeds["run_id"].tolist()
        table = pd.DataFrame(rows)
        stem = f"table_{_slug(d.sweep.name)}"
        table.to_csv(self.out / f"{stem}.csv", index=False)
        best = self._best_cells(table, d.sweep.direction)
        self._write_text_tables(d, table, best, stem)
        for suffix in (".csv", ".md", ".tex", ".html"):
            self.written.append(self.out / f"{stem}{suffix}")
        self._provenance(self.out / f"{stem}.csv", used, [d])

    def _best_params(self, d: SweepData, m: MethodData) -> str:
        if m.best_run is None or not m.space:
            return "" if m.best_run is None else "(none tuned)"
        row = d.params[d.params["run_id"] == m.best_run]
        return ", ".join(f"{k.split('.', 1)[1]}={_fmt(row[k].iloc[0])}" for k in m.space
                         if k in row)

    @staticmethod
    def _best_cells(table: pd.DataFrame, direction: str) -> dict[str, int]:
        best = {}
        for column, goal in (("iqm", direction), ("mean", direction),
                             ("steps_to_target", "minimize")):
            if column in table and table[column].notna().any():
                values = table[column]
                best[column] = int(values.idxmin() if goal == "minimize" else values.idxmax())
        return best

    def _cells(self, table, best, bold, dagger) -> tuple[list[str], list[list[str]]]:
        head = ["method", f"IQM [{self.options.confidence:.0%} CI]",
                f"mean [{self.options.confidence:.0%} CI]", "seeds"]
        if self.options.target:
            head += ["steps to target (median; not reached)"]
        head += ["trials", "pruned", "diverged", "failed", "best hyperparameters"]
        body = []
        for i, row in table.iterrows():
            def cell(column, text, i=i):
                return bold(text) if best.get(column) == i else text

            cells = [row["method"] + (dagger if row["fidelity"] != "reference-checked" else ""),
                     cell("iqm", _interval(row["iqm"], row["iqm_low"], row["iqm_high"])),
                     cell("mean", _interval(row["mean"], row["mean_low"], row["mean_high"])),
                     str(row["seeds"])]
            if self.options.target:
                steps = "—" if pd.isna(row["steps_to_target"]) else f"{row['steps_to_target']:g}"
                cells.append(cell("steps_to_target", f"{steps}; {row['not_reached']} of "
                                                     f"{row['seeds']}"))
            cells += [row["trials"], str(row["pruned"]), str(row["diverged"]),
                      str(row["failed"]), row["best_params"]]
            body.append(cells)
        return head, body

    def _write_text_tables(self, d: SweepData, table, best, stem: str) -> None:
        caption = (f"{d.sweep.name}: {d.sweep.metric} ({d.sweep.direction}, "
                   f"{d.sweep.spec.objective.at}) over the seeds of each method's best trial "
                   f"(chosen on those seeds). Best per column in bold; † reconstructed from "
                   f"the paper's text.")
        head, body = self._cells(table, best, lambda t: f"**{t}**", " †")
        md = [f"{caption}", "", "| " + " | ".join(head) + " |",
              "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]
        (self.out / f"{stem}.md").write_text("\n".join(md) + "\n")
        head, body = self._cells(table, best, lambda t: f"\\textbf{{{_tex(t)}}}",
                                 r" $\dagger$")
        tex = [r"\begin{table}[t]", r"\centering", r"\small",
               r"\begin{tabular}{" + "l" * len(head) + "}", r"\toprule",
               " & ".join(_tex(h) for h in head) + r" \\", r"\midrule"]
        tex += [" & ".join(c if c.startswith("\\textbf") or "dagger" in c else _tex(c)
                           for c in r) + r" \\" for r in body]
        tex += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{_tex(caption)}}}",
                r"\end{table}"]
        (self.out / f"{stem}.tex").write_text("\n".join(tex) + "\n")
        head, body = self._cells(table, best, lambda t: f"<b>{html.escape(t)}</b>", " †")
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        rows = "".join("<tr>" + "".join(
            f"<td>{c if c.startswith('<b>') else html.escape(c)}</td>" for c in r) + "</tr>"
            for r in body)
        (self.out / f"{stem}.html").write_text(
            f"<table class='results'><caption>{html.escape(caption)}</caption>"
            f"<thead><tr>{cells}</tr></thead><tbody>{rows}</tbody></table>\n")

    def poi(self, d: SweepData) -> None:
        methods = [m for m in d.methods if not m.seeds.empty]
        if len(methods) < 2:
            return
        labels = [m.label for m in methods]
        matrix = pd.DataFrame(index=labels, columns=labels, dtype=float)
        for a in methods:
            for b in methods:
                matrix.loc[a.label, b.label] = (math.nan if a is b else
                                                stats.probability_of_improvement(
                                                    [a.seeds["objective"]],
                                                    [b.seeds["objective"]], d.sweep.direction))
        stem = f"poi_{_slug(d.sweep.name)}"
        matrix.to_csv(self.out / f"{stem}.csv")
        lines = [f"P(row beats column) for a random seed of each method's best trial, "
                 f"{d.sweep.name}", "", "| | " + " | ".join(labels) + " |",
                 "|" + "---|" * (len(labels) + 1)]
        for label in labels:
            lines.append(f"| {label} | " + " | ".join(
                "—" if pd.isna(v) else f"{v:.2f}" for v in matrix.loc[label]) + " |")
        (self.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
        self.written += [self.out / f"{stem}.csv", self.out / f"{stem}.md"]
        self._provenance(self.out / f"{stem}.csv",
                         [r for m in methods for r in m.seeds["run_id"]], [d])

    def index(self) -> None:
        parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(self.spec.name)}"
                 "</title><style>body{font-family:sans-serif;max-width:1400px;margin:auto}"
                 "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
                 "padding:3px 6px}img{max-width:100%}</style>",
                 f"<h1>{html.escape(self.spec.name)}</h1>",
                 f"<p>Rebuilt from the store at {html.escape(self.created)}: "
                 + ", ".join(html.escape(f"{d.sweep.name} (task {d.sweep.task.name}, "
                                         f"{len(d.sweep.seeds)} seeds)") for d in self.data)
                 + ". Every figure and table has a JSON file beside it with its query, run "
                   "ids, git commits and statistics settings.</p>"]
        for d in self.data:
            stem = f"table_{_slug(d.sweep.name)}"
            parts.append(f"<h2>{html.escape(d.sweep.name)}</h2>")
            parts.append((self.out / f"{stem}.html").read_text())
            parts.append(f"<p>Also as <a href='{stem}.md'>Markdown</a>, "
                         f"<a href='{stem}.tex'>LaTeX</a>, <a href='{stem}.csv'>CSV</a>; "
                         f"<a href='{stem}.json'>provenance</a>.</p>")
            poi = self.out / f"poi_{_slug(d.sweep.name)}.md"
            if poi.exists():
                parts.append(f"<p><a href='{poi.name}'>Probability of improvement</a></p>")
        for path in self.written:
            if path.suffix == ".png":
                parts.append(f"<h3>{html.escape(path.stem)}</h3><img src='{path.name}' "
                             f"alt='{html.escape(path.stem)}'><p><a href='{path.stem}.pdf'>"
                             f"PDF</a> · <a href='{path.stem}.json'>provenance</a></p>")
        path = self.out / "index.html"
        path.write_text("\n".join(parts))
        self.written.append(path)


def build(spec: ReportSpec | Sweep, out_dir: Path) -> list[Path]:
    """Write the report into ``out_dir`` atomically: it is built in a folder beside it, then
    renamed into place, so ``out_dir`` holds the old report (or nothing) until the new one is
    complete. A folder that holds something other than a report is never replaced."""
    if isinstance(spec, Sweep):
        spec = ReportSpec(spec.name, [spec], spec.spec.report)
    target = _replaceable(Path(out_dir))
    staging = _staging(target)
    try:
        written = Report(spec, staging).build()
        _move_into_place(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [Path(out_dir) / path.name for path in written]


def _replaceable(out: Path) -> Path:
    """The folder the report replaces (a symlink's target): absent, empty or a report."""
    target = out.resolve() if out.is_symlink() else out
    if target.exists() and not (target.is_dir() and (
            (target / "provenance.json").is_file() or not any(target.iterdir()))):
        raise ReportError(f"{out} is not a report (it has no provenance.json) and would be "
                          "replaced: remove it or name another folder with --out")
    return target


def _staging(target: Path) -> Path:
    """A fresh folder beside ``target`` to build in, once leftovers of killed builds are gone
    (``.NAME.building-PID`` and ``.NAME.old-PID`` of processes that have ended)."""
    if target.parent.is_dir():
        for leftover in target.parent.iterdir():
            stem, _, pid = leftover.name.rpartition("-")
            if (stem in (f".{target.name}.building", f".{target.name}.old") and pid.isdigit()
                    and not process_alive(int(pid))):
                shutil.rmtree(leftover, ignore_errors=True)
    staging = target.with_name(f".{target.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def _move_into_place(staging: Path, target: Path) -> None:
    """Rename the new report to ``target``; an old one is moved aside first, then removed."""
    if not target.exists():
        staging.rename(target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    target.rename(old)
    staging.rename(target)
    shutil.rmtree(old)


def _log_if_wide(ax, values, which: str) -> None:
    """A log scale when every value is positive and they span more than a factor of 20."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").dropna().to_numpy()
    v = v[np.isfinite(v)]
    positive = v[v > 0]
    # rounding can put a converged suboptimality at 0 or just below: those points are masked
    if positive.size >= 0.5 * max(v.size, 1) and positive.size and \
            positive.max() > 20 * positive.min():
        (ax.set_yscale if which == "y" else ax.set_xscale)("log", nonpositive="mask")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


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
    return re.sub(r"([&%$#_{}])", r"\\\1", str(text)).replace("†", r"$\dagger$")

