"""Statistics over seeds, runs and trials, following rliable (Agarwal et al., "Deep RL at the
edge of the statistical precipice", NeurIPS 2021) where it has a definition.

- ``aggregate``: mean, median or interquartile mean (IQM: the mean of the middle 50%,
  ``scipy.stats.trim_mean(x, 0.25)``).
- ``interval`` (and ``interval_band``, the same at every point of a curve): the confidence
  interval the report prints for an aggregate over seeds, valid at small n: Student-t for the
  mean; for the IQM the Tukey-McLaughlin trimmed-mean t interval (Tukey & McLaughlin 1963;
  Yuen 1974): trimmed mean +- t(n - 2g - 1) * s_w / ((1 - 2g/n) sqrt(n)), with g = floor(n/4)
  values trimmed from each end and s_w the standard deviation of the winsorized sample (which
  is Student-t on the mean when g = 0, n < 4); for the median the distribution-free
  order-statistic interval [x_(k), x_(n-k+1)], k the largest with P(Binom(n, 1/2) < k) <=
  alpha/2 (none exists below 6 values at 95%). ``tests/test_stats.py`` checks their coverage
  by simulation at n = 3, 5 and 10. With ``bounds`` (the metric's range,
  ``workbench.common.metrics.bounds``) each interval is intersected with it: the mean, IQM or median
  of values in [a, b] lies in [a, b], so the intersection loses no coverage (an interval
  missed the aggregate only where it left the range) and is never empty (it holds the centre);
  the restricted confidence set of a bounded parameter (Mandelkern, "Setting confidence
  intervals for bounded parameters", Statistical Science 2002). A t interval of a loss whose
  seeds sit near 0 with one outlier no longer reaches below 0.
- ``bootstrap_ci``: percentile bootstrap interval of an aggregate; with ``strata`` (one label
  per value, e.g. the task) values are resampled within each stratum (stratified bootstrap).
  The report uses it only where values are many (scores pooled over sweeps): with n values it
  has at most C(2n-1, n) distinct resamples (10 at n = 3) and covers far below its nominal
  rate at small n.
- ``bootstrap_band``: the same interval at every point of a curve (rows = runs resampled
  together, columns = points), and ``best_of_k_band`` for ``expected_best_of_k``'s curve.
  Every resample of the workbench is drawn here, by ``resample_indices``.
- ``performance_profile``: the fraction of runs at least as good as each threshold tau.
- ``probability_of_improvement``: P(X > Y) for a random run of each method, the Mann-Whitney
  U statistic over n*m (ties count one half), averaged over tasks.
- ``expected_best_of_k``: the expected best objective after k trials drawn without
  replacement from a study's n trials (Dodge et al., "Show your work", EMNLP 2019):
  E[max of k] = sum_i v_(i) * [C(i-1, k-1) / C(n, k)] with v_(1) <= ... <= v_(n).
- ``steps_to_target``: the first step at which a curve reaches a target, and how many runs
  never did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special  # not scipy.stats: its import alone costs the report 0.7 s

AGGREGATES = ("mean", "iqm", "median")

# Below SMALL_N seeds the report says so: the IQM trims at most one value from each end (none
# below 4: it is the mean), and a probability of improvement from n x n pairs is coarse and
# fragile: with n = m = 3 a perfect 1.00 happens with probability 1/C(6, 3) = 5% under no
# difference at all (two-sided p = 0.10, not significant), with 4 each 1/70; only from 5 each
# (1/252) is a perfect separation strong evidence. The intervals themselves (``interval``) are
# valid at every n and simply wide at small n.
SMALL_N = 5

INTERVAL_METHODS = {"mean": "Student-t interval on the mean",
                    "iqm": "Tukey-McLaughlin trimmed-mean t interval (Student-t on the mean "
                           "below 4 values)",
                    "median": "distribution-free order-statistic interval of the median"}


@dataclass(frozen=True)
class Interval:
    """A confidence interval; NaN bounds with ``note`` saying why when none can be given."""

    low: float
    high: float
    note: str = ""


UNBOUNDED = (-math.inf, math.inf)


def interval(values, how: str = "mean", confidence: float = 0.95,
             bounds: tuple[float, float] = UNBOUNDED) -> Interval:
    """The confidence interval of ``aggregate(values, how)`` that the report prints
    (``INTERVAL_METHODS``), inside ``bounds`` (the values' range); NaN below 2 finite values,
    or for a median below the count a distribution-free interval needs."""
    x = np.asarray(values, dtype=float)
    if x.size < 2 or not np.all(np.isfinite(x)):
        return Interval(math.nan, math.nan, "fewer than 2 finite values")
    low, high = interval_band(x[:, None], how, confidence, bounds)
    if how == "median" and not np.isfinite(low[0]):
        return Interval(math.nan, math.nan, f"{x.size} values are too few for a "
                        f"distribution-free {confidence:.0%} interval of the median")
    return Interval(float(low[0]), float(high[0]))


def interval_band(values, how: str = "mean", confidence: float = 0.95,
                  bounds: tuple[float, float] = UNBOUNDED) -> tuple[np.ndarray, np.ndarray]:
    """``interval`` at every column of ``values`` (runs x points) at once."""
    low, high = _interval_band(values, how, confidence)
    return within(low, bounds), within(high, bounds)


def within(values, bounds: tuple[float, float]) -> np.ndarray:
    """``values`` inside ``bounds`` = (low, high) (NaN stays NaN): ``interval``'s intersection
    of an interval with the range its aggregate is known to lie in."""
    return np.clip(np.asarray(values, dtype=float), bounds[0], bounds[1])


def _interval_band(values, how: str, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(np.asarray(values, dtype=float), axis=0)
    n = v.shape[0]
    if n < 2:
        return np.full(v.shape[1], np.nan), np.full(v.shape[1], np.nan)
    alpha = 1.0 - confidence
    if how == "median":
        k = _order_statistic_rank(n, alpha)
        if k is None:
            return np.full(v.shape[1], np.nan), np.full(v.shape[1], np.nan)
        return v[k - 1], v[n - k]
    g = n // 4 if how == "iqm" else 0
    kept = v[g : n - g]
    centre = kept.mean(axis=0)
    winsorized = np.clip(v, v[g], v[n - g - 1])
    spread = winsorized.std(axis=0, ddof=1) / ((1.0 - 2.0 * g / n) * math.sqrt(n))
    half = special.stdtrit(n - 2 * g - 1, 1.0 - alpha / 2.0) * spread  # Student-t quantile
    return centre - half, centre + half


def _order_statistic_rank(n: int, alpha: float) -> int | None:
    """The largest k with P(Binom(n, 1/2) <= k - 1) <= alpha / 2; None when even k = 1
    (the range of the sample) covers less than 1 - alpha."""
    ks = np.arange(1, n // 2 + 1)
    ok = ks[special.bdtr(ks - 1, n, 0.5) <= alpha / 2.0]  # Binom(n, 1/2) CDF
    return int(ok.max()) if ok.size else None


def aggregate(values, how: str) -> float:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan")
    if how == "mean":
        return float(np.mean(x))
    if how == "median":
        return float(np.median(x))
    if how == "iqm":
        return float(trim_mean(x, 0.25))
    raise ValueError(f"unknown aggregate {how!r}; allowed: {', '.join(AGGREGATES)}")


def _aggregate_rows(samples: np.ndarray, how: str) -> np.ndarray:
    """The aggregate over axis 1 (the values of one resample)."""
    if how == "mean":
        return samples.mean(axis=1)
    if how == "median":
        return np.median(samples, axis=1)
    return trim_mean(samples, 0.25, axis=1)


def trim_mean(values, cut: float, axis: int = 0):
    """The mean after dropping ``int(cut * n)`` values from each end along ``axis`` (what
    ``scipy.stats.trim_mean`` computes; the IQM at ``cut`` = 0.25)."""
    x = np.asarray(values, dtype=float)
    n = x.shape[axis]
    drop = int(cut * n)
    kept = np.take(np.sort(x, axis=axis), np.arange(drop, n - drop), axis=axis)
    return kept.mean(axis=axis)


def resample_indices(n: int, resamples: int, rng: np.random.Generator,
                     strata: Sequence | None = None) -> np.ndarray:
    """``resamples`` x ``n`` indices drawn with replacement; with ``strata`` (a label per
    value) each stratum's indices are drawn within it, its columns kept together in the
    stratum's first-seen order."""
    if strata is None:
        return rng.integers(0, n, size=(resamples, n))
    labels = np.asarray(strata)
    parts = []
    for label in dict.fromkeys(labels.tolist()):
        members = np.flatnonzero(labels == label)
        parts.append(members[rng.integers(0, members.size, size=(resamples, members.size))])
    return np.concatenate(parts, axis=1)


def _percentiles(stat: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1.0 - confidence) / 2.0
    return np.quantile(stat, alpha, axis=0), np.quantile(stat, 1.0 - alpha, axis=0)


def bootstrap_ci(values, how: str = "mean", confidence: float = 0.95, resamples: int = 2000,
                 seed: int = 0, strata: Sequence | None = None) -> tuple[float, float]:
    """Percentile bootstrap interval of ``aggregate(values, how)``; (nan, nan) below 2 values
    or with non-finite values."""
    x = np.asarray(values, dtype=float)
    if x.size < 2 or not np.all(np.isfinite(x)):
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    stat = _aggregate_rows(x[resample_indices(x.size, resamples, rng, strata)], how)
    low, high = _percentiles(stat, confidence)
    return float(low), float(high)


def bootstrap_band(values, how: str = "mean", confidence: float = 0.95,
                   resamples: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap band of a curve's aggregate over runs: ``values`` is runs x points;
    runs (rows) are resampled whole, and the band is taken at every point. A single run is its
    own band."""
    v = np.asarray(values, dtype=float)
    if v.shape[0] < 2:
        return v[0], v[0]
    rng = np.random.default_rng(seed)
    samples = v[resample_indices(v.shape[0], resamples, rng)]  # resamples x runs x points
    return _percentiles(_aggregate_rows(samples, how), confidence)


def best_of_k_band(values, direction: str = "maximize", confidence: float = 0.95,
                   resamples: int = 200,
                   seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap band of ``expected_best_of_k`` over resampled trials; ``seed`` may
    be a generator shared by several bands (drawn in turn)."""
    v = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    picks = resample_indices(v.size, resamples, rng)
    curves = np.array([expected_best_of_k(v[p], direction) for p in picks])
    return _percentiles(curves, confidence)


def performance_profile(values, taus, direction: str = "maximize") -> np.ndarray:
    """Fraction of ``values`` at least as good as each tau (>= tau when maximizing, <= tau
    when minimizing)."""
    x = np.asarray(values, dtype=float)[:, None]
    t = np.asarray(taus, dtype=float)[None, :]
    better = x >= t if direction == "maximize" else x <= t
    return better.mean(axis=0)


def probability_of_improvement(x_by_task: Sequence[Sequence[float]],
                               y_by_task: Sequence[Sequence[float]],
                               direction: str = "maximize") -> float:
    """P(a run of X beats a run of Y), the Mann-Whitney U / (n m) per task, averaged."""
    scores = []
    for x, y in zip(x_by_task, y_by_task, strict=True):
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if x.size == 0 or y.size == 0:
            continue
        if direction == "minimize":
            x, y = -x, -y
        wins = (x[:, None] > y[None, :]).sum() + 0.5 * (x[:, None] == y[None, :]).sum()
        scores.append(wins / (x.size * y.size))
    return float(np.mean(scores)) if scores else float("nan")


def expected_best_of_k(values, direction: str = "maximize") -> np.ndarray:
    """E[best of k trials] for k = 1..n, drawing k of the n values without replacement."""
    v = np.sort(np.asarray(values, dtype=float))
    if direction == "minimize":
        v = -v[::-1]
    n = v.size
    out = np.empty(n)
    below = np.arange(n)  # i - 1 for i = 1..n
    for k in range(1, n + 1):
        # P(the i-th smallest is the max of k) = C(i-1, k-1) / C(n, k), in logs (large n)
        valid = below >= k - 1
        logw = (_log_comb(below[valid], k - 1) - _log_comb(n, k))
        out[k - 1] = float(np.dot(np.exp(logw), v[valid]))
    return -out if direction == "minimize" else out


def _log_comb(n, k):
    return special.gammaln(np.asarray(n) + 1) - special.gammaln(k + 1) - special.gammaln(
        np.asarray(n) - k + 1)


def steps_to_target(steps, values, target: float, direction: str = "maximize") -> float:
    """The first step whose value reaches ``target``; NaN when it never does."""
    v = np.asarray(values, dtype=float)
    hit = v >= target if direction == "maximize" else v <= target
    idx = np.flatnonzero(hit)
    return float(np.asarray(steps)[idx[0]]) if idx.size else math.nan


def wants_log_scale(values) -> bool:
    """Whether values read better on a log axis: at least half of the finite ones positive and
    those spanning more than a factor of 20. (Rounding can put a converged suboptimality at 0
    or just below; a log axis masks those points.)"""
    try:
        v = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):  # text among them counts as missing
        v = np.array([_float_or_nan(x) for x in values], dtype=float)
    v = v[np.isfinite(v)]
    positive = v[v > 0]
    return bool(positive.size and positive.size >= 0.5 * max(v.size, 1)
                and positive.max() > 20 * positive.min())


def _float_or_nan(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
