"""Statistics a claim needs beyond ``workbench.stats.aggregates``: a power-law rate and the time
to a target with censoring. (Intervals over seeds are ``stats.interval``'s.)

- ``loglog_fit`` / ``loglog_slope``: for m(t) ~ C t^a, the least-squares fit of
  log m = log C + a log t over a window [low, high] of t, on up to ``SLOPE_POINTS``
  log-spaced t (each the logged t nearest to it, so each decade weighs the same): a = -1 is an
  O(1/t) rate, a = -2 an O(1/t^2) one. The one place the workbench fits a rate (the report's
  ``rates`` figure and the reproductions' slope checks).
- ``metric_fit`` / ``model_curve``: a curve y = f(x; a, b) of one metric against another, by
  ``FIT_MODELS``: ``power`` (``loglog_fit``), ``exponential`` y = -a exp(x) + b (Cui et al.
  2025's entropy-performance law R = -a e^H + b, linear least squares in exp(x)) and ``affine``
  y = a x + b, each over a window of x.
- ``edge_trend``: whether a tuned hyperparameter's objective still improves monotonically
  toward the end of its search range that the best trial sits at (one-sided exact Spearman
  permutation test over the trials nearest that end).
- ``linear_change``: the drift of a curve over a window [low, high] of x: the least-squares
  slope b of y = c + b x on its points there, times (high - low), so a metric that rises by 4
  over the window reads 4 however noisy its single steps.
- ``first_reach``: the first x at which a curve reaches a target, or its last x, censored.
- ``km_median``: the Kaplan-Meier median of such times with censoring (Kaplan & Meier,
  "Nonparametric estimation from incomplete observations", JASA 1958).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from workbench.stats.aggregates import steps_to_target

SLOPE_POINTS = 50


def loglog_fit(x, y, low: float, high: float,
               points: int = SLOPE_POINTS) -> tuple[float, float]:
    """(a, log C) of log y = log C + a log x, fitted on up to ``points`` log-spaced x in
    [low, high] (each the x nearest to it; positive finite y only); (NaN, NaN) with fewer than
    3 distinct x usable."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    usable = (x >= low) & (x <= high) & (x > 0) & (y > 0) & np.isfinite(y)
    s, v = x[usable], y[usable]
    if s.size < 3:
        return math.nan, math.nan
    wanted = np.geomspace(low if low > 0 else s.min(), high, points)
    picked = np.unique([int(np.argmin(np.abs(s - w))) for w in wanted])
    if picked.size < 3:
        return math.nan, math.nan
    slope, intercept = np.polyfit(np.log(s[picked]), np.log(v[picked]), 1)
    return float(slope), float(intercept)


def loglog_slope(x, y, low: float, high: float, points: int = SLOPE_POINTS) -> float:
    """a of ``loglog_fit``: the exponent of y ~ C x^a over [low, high]; NaN when unfitted."""
    return loglog_fit(x, y, low, high, points)[0]


# model -> (the formula, its parameters' names): the per-seed CSV's columns, in this order
FIT_MODELS = {
    "power": ("y = C x^a: log y = intercept + slope log x (intercept = log C)",
              ("slope", "intercept")),
    "exponential": ("y = -a exp(x) + b", ("a", "b")),
    "affine": ("y = a x + b", ("a", "b")),
}


def metric_fit(model: str, x, y, low: float, high: float) -> tuple[float, float]:
    """The two parameters (``FIT_MODELS[model][1]``) of ``model`` fitted to the pairs (x, y)
    with x in [low, high]: ``power``, ``loglog_fit`` (log-spaced points, unchanged); the
    others, ordinary least squares on every finite pair in the window, linear in the
    parameters (``exponential`` regresses y on exp(x), so a = minus that coefficient). (NaN,
    NaN) with fewer than 3 distinct x usable."""
    if model == "power":
        return loglog_fit(x, y, low, high)
    if model not in FIT_MODELS:
        raise ValueError(f"no fit model {model!r}; allowed: {', '.join(FIT_MODELS)}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    usable = (x >= low) & (x <= high) & np.isfinite(x) & np.isfinite(y)
    s, v = x[usable], y[usable]
    if np.unique(s).size < 3:
        return math.nan, math.nan
    feature = np.exp(s) if model == "exponential" else s
    if not np.all(np.isfinite(feature)):
        return math.nan, math.nan
    design = np.column_stack([feature, np.ones_like(feature)])
    (coefficient, b), *_ = np.linalg.lstsq(design, v, rcond=None)
    a = -coefficient if model == "exponential" else coefficient
    return float(a), float(b)


def model_curve(model: str, params: tuple[float, float], x) -> np.ndarray:
    """y of ``model`` with ``params`` (as ``metric_fit`` returns them) at ``x``."""
    x = np.asarray(x, dtype=float)
    a, b = params
    if model == "power":
        return np.exp(b) * x ** a
    if model == "exponential":
        return -a * np.exp(x) + b
    if model == "affine":
        return a * x + b
    raise ValueError(f"no fit model {model!r}; allowed: {', '.join(FIT_MODELS)}")


EDGE_TRIALS = 8  # the trials nearest the edge that ``edge_trend`` tests (8! orders: exact)
EDGE_MIN_TRIALS = 5  # a perfect order of 5 has p = 1/120: one swapped pair still passes
EDGE_ALPHA = 0.05


@dataclass(frozen=True)
class EdgeTrend:
    """The objective's trend toward one end of a search range over the ``n`` trials nearest
    it: ``rho``, Spearman's rank correlation of the objective's goodness (the objective,
    negated when minimized) with nearness to that end (> 0: better nearer the end); ``p``,
    the one-sided exact permutation p-value of rho this large; ``lowest`` and ``highest``,
    the trials' extreme values; ``slope``, the objective's rate there:
    the exponent a of objective ~ C value^a (``form`` "power": a log range with positive
    objectives), its change per decade (``per_decade``) or per unit of the value
    (``per_unit``); ``improving``: p <= alpha and rho > 0."""

    edge: str
    n: int
    lowest: float
    highest: float
    rho: float
    p: float
    slope: float
    form: str
    improving: bool


def edge_trend(values, objectives, edge: str, direction: str, log: bool,
               k: int = EDGE_TRIALS, alpha: float = EDGE_ALPHA) -> EdgeTrend | None:
    """Is the objective still improving monotonically toward ``edge`` ("low" or "high") of a
    search range, over the ``k`` trials (value, objective) nearest that end in the range's
    scale (log10 of the value on a ``log`` range)? The test: Spearman's rho of the
    objective's goodness against nearness to the end, one-sided, its p-value exact over every
    order of the objectives (ties take average ranks); monotone, so it assumes no functional
    form. None with fewer than ``EDGE_MIN_TRIALS`` finite trials or 3 distinct values."""
    if edge not in ("low", "high"):
        raise ValueError(f"edge must be 'low' or 'high', not {edge!r}")
    v, o = np.asarray(values, dtype=float), np.asarray(objectives, dtype=float)
    keep = np.isfinite(v) & np.isfinite(o) & ((v > 0) if log else True)
    v, o = v[keep], o[keep]
    position = np.log10(v) if log else v
    toward = position if edge == "high" else -position
    nearest = np.argsort(-toward, kind="stable")[:k]
    v, o, position, toward = v[nearest], o[nearest], position[nearest], toward[nearest]
    if v.size < EDGE_MIN_TRIALS or np.unique(v).size < 3:
        return None
    goodness = o if direction == "maximize" else -o
    near_ranks = scipy_stats.rankdata(toward)
    good_ranks = scipy_stats.rankdata(goodness)
    rho = _rank_correlation(near_ranks, good_ranks[None, :])[0]
    orders = np.array(list(itertools.permutations(range(v.size))))
    null = _rank_correlation(near_ranks, good_ranks[orders])
    p = float(np.mean(null >= rho - 1e-12)) if np.isfinite(rho) else math.nan
    if log and np.all(o > 0):
        slope, form = np.polyfit(np.log(v), np.log(o), 1)[0], "power"
    else:
        slope, form = np.polyfit(position, o, 1)[0], "per_decade" if log else "per_unit"
    return EdgeTrend(edge, int(v.size), float(v.min()), float(v.max()), float(rho), p,
                     float(slope), form, bool(p <= alpha and rho > 0))


def _rank_correlation(ranks, others) -> np.ndarray:
    """Pearson's correlation of ``ranks`` with each row of ``others`` (Spearman's rho when
    both are ranks); NaN where one is constant."""
    a = ranks - ranks.mean()
    b = others - others.mean(axis=1, keepdims=True)
    denominator = np.sqrt((a ** 2).sum() * (b ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (b @ a) / denominator


def linear_change(x, y, low: float, high: float) -> float:
    """b (high - low) for the least-squares line y = c + b x over the finite points with x in
    [low, high]; NaN with fewer than 3 of them."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    usable = (x >= low) & (x <= high) & np.isfinite(y)
    if np.unique(x[usable]).size < 3:
        return math.nan
    slope, _ = np.polyfit(x[usable], y[usable], 1)
    return float(slope) * (high - low)


@dataclass(frozen=True)
class Reach:
    """When a curve reached a target: ``x`` the first x at which it did, or, ``censored``,
    its last x (it had not reached it by then)."""

    x: float
    censored: bool

    def text(self) -> str:
        return f">{self.x:g}" if self.censored else f"{self.x:g}"


def first_reach(x, values, target: float, direction: str = "maximize") -> Reach:
    """The first x whose value reaches ``target`` (>= when maximizing, <= when minimizing),
    else the last x, censored; NaN (censored) for an empty curve."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return Reach(math.nan, True)
    reached = steps_to_target(x, values, target, direction)
    return Reach(reached, False) if not math.isnan(reached) else Reach(float(np.nanmax(x)), True)


def km_median(reaches: list[Reach]) -> float:
    """The Kaplan-Meier median time to reach a target: the smallest reached x at which the
    estimated fraction not yet reached, S(t) = prod over reached x_i <= t of (1 - d_i / n_i)
    (d_i reaching at x_i, n_i still at risk: not reached nor censored before x_i), falls to
    1/2 or below. A seed censored at x counts as at risk up to x. NaN when S never falls to
    1/2: the median is then only known to exceed the largest x observed. With every censored
    seed censored at the same last x (one budget) it is the smallest x by which at least half
    of all seeds reached, and NaN when fewer than half did: never a median of the reached
    seeds alone, which would hide the ones that never reached."""
    rows = [r for r in reaches if np.isfinite(r.x)]
    survival = 1.0
    for x in sorted({r.x for r in rows if not r.censored}):
        reached = sum(1 for r in rows if not r.censored and r.x == x)
        censored_before = sum(1 for r in rows if r.censored and r.x < x)
        at_risk = len(rows) - censored_before - sum(1 for r in rows
                                                    if not r.censored and r.x < x)
        survival *= 1.0 - reached / at_risk
        if survival <= 0.5 + 1e-12:
            return float(x)
    return math.nan
