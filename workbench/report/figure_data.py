"""The numbers of the report's figures, computed before anything is drawn: one pure function
per figure, each a tidy table (one row per point, bar or tick drawn) with the runs it uses
(``Numbers``). ``figures`` draws such a table and nothing else; the report saves it as
``<figure stem>.csv`` beside the figure's PNG and PDF.

- ``curves`` (``CURVE_COLUMNS``): per method, every x of the common grid with the aggregate over
  seeds and its band;
- ``final`` (``FINAL_COLUMNS``): per method the aggregate with its interval (``kind``
  ``aggregate``) and every seed's value (``seed``); across several sweeps the normalised
  scores' aggregate with its stratified bootstrap interval (``pooled``, sweep ``all``);
- ``profiles`` (``PROFILE_COLUMNS``): the fraction of runs at least as good as each tau;
- ``best_of_k`` (``BEST_OF_K_COLUMNS``): the expected best objective after k trials and its
  bootstrap band;
- ``sensitivity`` (``SENSITIVITY_COLUMNS``): every complete or pruned trial's value of each
  tuned hyperparameter, its position on the axis and its objective.

Every statistic comes from ``workbench.stats.aggregates``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import optuna.distributions as od
import pandas as pd

from workbench.report.data import MethodData, SweepData, curve_on_grid, pooled_scores
from workbench.stats import aggregates as stats
from workbench.store import runs
from workbench.store.study_record import ReportOptions

BEST_OF_K_RESAMPLES = 200
PROFILE_POINTS = 200
POOLED = "all"  # the sweep of ``final``'s rows pooled over every sweep

CURVE_COLUMNS = ["sweep", "method", "metric", "axis", "x", "centre", "low", "high", "n_seeds"]
FINAL_COLUMNS = ["sweep", "method", "kind", "seed", "run_id", "value", "low", "high", "n"]
PROFILE_COLUMNS = ["sweep", "method", "tau", "fraction", "n_seeds"]
BEST_OF_K_COLUMNS = ["sweep", "method", "k", "expected_best", "low", "high", "n_trials"]
SENSITIVITY_COLUMNS = ["sweep", "method", "hyperparameter", "run_id", "status", "value", "x",
                       "objective"]


@dataclass
class Numbers:
    """A figure's numbers: the tidy ``table`` it draws and the runs they come from."""

    table: pd.DataFrame
    run_ids: list[str]

    def csv(self) -> str:
        """The table as CSV, every float in full precision (``repr``: it reads back equal)."""
        return self.table.to_csv(index=False, float_format=repr_float)


def repr_float(x: float) -> str:
    return repr(float(x))


def _table(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)[columns]


def finite_seeds(seeds: pd.DataFrame) -> pd.DataFrame:
    """The seed runs with a finite objective (a diverged held-out seed has no whole curve)."""
    return seeds[np.isfinite(seeds["objective"].to_numpy(dtype=float))]


def curves(sweeps: list[SweepData], metric: str, axis: str, options: ReportOptions) -> Numbers:
    """Per sweep and method (its best trial's seeds with a finite objective): each seed's
    ``metric`` interpolated onto a common grid of ``axis``, then at every grid point the
    report's aggregate over seeds (``centre``) and its interval inside the metric's range."""
    frames, used = [], []
    for d in sweeps:
        for m in d.methods:
            shown = finite_seeds(m.seeds)
            if shown.empty:
                continue
            grid, values = curve_on_grid(d, shown["run_id"].tolist(), metric, axis)
            if grid is None:
                continue
            centre = np.array([stats.aggregate(values[:, j], options.aggregate)
                               for j in range(values.shape[1])])
            low, high = stats.interval_band(values, options.aggregate, options.confidence,
                                            bounds=d.bounds(metric))
            frames.append(pd.DataFrame({"sweep": d.name, "method": m.label, "metric": metric,
                                        "axis": axis, "x": grid, "centre": centre, "low": low,
                                        "high": high, "n_seeds": values.shape[0]}))
            used += shown["run_id"].tolist()
    return Numbers(_table(frames, CURVE_COLUMNS), used)


def final(sweeps: list[SweepData], options: ReportOptions) -> Numbers:
    """Per sweep and method with seeds: the aggregate of its seeds' objectives with its
    interval inside the metric's range, then each seed's value; across several sweeps, per
    method on every sweep, the aggregate of its normalised scores with a bootstrap interval
    stratified by sweep (``pooled_scores``)."""
    rows, used = [], []
    for d in sweeps:
        for m in d.methods:
            if m.seeds.empty:
                continue
            values = m.seeds["objective"].to_numpy(dtype=float)
            interval = stats.interval(values, options.aggregate, options.confidence,
                                      d.bounds(d.metric))
            rows.append([d.name, m.label, "aggregate", None, None,
                         stats.aggregate(values, options.aggregate), interval.low,
                         interval.high, len(m.seeds)])
            rows += [[d.name, m.label, "seed", int(seed), run_id, float(value), math.nan,
                      math.nan, 1] for seed, run_id, value in
                     zip(m.seeds["seed"], m.seeds["run_id"], values, strict=True)]
            used += m.seeds["run_id"].tolist()
    if len(sweeps) > 1:
        for label, (scores, strata) in pooled_scores(sweeps).items():
            low, high = stats.bootstrap_ci(scores, options.aggregate, options.confidence,
                                           options.resamples, strata=strata)
            rows.append([POOLED, label, "pooled", None, None,
                         stats.aggregate(scores, options.aggregate), low, high, len(scores)])
    table = pd.DataFrame(rows, columns=FINAL_COLUMNS)
    table["seed"] = table["seed"].astype("Int64")  # no seed on an aggregate's row
    table[["value", "low", "high"]] = table[["value", "low", "high"]].astype(float)
    return Numbers(table, used)


def profile_log(direction: str, values: np.ndarray) -> bool:
    """Whether a performance profile's thresholds are log-spaced (and its axis log): finite
    positive values spanning more than a factor of 20 of a metric to minimise."""
    return bool(direction == "minimize" and (values > 0).all()
                and values.max() > 20 * values.min())


def profiles(sweeps: list[SweepData]) -> Numbers:
    """Per sweep whose methods have a finite objective: ``PROFILE_POINTS`` thresholds tau over
    the range of every method's seeds, and per method the fraction of its seeds at least as
    good as each tau."""
    frames, used = [], []
    for d in sweeps:
        methods = [m for m in d.methods if not m.seeds.empty]
        everything = np.concatenate([m.seeds["objective"].to_numpy(dtype=float)
                                     for m in methods]) if methods else np.array([])
        everything = everything[np.isfinite(everything)]
        if everything.size == 0:
            continue
        space = np.geomspace if profile_log(d.direction, everything) else np.linspace
        taus = space(everything.min(), everything.max(), PROFILE_POINTS)
        for m in methods:
            frac = stats.performance_profile(m.seeds["objective"], taus, d.direction)
            frames.append(pd.DataFrame({"sweep": d.name, "method": m.label, "tau": taus,
                                        "fraction": frac, "n_seeds": len(m.seeds)}))
            used += m.seeds["run_id"].tolist()
    return Numbers(_table(frames, PROFILE_COLUMNS), used)


def complete_trials(m: MethodData) -> np.ndarray:
    """The objectives of the method's complete trials."""
    values = m.trials[m.trials["status"] == runs.FINISHED]["objective"].dropna()
    return values.to_numpy(dtype=float)


def best_of_k(sweeps: list[SweepData], options: ReportOptions) -> Numbers:
    """Per sweep and method with complete trials: the expected best objective after k of its
    n trials, k = 1..n (Dodge et al. 2019), with a percentile bootstrap band over trials
    (``BEST_OF_K_RESAMPLES``; none for one trial), every band drawn in turn from one stream
    seeded 0."""
    frames, used = [], []
    rng = np.random.default_rng(0)
    for d in sweeps:
        for m in d.methods:
            values = complete_trials(m)
            if values.size == 0:
                continue
            curve = stats.expected_best_of_k(values, d.direction)
            if values.size > 1:
                low, high = stats.best_of_k_band(values, d.direction, options.confidence,
                                                 BEST_OF_K_RESAMPLES, seed=rng)
            else:
                low = high = np.full(values.size, math.nan)
            frames.append(pd.DataFrame({"sweep": d.name, "method": m.label,
                                        "k": np.arange(1, values.size + 1),
                                        "expected_best": curve, "low": low, "high": high,
                                        "n_trials": values.size}))
            used += m.trials["run_id"].tolist()
    return Numbers(_table(frames, BEST_OF_K_COLUMNS), used)


def positions(raw: pd.Series, dist) -> np.ndarray:
    """Where values of a hyperparameter go on its axis: the number, or a choice's index."""
    if isinstance(dist, od.CategoricalDistribution):
        labels = [str(c) for c in dist.choices]
        return np.array([labels.index(str(v)) if str(v) in labels else np.nan for v in raw],
                        dtype=float)
    return pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)


def sensitivity(d: SweepData) -> Numbers:
    """Per method and tuned hyperparameter: every complete trial with an objective (status
    ``complete``) and every pruned one (``pruned``, no objective), with its value of the
    hyperparameter and that value's position on the figure's axis (``positions``)."""
    params = d.params.set_index("run_id") if "run_id" in d.params else pd.DataFrame()
    frames, used = [], []
    for m in d.methods:
        done = m.trials[(m.trials["status"] == runs.FINISHED) & m.trials["objective"].notna()]
        pruned = m.trials[m.trials["status"] == runs.KILLED]
        for name, dist in m.space.items():
            for status, t in (("complete", done), ("pruned", pruned)):
                raw = params.reindex(t["run_id"]).get(name, pd.Series(np.nan, index=t.index))
                frames.append(pd.DataFrame({
                    "sweep": d.name, "method": m.label, "hyperparameter": name,
                    "run_id": t["run_id"].to_numpy(), "status": status,
                    "value": np.asarray(raw, dtype=object), "x": positions(raw, dist),
                    "objective": (t["objective"].to_numpy(dtype=float) if status == "complete"
                                  else np.full(len(t), math.nan))}))
            used += done["run_id"].tolist() + pruned["run_id"].tolist()
    return Numbers(_table(frames, SENSITIVITY_COLUMNS), used)
