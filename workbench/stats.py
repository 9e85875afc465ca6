"""Statistics over seeds, runs and trials, following rliable (Agarwal et al., "Deep RL at the
edge of the statistical precipice", NeurIPS 2021) where it has a definition.

- ``aggregate``: mean, median or interquartile mean (IQM: the mean of the middle 50%,
  ``scipy.stats.trim_mean(x, 0.25)``).
- ``bootstrap_ci``: percentile bootstrap interval of an aggregate; with ``strata`` (one label
  per value, e.g. the task) values are resampled within each stratum (stratified bootstrap).
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

import numpy as np
from scipy import special, stats

AGGREGATES = ("mean", "iqm", "median")


def aggregate(values, how: str) -> float:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return float("nan")
    if how == "mean":
        return float(np.mean(x))
    if how == "median":
        return float(np.median(x))
    if how == "iqm":
        return float(stats.trim_mean(x, 0.25))
    raise ValueError(f"unknown aggregate {how!r}; allowed: {', '.join(AGGREGATES)}")


def _aggregate_rows(samples: np.ndarray, how: str) -> np.ndarray:
    """The aggregate over axis 1 (the values of one resample)."""
    if how == "mean":
        return samples.mean(axis=1)
    if how == "median":
        return np.median(samples, axis=1)
    return stats.trim_mean(samples, 0.25, axis=1)


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
