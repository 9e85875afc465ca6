"""Properties of every registered batch-size method, on hyperparameters drawn from its declared
domain and on random finite statistics: the answers are positive ints, within the bounds the
method declares, and deterministic."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import registry
from workbench.hyperparams import Choice, Float, Int

SPAN = 10_000  # how far past its minimum an unbounded hyperparameter is drawn


def hyperparameter_strategy(hp):
    """Values of one declaration: its default search range, or anywhere in its domain."""
    if isinstance(hp, Choice):
        return st.sampled_from(hp.choices)
    low = hp.minimum if math.isfinite(hp.minimum) else -SPAN
    high = hp.maximum if math.isfinite(hp.maximum) else max(low, 0) + SPAN
    if isinstance(hp, Int):
        domain = st.integers(int(low), int(high))
        searched = st.integers(hp.low, hp.high) if hp.low is not None else domain
    else:
        assert isinstance(hp, Float)
        domain = st.floats(low, high, allow_nan=False, allow_infinity=False)
        searched = st.floats(hp.low, hp.high) if hp.low is not None else domain
    return st.one_of(searched, domain, st.just(hp.default))


def step_stats(n_samples):
    """One step's statistics, as the loop hands them (finite, squared norms non-negative)."""
    finite = st.floats(0.0, 1e300, allow_nan=False)
    return st.fixed_dictionaries({
        "loss": st.floats(-1e300, 1e300, allow_nan=False),
        "grad_sq": finite,
        "batch_size": st.integers(1, n_samples),
        "grad_sq_big": finite,
        "big_batch_size": st.integers(1, n_samples),
        "grad_sq_small": finite,
        "small_batch_size": st.integers(1, n_samples),
        "grad_var": finite,
    })


@st.composite
def scenario(draw, cls):
    params = {key: draw(hyperparameter_strategy(hp)) for key, hp in cls.hyperparameters.items()}
    n_samples = draw(st.integers(1, 5_000))
    batch_size = draw(st.one_of(st.none(), st.integers(1, 2 * n_samples)))
    steps = draw(st.lists(step_stats(n_samples), max_size=30))
    samples = 0
    for stats in steps:  # samples seen so far, as the loop counts them
        samples += stats["batch_size"]
        stats.update(samples=samples, n_samples=n_samples)
    return params, {"batch_size": batch_size, "n_samples": n_samples}, steps


def answers(cls, params, info, steps):
    method = cls(**params)
    sizes = [method.start(dict(info))]
    shown = []
    for step, stats in enumerate(steps, start=1):
        sizes.append(method.next_batch_size(step, dict(stats)))
        shown.append(method.diagnostics())
    return sizes, shown


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


@pytest.mark.parametrize("name", registry.available("batch_size"))
def test_answers_are_bounded_positive_deterministic_ints(name):
    cls = registry.get("batch_size", name)

    @settings(max_examples=30, deadline=None)
    @given(scenario(cls))
    def check(case):
        params, info, steps = case
        sizes, shown = answers(cls, params, info, steps)
        for size in sizes:
            assert type(size) is int and size >= 1
        if "min_size" in cls.hyperparameters:
            n_samples = info["n_samples"]
            highest = min(params["max_size"] or n_samples, n_samples)
            lowest = min(params["min_size"], highest)
            assert all(lowest <= size <= highest for size in sizes)
        for metrics in shown:
            assert all(isinstance(value, float) for value in metrics.values())
        again, shown_again = answers(cls, params, info, steps)
        assert again == sizes
        assert all(same(a, b) for a, b in zip(shown, shown_again, strict=True))

    check()
