"""The report's entry point: read the sweeps from the store, write every figure (with the CSV of
its numbers) and table with its provenance, then the index, into a staging folder that replaces
the target whole."""

from __future__ import annotations

import functools
import multiprocessing
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from workbench.report import claims, figures, folder
from workbench.report.data import SweepData, SweepRef, read_sweep
from workbench.report.index import index_page
from workbench.report.provenance import Provenance
from workbench.report.tables import ImprovementTable, ResultsTable
from workbench.store.study_record import ReportOptions


def build(sweeps: SweepRef | Sequence[SweepRef], out_dir: Path, *, title: str | None = None,
          options: ReportOptions | None = None,
          say: Callable[[str], None] | None = None) -> list[Path]:
    """Write the report of ``sweeps`` (each a name and a store URL) into ``out_dir``,
    atomically (``workbench.report.folder``); every file written (each figure's and table's
    provenance JSON too), under ``out_dir``.

    ``title`` defaults to the sweep's name; ``options`` (a report spec's) default to the
    sweep's own as its study runs recorded them, or to ``ReportOptions()`` for several.
    ``say`` hears of each study shown that is stale or lacks its held-out evaluation (the
    captions say it too)."""
    refs = [sweeps] if isinstance(sweeps, SweepRef) else list(sweeps)
    if options is None and len(refs) > 1:
        options = ReportOptions()
    data = [read_sweep(ref, options) for ref in refs]
    for d in data:
        for m in d.methods:
            if say and m.stale and not m.superseded:
                say(f"{d.name}: {m.label} is stale ({m.stale}); rerun the sweep")
            if say and m.missing and not m.superseded:
                say(f"{d.name}: {m.label} is shown on its tuning seeds: {m.missing}")
    title = title or refs[0].name
    target = folder.replaceable(Path(out_dir))
    staging = folder.staging(target)
    try:
        _Writer(staging, data[0].options).write(title, data)
        names = sorted(path.name for path in staging.iterdir())  # with each file's .json
        folder.move_into_place(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [Path(out_dir) / name for name in names]


# the drawings of the report being written, for the forked workers that render them
_DRAWINGS: list[Callable[[], figures.Drawing | None]] = []


def render(drawings: list[Callable[[], figures.Drawing | None]],
           out: Path) -> list[tuple[str, list[str], list[str]] | None]:
    """Draw each figure and save it as PNG and PDF in ``out``: on every CPU this process may
    use, each figure whole in one worker process (forked, so it shares the data read); one by
    one where there is one CPU or no fork. Per drawing, in order: (its file stem, the runs it
    shows, the names of the files of numbers written beside it), or None where it has nothing
    to show. A process running other threads draws one by
    one too: a forked child would inherit any lock another thread holds."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    workers = min(cpus, len(drawings))
    if (workers < 2 or threading.active_count() > 1
            or "fork" not in multiprocessing.get_all_start_methods()):
        return [_save(drawing(), out) for drawing in drawings]
    _DRAWINGS[:] = drawings
    figures.warm_up()  # fonts loaded once here, inherited by every worker
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            # last first: the per-sweep figures at the end (a panel per hyperparameter) take
            # longest, and starting them first leaves no worker with a long tail alone
            futures = {i: pool.submit(_render_one, i, out)
                       for i in reversed(range(len(drawings)))}
            return [futures[i].result() for i in range(len(drawings))]
    finally:
        _DRAWINGS.clear()


def _render_one(index: int, out: Path) -> tuple[str, list[str], list[str]] | None:
    return _save(_DRAWINGS[index](), out)


def _save(drawing: figures.Drawing | None,
          out: Path) -> tuple[str, list[str], list[str]] | None:
    if drawing is None:
        return None
    for suffix in (".png", ".pdf"):
        drawing.figure.savefig(out / f"{drawing.stem}{suffix}", dpi=120)
    for suffix, text in drawing.numbers.items():
        (out / f"{drawing.stem}{suffix}").write_text(text)
    return drawing.stem, list(drawing.run_ids), [f"{drawing.stem}{s}" for s in drawing.numbers]


class _Writer:
    """Writes files into ``out`` and remembers them, in order."""

    def __init__(self, out: Path, options: ReportOptions):
        self.out, self.options = out, options
        self.provenance = Provenance(options)
        self.written: list[Path] = []

    def write(self, title: str, sweeps: list[SweepData]) -> list[Path]:
        self.out.mkdir(parents=True, exist_ok=True)
        o = self.options
        style = figures.Style(m.label for d in sweeps for m in d.methods)
        drawings: list[Callable[[], figures.Drawing | None]] = [
            functools.partial(figures.curves, sweeps, metric, axis, o, style)
            for metric in o.metrics or sorted({d.metric for d in sweeps}) for axis in o.x_axes]
        drawings += [functools.partial(figures.final, sweeps, o, style),
                     functools.partial(figures.profiles, sweeps, style),
                     functools.partial(figures.best_of_k, sweeps, o, style)]
        drawings += [functools.partial(figures.sensitivity, d, style) for d in sweeps]
        drawings += claims.drawings(sweeps, o, style)
        for drawn in render(drawings, self.out):
            if drawn is not None:
                stem, run_ids, numbers = drawn
                files = [f"{stem}.png", f"{stem}.pdf", *numbers]
                self.written += [self.out / name for name in files]
                self.provenance.write(self.out / f"{stem}.png", run_ids, sweeps, files)
        for d in sweeps:
            self.results_table(d)
            self.improvement_table(d)
        index = self.out / "index.html"
        index.write_text(index_page(title, self.provenance.created, sweeps, self.out,
                                    self.written))
        self.written.append(index)
        every_run = [r for d in sweeps for r in d.runs["run_id"]]
        self.provenance.write(self.out / "provenance.png", every_run, sweeps)
        self.written.append(self.out / "provenance.json")
        return self.written

    def results_table(self, d: SweepData) -> None:
        table = ResultsTable.of(d, self.options)
        stem = folder.table_stem(d.name)
        for suffix, text in ((".csv", table.csv()), (".md", table.markdown()),
                             (".tex", table.latex()), (".html", table.html())):
            (self.out / f"{stem}{suffix}").write_text(text)
            self.written.append(self.out / f"{stem}{suffix}")
        self.provenance.write(self.out / f"{stem}.csv", table.run_ids, [d],
                              [f"{stem}{s}" for s in (".md", ".tex", ".html")])

    def improvement_table(self, d: SweepData) -> None:
        table = ImprovementTable.of(d)
        if table is None:
            return
        stem = folder.improvement_stem(d.name)
        for suffix, text in ((".csv", table.csv()), (".md", table.markdown())):
            (self.out / f"{stem}{suffix}").write_text(text)
            self.written.append(self.out / f"{stem}{suffix}")
        self.provenance.write(self.out / f"{stem}.csv", table.run_ids, [d], [f"{stem}.md"])
