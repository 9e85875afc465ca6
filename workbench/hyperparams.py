"""Hyperparameter declarations: a default, a valid domain and a default Optuna search range.

A method declares ``hyperparameters = {"lr": Float(0.1, low=1e-3, high=10.0, log=True,
minimum=0.0)}``. ``low``/``high`` (or ``choices``) give the default search space; a parameter
without them is fixed at its default unless a sweep gives it a range. ``minimum``/``maximum``
bound every value the method accepts, in a spec's ``fixed`` values and search ranges alike. A
float is finite unless its default is infinite (``inf``: no cap), and a search range always is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna.distributions as od

from workbench.common.validation import shorten


class HyperparameterError(ValueError):
    """A value or range that the declaration does not allow."""


class _Ranged:
    """``distribution``: the Optuna distribution of a search over this parameter: ``choices``,
    or the given (low, high, log) over the declaration's, each end validated; None where an
    end is missing (the parameter is then fixed). ``_range`` checks the range per kind."""

    def distribution(self, low=None, high=None, log=None, choices=None):
        if choices is not None:
            return od.CategoricalDistribution([self.validate(c) for c in choices])
        low = self.low if low is None else low
        high = self.high if high is None else high
        log = self.log if log is None else log
        if low is None or high is None:
            return None
        return self._range(self.validate(low), self.validate(high), log)


@dataclass(frozen=True)
class Float(_Ranged):
    default: float
    low: float | None = None
    high: float | None = None
    log: bool = False
    minimum: float = -math.inf
    maximum: float = math.inf
    help: str = ""

    kind = "float"

    def validate(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise HyperparameterError(f"expected a number, got {shorten(value)}")
        try:
            value = float(value)
        except OverflowError:
            raise HyperparameterError("a number too large for a float") from None
        if not (self.minimum <= value <= self.maximum) or math.isnan(value):
            raise HyperparameterError(f"{value!r} is outside [{self.minimum}, {self.maximum}]")
        if math.isinf(value) and value != self.default:
            raise HyperparameterError(f"{value!r} is not finite")
        return value

    def allowed(self) -> str:
        low, high = math.isfinite(self.minimum), math.isfinite(self.maximum)
        if low and high:
            text = f"a number in [{self.minimum}, {self.maximum}]"
        elif low:
            text = f"a finite number >= {self.minimum}"
        elif high:
            text = f"a finite number <= {self.maximum}"
        else:
            text = "a finite number"
        return text + (f" or {self.default!r} (none)" if math.isinf(self.default) else "")

    def _range(self, low, high, log: bool):
        if math.isinf(low) or math.isinf(high):
            raise HyperparameterError(f"a search range needs finite ends, got [{low}, {high}]")
        if low >= high:
            raise HyperparameterError(f"low ({low}) must be below high ({high})")
        if log and low <= 0:
            raise HyperparameterError(f"a log range needs low > 0, got {low}")
        return od.FloatDistribution(low, high, log=log)

    def grid(self, dist, points: int) -> list:
        if isinstance(dist, od.CategoricalDistribution):
            return list(dist.choices)
        if dist.log:
            values = np.geomspace(dist.low, dist.high, points)
        else:
            values = np.linspace(dist.low, dist.high, points)
        return [float(v) for v in values]


@dataclass(frozen=True)
class Int(_Ranged):
    default: int
    low: int | None = None
    high: int | None = None
    log: bool = False
    minimum: int | float = -math.inf
    maximum: int | float = math.inf
    help: str = ""

    kind = "int"

    def validate(self, value: Any) -> int:
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or (isinstance(value, float) and not math.isfinite(value)) or value != int(value)):
            raise HyperparameterError(f"expected an integer, got {shorten(value)}")
        value = int(value)
        if not (self.minimum <= value <= self.maximum):
            raise HyperparameterError(f"{value!r} is outside [{self.minimum}, {self.maximum}]")
        return value

    def allowed(self) -> str:
        return f"an integer in [{self.minimum}, {self.maximum}]"

    def _range(self, low, high, log: bool):
        if low >= high:
            raise HyperparameterError(f"low ({low}) must be below high ({high})")
        if log and low < 1:
            raise HyperparameterError(f"a log range of integers needs low >= 1, got {low}")
        return od.IntDistribution(low, high, log=log)

    def grid(self, dist, points: int) -> list:
        if isinstance(dist, od.CategoricalDistribution):
            return list(dist.choices)
        if dist.high - dist.low + 1 <= points:
            return list(range(dist.low, dist.high + 1))
        space = np.geomspace if dist.log else np.linspace
        return sorted({int(round(v)) for v in space(dist.low, dist.high, points)})


@dataclass(frozen=True)
class Choice:
    default: Any
    choices: tuple = field(default_factory=tuple)
    tune: bool = False
    help: str = ""

    kind = "choice"

    def validate(self, value: Any) -> Any:
        if value not in self.choices:
            raise HyperparameterError(f"{shorten(value)} is not one of {list(self.choices)}")
        return value

    def allowed(self) -> str:
        return "one of " + ", ".join(repr(c) for c in self.choices)

    def distribution(self, low=None, high=None, log=None, choices=None):
        if low is not None or high is not None:
            raise HyperparameterError("a choice takes 'choices', not low/high")
        if choices is not None:
            return od.CategoricalDistribution([self.validate(c) for c in choices])
        if not self.tune:
            return None
        return od.CategoricalDistribution(list(self.choices))

    def grid(self, dist, points: int) -> list:
        return list(dist.choices)


def Bool(default: bool, tune: bool = False, help: str = "") -> Choice:  # noqa: N802
    """A boolean hyperparameter: a choice between False and True."""
    return Choice(default, (False, True), tune=tune, help=help)


Hyperparameter = Float | Int | Choice


def describe(hp: Hyperparameter) -> str:
    """One-line description for tables: default and default search range."""
    dist = hp.distribution()
    if dist is None:
        return f"{hp.default!r}"
    if isinstance(dist, od.CategoricalDistribution):
        return f"{hp.default!r} in {list(dist.choices)}"
    scale = " log" if dist.log else ""
    return f"{hp.default!r} in [{dist.low:g}, {dist.high:g}]{scale}"
