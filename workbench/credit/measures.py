"""How an estimator's advantages Â agree with the Monte Carlo advantages A_MC on the same
sampled steps, each with a percentile bootstrap interval over instances.

For the S = I x K sampled steps (K per instance, I instances):

- ``spearman``: Spearman's rank correlation of Â and A_MC over the S steps (average ranks for
  ties; NaN where either is constant);
- ``bias``: mean(Â - A_MC);
- ``variance``: the variance (n - 1) of Â - A_MC over the steps: the estimator's error spread,
  which includes A_MC's own noise (the table's ``mc_se``, its root mean square standard error,
  says how much of it that is);
- ``sign_agreement``: among the steps whose A_MC is not 0 (farther than ``ZERO`` from it: the
  action made a difference the continuations saw), the fraction where Â has the same sign; an
  Â of 0 (no credit) counts as a miss. Steps with A_MC = 0 have no direction to get right and
  are left out (at small N many are: every continuation failed); the table gives both shares
  of zeros (``zero_share`` of Â, ``mc_zero_share`` of A_MC).

Bias and variance are in the estimator's own units (a method that divides by a group's
standard deviation is not on A_MC's scale); rank correlation and sign agreement are not.

Intervals: the instances are resampled with replacement (``stats.resample_indices``; an
instance's K steps stay together, since they share its rollouts), the statistic recomputed on
each resample, and the (1 - c)/2 and (1 + c)/2 quantiles taken (resamples where it is NaN left
out). The resamples are the same for every estimator of one (G, N).
"""

from __future__ import annotations

import numpy as np

from workbench.stats import aggregates as stats

ZERO = 1e-9
METRICS = {
    "spearman": "Spearman rank correlation with A_MC",
    "bias": "bias: mean(Â − A_MC)",
    "variance": "variance of Â − A_MC",
    "sign_agreement": "sign agreement where A_MC ≠ 0",
}


def measure(estimate: np.ndarray, truth: np.ndarray, confidence: float, resamples: int,
            rng: np.random.Generator) -> dict[str, tuple[float, float, float]]:
    """metric -> (point estimate, low, high) for (I, K) arrays of Â and A_MC."""
    count = estimate.shape[0]
    picks = stats.resample_indices(count, resamples, rng)
    x_all, y_all = estimate.reshape(1, -1), truth.reshape(1, -1)
    x_boot = estimate[picks].reshape(resamples, -1)
    y_boot = truth[picks].reshape(resamples, -1)
    out = {}
    for name, statistic in STATISTICS.items():
        point = float(statistic(x_all, y_all)[0])
        values = statistic(x_boot, y_boot)
        values = values[np.isfinite(values)]
        if values.size == 0:
            low = high = float("nan")
        else:
            alpha = (1.0 - confidence) / 2.0
            low, high = (float(v) for v in np.quantile(values, [alpha, 1.0 - alpha]))
        out[name] = (point, low, high)
    return out


def spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row-wise Spearman correlation of (R, S) arrays."""
    return _pearson(average_ranks(x), average_ranks(y))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Row-wise ranks 1..S, tied values sharing their average rank."""
    order = np.argsort(x, axis=1, kind="stable")
    ordered = np.take_along_axis(x, order, axis=1)
    rows, size = x.shape
    # a run of equal values starts where a value differs from the one before it
    starts = np.ones((rows, size), dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    run = np.cumsum(starts, axis=1) - 1  # run index of each sorted position, per row
    flat = run + (np.arange(rows) * size)[:, None]
    position = np.broadcast_to(np.arange(1, size + 1, dtype=float), (rows, size))
    total = np.bincount(flat.ravel(), weights=position.ravel(), minlength=rows * size)
    length = np.bincount(flat.ravel(), minlength=rows * size)
    mean_rank = (total / np.maximum(length, 1))[flat]
    ranks = np.empty_like(mean_rank)
    np.put_along_axis(ranks, order, mean_rank, axis=1)
    return ranks


def _pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    dx = x - x.mean(axis=1, keepdims=True)
    dy = y - y.mean(axis=1, keepdims=True)
    norm = np.sqrt((dx * dx).sum(axis=1) * (dy * dy).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (dx * dy).sum(axis=1) / norm
    return np.where(norm > 0, np.clip(r, -1.0, 1.0), np.nan)


def bias(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x - y).mean(axis=1)


def variance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x - y).var(axis=1, ddof=1)


def sign_agreement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    moved = np.abs(y) > ZERO
    agree = (_sign(x) == _sign(y)) & moved
    with np.errstate(invalid="ignore", divide="ignore"):
        return agree.sum(axis=1) / moved.sum(axis=1)


def zero_share(x: np.ndarray) -> float:
    """The fraction of values within ``ZERO`` of 0."""
    return float(np.mean(np.abs(x) <= ZERO))


def _sign(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) <= ZERO, 0, np.sign(x))


STATISTICS = {"spearman": spearman, "bias": bias, "variance": variance,
              "sign_agreement": sign_agreement}
