"""Statistics a claim needs beyond ``workbench.stats.aggregates``: a power-law rate and the time
to a target with censoring. (Intervals over seeds are ``stats.interval``'s.)

- ``loglog_fit`` / ``loglog_slope``: for m(t) ~ C t^a, the least-squares fit of
  log m = log C + a log t over a window [low, high] of t, on up to ``SLOPE_POINTS``
  log-spaced t (each the logged t nearest to it, so each decade weighs the same): a = -1 is an
  O(1/t) rate, a = -2 an O(1/t^2) one. The one place the workbench fits a rate (the report's
  ``rates`` figure and the reproductions' slope checks).
- ``linear_change``: the drift of a curve over a window [low, high] of x: the least-squares
  slope b of y = c + b x on its points there, times (high - low), so a metric that rises by 4
  over the window reads 4 however noisy its single steps.
- ``first_reach``: the first x at which a curve reaches a target, or its last x, censored.
- ``km_median``: the Kaplan-Meier median of such times with censoring (Kaplan & Meier,
  "Nonparametric estimation from incomplete observations", JASA 1958).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

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
