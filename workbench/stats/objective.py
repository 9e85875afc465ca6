"""The objective of one run, taken from its metric history: the final value, the best value,
or the area under the curve (the mean over logged steps, so runs of equal length compare);
and ``Divergence``, the rule that says when a run has diverged."""

from __future__ import annotations

import math


class ObjectiveTracker:
    def __init__(self, metric: str, direction: str, at: str):
        self.metric, self.direction, self.at = metric, direction, at
        self.last = math.nan
        self.best = math.nan
        self.total, self.count = 0.0, 0

    def add(self, value: float) -> None:
        value = float(value)
        self.last = value
        self.total += value
        self.count += 1
        if math.isnan(value):
            return
        if math.isnan(self.best):
            self.best = value
        elif self.direction == "minimize":
            self.best = min(self.best, value)
        else:
            self.best = max(self.best, value)

    def value(self) -> float:
        if self.at == "final":
            return self.last
        if self.at == "best":
            return self.best
        return self.total / self.count if self.count else math.nan


GROWTH = 1e6  # a minimised objective this many times its first magnitude has exploded


class Divergence:
    """When a run has diverged, from its objective's finite values as they come: past
    ``bound`` (above it when minimising, below when maximising), when one is set (the spec's
    ``objective.diverge_past``); else, for a minimised objective (a loss), above ``GROWTH``
    times the magnitude of its first finite value (at least 1e-12): explosive growth, such as a
    loss going from 0.69 to 5e240. ``check`` returns why, or None. (A value that is not finite
    is the loop's to report, and the run's final check's: a return is NaN while no episode has
    ended.)"""

    def __init__(self, metric: str, direction: str, bound: float | None = None):
        self.metric, self.direction, self.bound = metric, direction, bound
        self.first: float | None = None

    def check(self, value: float) -> str | None:
        value = float(value)
        if not math.isfinite(value):
            return None
        if self.first is None:
            self.first = value
        if self.bound is not None:
            past = value > self.bound if self.direction == "minimize" else value < self.bound
            return f"{self.metric}={value:.4g} past the bound {self.bound:g}" if past else None
        if self.direction == "minimize":
            limit = GROWTH * max(abs(self.first), 1e-12)
            if value > limit:
                return (f"{self.metric}={value:.4g} grew past {GROWTH:g} times its first "
                        f"value {self.first:.4g} (the default rule for a minimised objective; "
                        "objective.diverge_past sets a bound instead)")
        return None
