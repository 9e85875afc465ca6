"""Claim-level fits: a model fitted to the curves a reproduction keeps, computed by `workbench
reproduce` after the curve CSVs are written and saved in the results folder with intervals
over seeds, where a check reads them (``{method: B_noise, file: fit_NAME, column: ci_low}``).

An entry of ``fits:`` in ``claim.yaml``::

    - name: critical-batch          # -> fit_NAME.csv, fit_NAME_points.csv, fit_NAME_seeds.csv
      sweep: critical-batch-fixed   # a sweep of the claim (default: its first)
      curve: train/loss             # a metric under curves: curve_SWEEP_METRIC.csv's seed columns
      target: 0.46                  # the steps to target of each seed: the first logged step
      direction: minimize           #   whose value is <= target (maximize: >=)
      model: batch_noise            # S = S_min (1 + B_noise / B)
      x: {sgd+b8: 8, sgd+b32: 32}   # each arm's method label -> its B (3 distinct at least)
      measured:                     # optional: a quantity measured in training to set beside
        name: B_simple              #   the fit, a row of fit_NAME.csv: per seed, the value of
        sweep: critical-batch-ramp  #   ``metric`` at the first step where ``method``'s curve
        method: sgd+ramp            #   reaches the target (its last logged value at or
        metric: batch/noise_scale   #   before that step)

**Model ``batch_noise``** (McCandlish et al., "An Empirical Model of Large-Batch Training",
2018, eq. 2.11): steps to a target S(B) = S_min (1 + B_noise / B), samples E = S B =
E_min (1 + B / B_noise) with E_min = S_min B_noise, and B_crit = E_min / S_min (= B_noise in
this model). Fitted per seed, over the seeds every arm shares (the curve CSV's ``LABEL seed S``
columns), by least squares on log S:

    minimise over S_min > 0, B_noise >= 0:  sum_i (log S_i - log S_min - log(1 + B_noise / B_i))^2

For a fixed B_noise the best log S_min is the mean of log S_i - log(1 + B_noise / B_i) (the
profile), so the fit is one-dimensional in B_noise: the profile's residual on B_noise = 0 and
1,201 log-spaced values from min(B) / 1000 to max(B) x 1000, then refined by a bounded scalar
minimisation between the best grid point's neighbours. Log space, not least squares on S
against 1/B (where S is affine): S spans more than a decade across the arms and its scatter
over seeds, and the rounding of steps to whole numbers, are relative, so absolute residuals
let the smallest batch decide the fit (on critical-batch it put S_min at 12 steps while two
arms reached the target in 5); on log S every arm weighs alike, S_min and B_noise stay
positive, and it is the fit the README made by hand. A best B_noise on the grid's last point
(S still falling as 1/B at the largest B: B_noise not identified) gives NaN parameters.

**Censoring.** A seed whose curve never reaches the target within its steps has only a lower
bound for S. An arm with such a seed is left out of the fit for every seed (``in_fit`` false
in the points file, its steps NaN with ``not_reached`` counting them), so each seed's fit has
the same arms and none takes a bound for a value; with fewer than 3 distinct B left the fit
is NaN. An arm where a seed reached it at step 0 (no log S) is left out likewise.

**Intervals.** Each parameter's estimate is the mean of the per-seed fits and its interval the
95% Student-t interval on that mean (``workbench.stats.aggregates.interval``), within [0, inf)
for the parameters; NaN when a seed's fit is NaN or fewer than 2 seeds. The same for each
arm's steps to target (samples = steps x B, so their interval is B times the steps').

Written per fit: ``fit_NAME.csv`` (a row per parameter, ``method`` naming it: S_min, B_noise,
E_min, B_crit, rms_log_residual, and the measured quantity; columns estimate, ci_low,
ci_high, n, what), ``fit_NAME_points.csv`` (a row per arm, ``method`` its label: B, seeds,
not_reached, in_fit, steps, steps_low, steps_high, samples, samples_low, samples_high,
model_steps and model_samples from the estimates) and ``fit_NAME_seeds.csv`` (each seed's
parameters).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from workbench.common.validation import Strict, did_you_mean
from workbench.stats.aggregates import interval
from workbench.stats.claims import Reach, first_reach

ROW = r"^[A-Za-z0-9][A-Za-z0-9_.=+-]{0,200}$"  # a row's name, read by a check's ``method``
PARAMETERS = ("S_min", "B_noise", "E_min", "B_crit", "rms_log_residual")
WHAT = {"S_min": "fewest steps to the target (B -> infinity)",
        "B_noise": "noise scale of S = S_min (1 + B_noise / B)",
        "E_min": "fewest samples to the target (B -> 0): S_min B_noise",
        "B_crit": "critical batch E_min / S_min (B_noise in this model)",
        "rms_log_residual": "root-mean-square residual of log S over the arms fitted"}
POSITIVE = (0.0, math.inf)
GRID_POINTS = 1201
GRID_DECADES = 3  # below min(B) and above max(B)


class Measured(Strict):
    """A quantity measured during training, set beside the fit as a row of ``fit_NAME.csv``:
    per seed, ``metric``'s value at the first step where ``method``'s curve (the fit's) reaches
    the fit's target."""

    name: str = Field(pattern=ROW, description="its row's name in fit_NAME.csv")
    sweep: str | None = Field(None, description="the sweep (default: the fit's)")
    method: str = Field(description="the method label whose runs measured it")
    metric: str = Field(description="a metric listed under curves")

    @model_validator(mode="after")
    def _not_a_parameter(self) -> Measured:
        if self.name in PARAMETERS:
            raise ValueError(f"name {self.name!r} is a fitted parameter's row; allowed: "
                             f"another name than {', '.join(PARAMETERS)}")
        return self


class Fit(Strict):
    """A model fitted per seed to steps to a target against each arm's x (``x``)."""

    name: str = Field(pattern=ROW, description="the fit's name: fit_NAME.csv")
    sweep: str | None = Field(None, description="the sweep whose curve it reads (default: "
                                                "the claim's first)")
    curve: str = Field(description="a metric listed under curves")
    target: float = Field(description="the value each seed's curve must reach")
    direction: Literal["minimize", "maximize"] = Field(
        description="minimize: reached at the first value <= target; maximize: >=")
    model: Literal["batch_noise"] = Field(description="batch_noise: S = S_min (1 + B_noise/B)")
    x: dict[str, float] = Field(min_length=3, description="method label -> its batch size B")
    measured: Measured | None = None

    @model_validator(mode="after")
    def _enough_arms(self) -> Fit:
        bad = [label for label, b in self.x.items() if not b > 0]
        if bad:
            raise ValueError(f"x of {bad[0]} is {self.x[bad[0]]:g}; allowed: a batch size > 0")
        if len(set(self.x.values())) < 3:
            raise ValueError("x needs 3 distinct batch sizes at least (2 parameters and a "
                             "residual)")
        return self


def problems(claim, folder: Path) -> list[tuple[str, str]]:
    """(key path, message) of each fit that names what the claim does not have: a curve not
    under ``curves``, a sweep not among its sweeps' names, a method label its sweep has not, a
    repeated name. Reads the sweep specs (resolved, from the cache when current)."""
    from workbench.spec import resolved

    out: list[tuple[str, str]] = []
    labels: dict[str, list[str]] = {}
    for name in claim.sweeps:
        sweep = resolved.load(folder / name)
        labels[sweep.name] = [study.label for study in sweep.studies]
    first = next(iter(labels))
    seen: set[str] = set()
    for i, fit in enumerate(claim.fits):
        where = f"fits[{i}]"
        if fit.name in seen:
            out.append((f"{where}.name", f"{fit.name!r} is another fit's name too; allowed: "
                                         "one name per fit"))
        seen.add(fit.name)
        curves = [(f"{where}.curve", fit.curve)]
        if fit.measured is not None:
            curves.append((f"{where}.measured.metric", fit.measured.metric))
        for path, metric in curves:
            if metric not in claim.curves:
                allowed = ", ".join(claim.curves) or "none (curves is empty)"
                out.append((path, f"{metric} is not under curves; "
                                  f"{did_you_mean(metric, claim.curves)}allowed: {allowed}"))
        arms = [(f"{where}.sweep", fit.sweep,
                 [(f"{where}.x.{label}", label) for label in fit.x])]
        if fit.measured is not None:
            arms.append((f"{where}.measured.sweep", fit.measured.sweep or fit.sweep,
                         [(f"{where}.measured.method", fit.measured.method)]))
        for path, sweep, named in arms:
            sweep = sweep or first
            if sweep not in labels:
                out.append((path, f"{sweep!r} is not a sweep of the claim; "
                                  f"{did_you_mean(sweep, labels)}allowed: {', '.join(labels)}"))
                continue
            for key, label in named:
                if label not in labels[sweep]:
                    out.append((key, f"{label!r} is not a method label of sweep {sweep}; "
                                     f"{did_you_mean(label, labels[sweep])}allowed: "
                                     f"{', '.join(labels[sweep])}"))
    return out


def files(name: str) -> tuple[str, str, str]:
    """The CSV names a fit writes: its parameters, its points (per arm) and its seeds."""
    return f"fit_{name}.csv", f"fit_{name}_points.csv", f"fit_{name}_seeds.csv"


def write(claim, results: Path, sweeps: list[str],
          say: Callable[[str], None] = lambda line: None) -> list[Path]:
    """Each fit of ``claim`` computed from the curve CSVs in ``results`` (``sweeps``: the
    sweeps' names, the first the default) and written there; the paths written."""
    from workbench.reproduce.checks import curve_file

    written = []
    for fit in claim.fits:
        sweep = fit.sweep or sweeps[0]
        curve = pd.read_csv(results / curve_file(sweep, fit.curve))
        params, points, per_seed = batch_noise(curve, fit)
        if fit.measured is not None:
            m = fit.measured
            m_sweep = m.sweep or sweep
            values = measured_at_target(pd.read_csv(results / curve_file(m_sweep, fit.curve)),
                                        pd.read_csv(results / curve_file(m_sweep, m.metric)),
                                        m.method, fit.target, fit.direction)
            params.append(_row(m.name, values, f"{m.metric} of {m.method} ({m_sweep}) at the "
                                               f"first step its {fit.curve} reaches "
                                               f"{fit.target:g}", bounds=(-math.inf, math.inf)))
        for frame, path in zip((pd.DataFrame(params), points, per_seed),
                               (results / f for f in files(fit.name)), strict=True):
            frame.to_csv(path, index=False)
            written.append(path)
        shown = {row["method"]: row for row in params}
        b = shown["B_noise"]
        say(f"fit {fit.name}: {fit.model} on {int(points['in_fit'].sum())} arms x {b['n']} "
            f"seeds: B_noise {b['estimate']:.4g} [{b['ci_low']:.4g}, {b['ci_high']:.4g}], "
            f"S_min {shown['S_min']['estimate']:.4g}")
    return written


def reaches(curve: pd.DataFrame, label: str, target: float,
            direction: str) -> dict[str, Reach]:
    """Seed -> when that seed's curve (column ``LABEL seed S``) first reached ``target`` (or its
    last logged step, censored)."""
    prefix = f"{label} seed "
    out = {}
    for column in curve.columns:
        if column.startswith(prefix):
            logged = curve[column].notna().to_numpy()
            out[column[len(prefix):]] = first_reach(curve["step"].to_numpy(float)[logged],
                                                    curve[column].to_numpy(float)[logged],
                                                    target, direction)
    return out


def batch_noise(curve: pd.DataFrame, fit: Fit) -> tuple[list[dict], pd.DataFrame, pd.DataFrame]:
    """The parameter rows, the points (per arm) and the per-seed fits of ``fit`` on ``curve``."""
    by_arm = {label: reaches(curve, label, fit.target, fit.direction) for label in fit.x}
    present = [seeds for seeds in by_arm.values() if seeds]
    shared = sorted(set.intersection(*map(set, present)), key=_seed_order) if present else []
    points = []
    for label, b in fit.x.items():
        got = [by_arm[label][s] for s in shared if s in by_arm[label]]
        not_reached = sum(r.censored for r in got)
        steps = [r.x for r in got] if got and not not_reached else []
        ci = interval(steps, "mean", 0.95, POSITIVE)
        mean = float(np.mean(steps)) if steps else math.nan
        points.append({"method": label, "B": b, "seeds": len(got), "not_reached": not_reached,
                       "in_fit": bool(steps) and min(steps) > 0, "steps": mean,
                       "steps_low": ci.low, "steps_high": ci.high, "samples": mean * b,
                       "samples_low": ci.low * b, "samples_high": ci.high * b})
    fitted = [p for p in points if p["in_fit"]]
    enough = len({p["B"] for p in fitted}) >= 3
    seeds = []
    for s in shared:
        one = fit_batch_noise([p["B"] for p in fitted],
                              [by_arm[p["method"]][s].x for p in fitted]) if enough else \
            dict.fromkeys(PARAMETERS, math.nan)
        seeds.append({"seed": s, **one})
    per_seed = pd.DataFrame(seeds, columns=["seed", *PARAMETERS])
    params = [_row(p, per_seed[p].to_numpy(float), WHAT[p]) for p in PARAMETERS]
    s_min, b_noise = params[0]["estimate"], params[1]["estimate"]
    frame = pd.DataFrame(points)
    frame["model_steps"] = s_min * (1.0 + b_noise / frame["B"])
    frame["model_samples"] = frame["model_steps"] * frame["B"]
    return params, frame, per_seed


def fit_batch_noise(batch, steps) -> dict[str, float]:
    """S_min, B_noise, E_min, B_crit and the rms residual of log S of one seed's points
    (least squares on log S, profiled over B_noise: see the module's text); NaN where a step
    is not positive or B_noise is not identified (the grid's upper end)."""
    from scipy.optimize import minimize_scalar

    b, s = np.asarray(batch, dtype=float), np.asarray(steps, dtype=float)
    if not (np.all(np.isfinite(s)) and np.all(s > 0)):
        return dict.fromkeys(PARAMETERS, math.nan)
    y = np.log(s)

    def residual(beta: float) -> tuple[float, float]:
        r = y - np.log1p(beta / b)
        return float(np.sum((r - r.mean()) ** 2)), float(r.mean())

    grid = np.concatenate([[0.0], np.geomspace(b.min() / 10 ** GRID_DECADES,
                                               b.max() * 10 ** GRID_DECADES, GRID_POINTS)])
    sums = [residual(beta)[0] for beta in grid]
    best = int(np.argmin(sums))
    if best == grid.size - 1:
        nan = dict.fromkeys(PARAMETERS, math.nan)
        return {**nan, "rms_log_residual": math.sqrt(sums[best] / b.size)}
    low, high = grid[max(best - 1, 0)], grid[best + 1]
    refined = minimize_scalar(lambda beta: residual(beta)[0], bounds=(low, high),
                              method="bounded", options={"xatol": 1e-9 * high})
    beta = float(refined.x) if refined.fun <= sums[best] else float(grid[best])
    total, intercept = residual(beta)
    s_min = math.exp(intercept)
    return {"S_min": s_min, "B_noise": beta, "E_min": s_min * beta, "B_crit": beta,
            "rms_log_residual": math.sqrt(total / b.size)}


def measured_at_target(curve: pd.DataFrame, metric: pd.DataFrame, label: str, target: float,
                       direction: str) -> np.ndarray:
    """Per seed of ``label``: ``metric``'s last logged value at or before the first step where
    its ``curve`` reached ``target``; the seeds that never reached it are left out."""
    values = []
    prefix = f"{label} seed "
    for seed, reach in sorted(reaches(curve, label, target, direction).items(),
                              key=lambda item: _seed_order(item[0])):
        column = prefix + seed
        if reach.censored or column not in metric.columns:
            continue
        logged = metric[(metric["step"] <= reach.x) & metric[column].notna()]
        if not logged.empty:
            values.append(float(logged[column].iloc[-1]))
    return np.asarray(values, dtype=float)


def _row(name: str, values, what: str, bounds: tuple[float, float] = POSITIVE) -> dict:
    values = np.asarray(values, dtype=float)
    ci = interval(values, "mean", 0.95, bounds)
    estimate = float(values.mean()) if values.size and np.all(np.isfinite(values)) else math.nan
    return {"method": name, "estimate": estimate, "ci_low": ci.low, "ci_high": ci.high,
            "n": int(np.isfinite(values).sum()), "what": what}


def _seed_order(seed: str):
    try:
        return (0, float(seed), seed)
    except ValueError:
        return (1, 0.0, seed)
