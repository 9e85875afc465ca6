"""One run's curve read back from the store's history: a metric against an x-axis."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.report.data import SweepData


def run_series(d: SweepData, run_id: str, metric: str, axis: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, values) of ``metric`` in run ``run_id`` against ``axis`` (``step``, or another
    metric logged at the same steps, made non-decreasing); empty arrays where it has none."""
    h = d.history[d.history["run_id"] == run_id]
    y = h[h["key"] == metric].set_index("step")["value"]
    if axis == "step":
        return y.index.to_numpy(dtype=float), y.to_numpy(dtype=float)
    xs = h[h["key"] == axis].set_index("step")["value"]
    joined = pd.concat([xs.rename("x"), y.rename("y")], axis=1).dropna()
    x = joined["x"].to_numpy(dtype=float)
    return (np.maximum.accumulate(x) if x.size else x), joined["y"].to_numpy(dtype=float)
