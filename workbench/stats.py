"""Statistics over seeds: mean, median, interquartile mean (IQM) and bootstrap intervals.

IQM: the mean of the middle 50% of values (``scipy.stats.trim_mean(x, 0.25)``), as in
Agarwal et al., "Deep RL at the edge of the statistical precipice" (NeurIPS 2021, rliable).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

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


def bootstrap_ci(values, how: str = "mean", confidence: float = 0.95, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``aggregate(values, how)``; (nan, nan) below 2 values."""
    x = np.asarray(values, dtype=float)
    if x.size < 2 or not np.all(np.isfinite(x)):
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    samples = x[rng.integers(0, x.size, size=(resamples, x.size))]
    if how == "mean":
        stat = samples.mean(axis=1)
    elif how == "median":
        stat = np.median(samples, axis=1)
    else:
        stat = stats.trim_mean(samples, 0.25, axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(stat, [alpha, 1.0 - alpha])
    return float(low), float(high)
