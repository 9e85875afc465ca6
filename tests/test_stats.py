"""Each statistic against values computed independently."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from workbench.stats import aggregates as stats


def test_iqm_of_a_known_array():
    assert stats.aggregate(np.arange(1, 9), "iqm") == pytest.approx(4.5)  # mean of 3,4,5,6
    x = np.array([100.0, -50.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert stats.aggregate(x, "iqm") == pytest.approx(np.mean([2.0, 3.0, 4.0, 5.0]))
    assert stats.aggregate([3.0, 1.0, 2.0], "median") == 2.0
    assert math.isnan(stats.aggregate([], "mean"))


def test_bootstrap_interval_covers_the_true_mean_at_about_the_nominal_rate():
    rng = np.random.default_rng(1)
    hits, trials = 0, 400
    for i in range(trials):
        sample = rng.normal(2.0, 1.0, size=30)
        low, high = stats.bootstrap_ci(sample, "mean", 0.95, resamples=1000, seed=i)
        hits += low <= 2.0 <= high
    assert 0.90 <= hits / trials <= 0.985


def test_stratified_bootstrap_resamples_within_each_stratum():
    values = [0.0] * 5 + [10.0] * 5
    strata = ["a"] * 5 + ["b"] * 5
    assert stats.bootstrap_ci(values, "mean", strata=strata) == (5.0, 5.0)
    low, high = stats.bootstrap_ci(values, "mean")
    assert low < 4 and high > 6


def test_performance_profile_counts_runs_at_least_as_good():
    values = [0.1, 0.5, 0.9]
    assert stats.performance_profile(values, [0.0, 0.5, 1.0]).tolist() == [1.0, 2 / 3, 0.0]
    assert stats.performance_profile(values, [0.0, 0.5, 1.0], "minimize").tolist() == [
        0.0, 2 / 3, 1.0]


def test_probability_of_improvement_is_mann_whitney_u_over_nm():
    rng = np.random.default_rng(0)
    x, y = rng.normal(1, 1, 12), rng.normal(0, 1, 9)
    x[0] = y[0]  # a tie counts one half
    u = sps.mannwhitneyu(x, y).statistic
    assert stats.probability_of_improvement([x], [y]) == pytest.approx(u / (12 * 9))
    assert stats.probability_of_improvement([x], [y], "minimize") == pytest.approx(
        1 - u / (12 * 9))
    assert stats.probability_of_improvement([x, [1.0]], [y, [0.0]]) == pytest.approx(
        (u / 108 + 1.0) / 2)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_expected_best_of_k_matches_brute_force_enumeration(direction):
    values = [0.3, 2.0, -1.0, 0.7, 5.0, 0.7]
    pick = max if direction == "maximize" else min
    expected = [np.mean([pick(c) for c in itertools.combinations(values, k)])
                for k in range(1, len(values) + 1)]
    assert stats.expected_best_of_k(values, direction) == pytest.approx(expected)


def test_steps_to_target():
    assert stats.steps_to_target([0, 1, 2, 3], [0.1, 0.5, 1.0, 1.0], 1.0) == 2.0
    assert math.isnan(stats.steps_to_target([0, 1], [0.1, 0.5], 1.0))
    assert stats.steps_to_target([0, 5, 10], [3.0, 1.0, 0.5], 1.0, "minimize") == 5.0


def test_a_curve_band_is_the_interval_at_each_point_resampling_runs_whole():
    values = np.random.default_rng(3).normal(size=(5, 7)).cumsum(axis=1)
    low, high = stats.bootstrap_band(values, "iqm", 0.9, resamples=500, seed=4)
    for j in range(values.shape[1]):  # the same draws of runs at every point
        assert (low[j], high[j]) == pytest.approx(
            stats.bootstrap_ci(values[:, j], "iqm", 0.9, resamples=500, seed=4))
    one = stats.bootstrap_band(values[:1], "mean")
    assert (one[0] == values[0]).all() and (one[1] == values[0]).all()


def test_the_best_of_k_band_brackets_the_expected_curve_of_resampled_trials():
    values = np.array([0.3, 2.0, -1.0, 0.7, 5.0, 0.7])
    low, high = stats.best_of_k_band(values, "maximize", 0.95, resamples=300, seed=0)
    curve = stats.expected_best_of_k(values)
    assert low.shape == high.shape == curve.shape and (low <= high).all()
    assert high[-1] == 5.0 and low[0] <= curve[0] <= high[0]
    rng = np.random.default_rng(0)
    shared = stats.best_of_k_band(values, "maximize", 0.95, resamples=300, seed=rng)
    assert (shared[0] == low).all()  # a generator is drawn from as a seed would be


# ------------------------------------------------------------------ intervals valid at small n

COVERAGE_DRAWS = 3000


def _population_iqm(dist) -> float:
    return dist.expect(lambda x: x, lb=dist.ppf(0.25), ub=dist.ppf(0.75), conditional=True)


@pytest.mark.parametrize("name, dist, floor", [
    ("normal", sps.norm(1.0, 2.0), 0.91),
    ("lognormal", sps.lognorm(0.5), 0.89),  # skewed: Student-t covers a little less
])
@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_printed_intervals_cover_at_about_the_nominal_rate_at_small_n(name, dist, floor,
                                                                          n):
    """The report's intervals (Student-t on the mean, Tukey-McLaughlin on the IQM, order
    statistics on the median), simulated 3,000 times: each covers the population value at
    about 95% even from 3 seeds; the median has no 95% interval below 6 values."""
    rng = np.random.default_rng(n)
    samples = dist.rvs(size=(n, COVERAGE_DRAWS), random_state=rng)  # one column per draw
    targets = {"mean": dist.mean(), "iqm": _population_iqm(dist), "median": dist.median()}
    for how in ("mean", "iqm"):
        low, high = stats.interval_band(samples, how, 0.95)
        coverage = np.mean((low <= targets[how]) & (targets[how] <= high))
        assert floor <= coverage <= 0.985, (how, coverage)
    low, high = stats.interval_band(samples, "median", 0.95)
    if n < 6:
        assert np.isnan(low).all() and "too few" in stats.interval(samples[:, 0], "median").note
    else:
        assert np.mean((low <= targets["median"]) & (targets["median"] <= high)) >= 0.93


def test_the_percentile_bootstrap_undercovers_at_three_seeds():
    """Why the report no longer prints it for a handful of seeds: 10 distinct resamples."""
    rng = np.random.default_rng(3)
    hits = [stats.bootstrap_ci(rng.normal(0.0, 1.0, 3), "mean", 0.95, 1000, seed=i)
            for i in range(600)]
    assert np.mean([low <= 0.0 <= high for low, high in hits]) < 0.82


def test_interval_single_values_match_their_textbook_formulas():
    x = np.array([2.0, 4.0, 9.0, 1.0, 7.0, 3.0, 5.0, 8.0])
    t = sps.t.ppf(0.975, 7)
    got = stats.interval(x, "mean")
    assert (got.low, got.high) == pytest.approx((x.mean() - t * x.std(ddof=1) / math.sqrt(8),
                                                 x.mean() + t * x.std(ddof=1) / math.sqrt(8)))
    # IQM: g = 2 trimmed per end of 8; winsorized sample 3,3,3,4,5,7,7,7; df = 8 - 4 - 1
    w = np.array([3.0, 3.0, 3.0, 4.0, 5.0, 7.0, 7.0, 7.0])
    half = sps.t.ppf(0.975, 3) * w.std(ddof=1) / (0.5 * math.sqrt(8))
    got = stats.interval(x, "iqm")
    assert (got.low, got.high) == pytest.approx((4.75 - half, 4.75 + half))
    assert stats.aggregate(x, "iqm") == pytest.approx(4.75)
    # three values: nothing is trimmed, the IQM interval is the mean's
    assert stats.interval([1.0, 2.0, 6.0], "iqm") == stats.interval([1.0, 2.0, 6.0], "mean")
    # median of 10: k = 2 (P(Binom(10, 1/2) <= 1) = 0.011 <= 0.025 < P(<= 2) = 0.055)
    got = stats.interval(np.arange(10.0), "median")
    assert (got.low, got.high) == (1.0, 8.0)
    assert math.isnan(stats.interval([1.0], "mean").low)


def test_the_quantiles_and_trimmed_mean_equal_scipy_stats():
    """stats computes them with scipy.special and numpy (scipy.stats costs 0.7 s to import)."""
    from scipy import stats as reference

    rng = np.random.default_rng(0)
    for n in range(1, 30):
        x = rng.normal(size=(n, 5))
        assert np.allclose(stats.trim_mean(x, 0.25), reference.trim_mean(x, 0.25))
        assert np.allclose(stats.trim_mean(x.T, 0.25, axis=1),
                           reference.trim_mean(x.T, 0.25, axis=1))
    for n in range(2, 30):
        x = rng.normal(size=(n, 1))
        low, high = stats.interval_band(x, "mean", 0.9)
        half = reference.t.ppf(0.95, n - 1) * x.std(ddof=1) / np.sqrt(n)
        assert np.allclose([low[0], high[0]], [x.mean() - half, x.mean() + half])


# ------------------------------------------------------- intervals inside the metric's range

@pytest.mark.parametrize("how", ["mean", "iqm"])
def test_an_interval_stays_inside_the_metrics_range(how):
    """A t interval of a non-negative sample with big outliers reaches below 0, and one of
    accuracies near 1 above 1; inside the declared range they stop at its ends (the aggregate
    of values in a range lies in it, so no coverage is lost)."""
    losses = [0.001, 0.002, 0.05, 0.09]
    free = stats.interval(losses, how)
    assert free.low < 0  # the defect: Student-t knows nothing of the range
    bounded = stats.interval(losses, how, bounds=(0.0, math.inf))
    assert bounded.low >= 0 and bounded.high == pytest.approx(free.high)
    accuracies = [0.99, 1.0, 0.97, 1.0, 0.995]
    assert stats.interval(accuracies, how).high > 1
    bounded = stats.interval(accuracies, how, bounds=(0.0, 1.0))
    assert bounded.high <= 1 and bounded.low == pytest.approx(stats.interval(accuracies,
                                                                             how).low)
    low, high = stats.interval_band(np.array([losses, accuracies[:4]]).T, how,
                                    bounds=(0.0, 1.0))
    assert (low >= 0).all() and (high <= 1).all()
