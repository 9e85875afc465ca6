"""One run's curve read back from the store's history: a metric against an x-axis or against
another metric.

Two metrics need not be logged at the same steps (an evaluation every tenth step, the training
entropy at every step; a cost counter with the step's training metrics only). Both readers here
join them *as of* the step: at each step where the y metric is logged, x is the last value of
the x metric logged at or before that step (``asof_join``); y's points before x's first are
dropped. Where x is logged at every step y is, this is the plain join on the step.
"""

from __future__ import annotations

import numpy as np

from workbench.report.data import SweepData

# the cost and time counters ("so far" in the vocabulary): x-axes that only grow
CUMULATIVE = frozenset({"cost/samples", "cost/grad_evals", "cost/loss_evals", "cost/env_steps",
                        "cost/updates", "cost/tokens", "time/wall_seconds"})


def asof_join(y_steps, y_values, x_steps, x_values) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): for each (step, y) in order, x = the value of the last x point logged at or
    before that step (of several at one step, the last given); y points with no x at or before
    their step are dropped. NaN values pass through as logged."""
    y_steps, y_values = np.asarray(y_steps, dtype=float), np.asarray(y_values, dtype=float)
    x_steps, x_values = np.asarray(x_steps, dtype=float), np.asarray(x_values, dtype=float)
    order = np.argsort(x_steps, kind="stable")
    x_steps, x_values = x_steps[order], x_values[order]
    at = np.searchsorted(x_steps, y_steps, side="right") - 1
    has = at >= 0
    return x_values[at[has]], y_values[has]


def paired_series(d: SweepData, run_id: str, metric: str, x: str) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """(x, values) of ``metric`` in run ``run_id`` against the metric ``x``, joined as of each
    step ``metric`` is logged at (``asof_join``), x as logged, pairs with a NaN dropped; empty
    arrays where either has no points."""
    h = d.history[d.history["run_id"] == run_id]
    y, xs = h[h["key"] == metric], h[h["key"] == x]
    x_values, y_values = asof_join(y["step"], y["value"], xs["step"], xs["value"])
    keep = ~np.isnan(x_values) & ~np.isnan(y_values)
    return x_values[keep], y_values[keep]


def run_series(d: SweepData, run_id: str, metric: str, axis: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, values) of ``metric`` in run ``run_id`` against ``axis`` (``step``, or another
    metric joined as of each step, ``paired_series``, made non-decreasing); empty arrays
    where it has none."""
    if axis == "step":
        h = d.history[d.history["run_id"] == run_id]
        y = h[h["key"] == metric].set_index("step")["value"]
        return y.index.to_numpy(dtype=float), y.to_numpy(dtype=float)
    x, y = paired_series(d, run_id, metric, axis)
    return (np.maximum.accumulate(x) if x.size else x), y
