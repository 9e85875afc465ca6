"""The objective of one run, taken from its metric history: the final value, the best value,
or the area under the curve (the mean over logged steps, so runs of equal length compare)."""

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
