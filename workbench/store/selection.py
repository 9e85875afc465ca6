"""Which trials of a study a sweep counts, shared by the engine (status, closing a study, the
best trial to evaluate) and the report.

A study is identified by its fingerprint, not by the sweep that asked for it, so two sweeps
may share one and ask for different numbers of trials. A sweep that asks for N counts the
trials up to its N-th finished one (complete or pruned) in trial-number order, failures among
them included: what the study held when it first had N finished trials, had it run alone. With
fewer than N finished, every trial counts.
"""

from __future__ import annotations

from collections.abc import Iterable


def cutoff(trials: Iterable[tuple[int, bool]], n: int) -> int | None:
    """The number of the ``n``-th finished trial, from (number, finished) pairs; None when
    fewer than ``n`` are finished (then every trial counts)."""
    seen = 0
    for number, finished in sorted(trials):
        seen += bool(finished)
        if seen == n:
            return number
    return None


def counted(number: int, last: int | None) -> bool:
    """Whether trial ``number`` counts under ``cutoff``'s answer ``last``."""
    return last is None or number <= last
