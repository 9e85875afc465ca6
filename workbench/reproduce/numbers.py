"""A quick form's numbers against the committed ones (``results/quick/``): every CSV the
committed folder holds (results tables, curves, credit tables, the paper's numbers), cell by
cell, numbers within the claim's ``quick_tolerance`` and everything else exactly.

A study's ``fingerprint`` and ``stale`` columns are left out: they name the code, which may
change without moving a number (that is what a verification shows).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from workbench.reproduce.claim import Tolerance

SKIPPED_COLUMNS = {"fingerprint", "stale", "run_id"}


def differences(committed: Path, fresh: Path, tolerance: Tolerance, limit: int = 5) -> list[str]:
    """Where ``fresh``'s CSVs differ from ``committed``'s: one phrase per differing cell (at
    most ``limit`` per file), a missing file or column, a changed shape."""
    out = []
    files = sorted(p.name for p in committed.glob("*.csv"))
    if not files:
        return [f"{committed} holds no committed quick numbers"]
    for name in files:
        if not (fresh / name).is_file():
            out.append(f"{name}: not made")
            continue
        out += [f"{name}: {d}" for d in _table_differences(
            pd.read_csv(committed / name), pd.read_csv(fresh / name), tolerance)[:limit]]
    return out


def _table_differences(old: pd.DataFrame, new: pd.DataFrame, tol: Tolerance) -> list[str]:
    columns = [c for c in old.columns if c not in SKIPPED_COLUMNS]
    missing = [c for c in columns if c not in new.columns]
    if missing:
        return [f"no column {', '.join(missing)}"]
    if len(old) != len(new):
        return [f"{len(new)} rows, committed {len(old)}"]
    out = []
    for column in columns:
        a, b = old[column], new[column]
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            x, y = a.to_numpy(float), b.to_numpy(float)
            close = np.isclose(y, x, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
            bad = np.flatnonzero(~close)
        else:
            bad = np.flatnonzero((a.astype(str) != b.astype(str)).to_numpy())
        out += [f"row {i + 1} {column} {a.iloc[i]!r} → {b.iloc[i]!r}" for i in bad]
    return out
