"""Bounds shared by the batch-size methods: ``min_size`` <= b <= ``max_size`` (0: n_samples).

The upper bound never exceeds n_samples; a ``min_size`` above the upper bound is lowered to it,
so a method always answers a size the task can draw.
"""

from __future__ import annotations

import math

from workbench.hyperparams import Int


def bounds(smallest: int = 1) -> dict[str, Int]:
    """The ``min_size``/``max_size`` declarations; ``min_size`` defaults to, and is at least,
    ``smallest``."""
    return {
        "min_size": Int(smallest, minimum=smallest, help="smallest batch size"),
        "max_size": Int(0, minimum=0, help="largest batch size; 0: n_samples"),
    }


def size_range(min_size: int, max_size: int, n_samples: int) -> tuple[int, int]:
    """(lowest, highest) batch size allowed for a task with ``n_samples`` samples."""
    highest = n_samples if max_size == 0 else min(max_size, n_samples)
    highest = max(highest, 1)
    return min(min_size, highest), highest


def clip_size(value: float, lowest: int, highest: int, rounding=round) -> int:
    """``value`` clipped to [lowest, highest], then rounded (``round`` or ``math.ceil``) to an
    int. ``value`` may be infinite, not NaN."""
    if math.isnan(value):
        raise ValueError("a batch size cannot be NaN")
    return int(rounding(min(max(value, lowest), highest)))
