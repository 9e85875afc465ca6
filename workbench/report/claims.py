"""The figures a claim needs, as the report's options ask for them: ``rates`` (a power law,
or another curve of one metric against another, fitted per seed with an interval over seeds),
``target`` (x to a target, with censoring) and ``split`` (a metric split by a condition). Each
saves its numbers beside its figure."""

from __future__ import annotations

import functools
from collections.abc import Callable

from workbench.report import rates, splits, targets
from workbench.report.data import SweepData
from workbench.report.figures import Drawing, Style
from workbench.store.study_record import ReportOptions


def drawings(sweeps: list[SweepData], options: ReportOptions,
             style: Style) -> list[Callable[[], Drawing | None]]:
    out: list[Callable[[], Drawing | None]] = [
        functools.partial(rates.rates, sweeps, spec, options, style) for spec in options.rates]
    if options.target is not None:
        out.append(functools.partial(targets.target, sweeps, options, style))
    out += [functools.partial(splits.split, sweeps, spec, options, style)
            for spec in options.split]
    return out
