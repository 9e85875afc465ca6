"""A claim's checks, evaluated on a results folder alone (the report's table CSVs and the curve
CSVs that ``workbench reproduce`` writes), so the committed results can be checked again
without running anything.

The slope of a curve is ``workbench.stats.claims.loglog_slope``: the least-squares fit of
log(value) = a + b log(step) over the check's window, on 50 log-spaced steps (so each decade
weighs the same): b = -1 is an O(1/t) rate, b = -2 an O(1/t^2) one. The change of a curve is
``linear_change``: the fitted line's rise over the check's window; ``seeds: low/high`` takes
that end of the 95% interval over the fits of each seed's curve (``stats.interval``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.reproduce.claim import OPS, Check, Claim, Ref
from workbench.stats.aggregates import interval
from workbench.stats.claims import linear_change, loglog_slope


def table_file(sweep: str) -> str:
    return f"table_{sweep}.csv"


def credit_file(study: str) -> str:
    return f"credit_{study}.csv"


def curve_file(sweep: str, metric: str) -> str:
    return f"curve_{sweep}_{metric.replace('/', '-')}.csv"


@dataclass(frozen=True)
class Outcome:
    says: str
    passed: bool
    left: float
    right: float
    detail: str  # the comparison with its numbers

    def as_dict(self) -> dict:
        return {"says": self.says, "passed": self.passed, "left": self.left,
                "right": self.right, "detail": self.detail}


class Results:
    """The numbers of one results folder, read on demand."""

    def __init__(self, folder: Path, sweeps: list[str]):
        self.folder, self.sweeps = folder, sweeps

    def value(self, ref: Ref) -> float:
        sweep = ref.sweep or self.sweeps[0]
        if ref.credit is not None:
            table = pd.read_csv(self.folder / credit_file(ref.credit))
            row = table[(table["estimator"] == ref.method) & (table["G"] == ref.G)
                        & (table["N"] == ref.N)]
            if row.empty or ref.column not in table.columns:
                raise KeyError(f"{credit_file(ref.credit)} has no {ref.describe()}")
            return float(row[ref.column].iloc[0])
        if ref.column is not None:
            name = f"{ref.file}.csv" if ref.file else table_file(sweep)
            table = pd.read_csv(self.folder / name)
            if ref.file and "sweep" in table.columns and len(self.sweeps) > 1:
                table = table[table["sweep"] == sweep]
            table = table.set_index("method")
            if ref.method not in table.index or ref.column not in table.columns:
                raise KeyError(f"{name} has no {ref.describe()}")
            return float(table.loc[ref.method, ref.column])
        curve = pd.read_csv(self.folder / curve_file(sweep, ref.curve))
        if ref.method not in curve.columns:
            raise KeyError(f"{curve_file(sweep, ref.curve)} has no {ref.method}")
        fit = loglog_slope if ref.slope is not None else linear_change
        step = curve["step"].to_numpy(float)
        if ref.seeds is None:
            return fit(step, curve[ref.method].to_numpy(float), *ref.window)
        prefix = f"{ref.method} seed "
        per_seed = [fit(step, curve[c].to_numpy(float), *ref.window)
                    for c in curve.columns if c.startswith(prefix)]
        ci = interval(per_seed, "mean", 0.95)
        return ci.low if ref.seeds == "low" else ci.high


def evaluate(claim: Claim, folder: Path, sweeps: list[str], quick: bool) -> list[Outcome]:
    """Each check that applies (``full_only`` ones not on quick results) with its numbers; a
    number that is missing or NaN fails its check."""
    results = Results(folder, sweeps)
    outcomes = []
    for check in claim.checks:
        if quick and check.full_only:
            continue
        outcomes.append(_one(check, results))
    return outcomes


def _one(check: Check, results: Results) -> Outcome:
    try:
        left = results.value(check.left)
        right = (results.value(check.right) if isinstance(check.right, Ref)
                 else float(check.right)) * check.factor
    except (KeyError, FileNotFoundError) as err:
        return Outcome(check.says, False, math.nan, math.nan, f"missing: {err}")
    right_text = (check.right.describe() if isinstance(check.right, Ref) else f"{check.right:g}")
    if check.factor != 1.0:
        right_text = f"{check.factor:g} x {right_text}"
    passed = bool(np.isfinite(left) and np.isfinite(right) and OPS[check.op](left, right))
    if isinstance(check.right, Ref) or check.factor != 1.0:
        right_text += f" = {right:.6g}"
    detail = f"{check.left.describe()} = {left:.6g} {check.op} {right_text}"
    return Outcome(check.says, passed, left, right, detail)
