"""The report's entry point: read the sweeps from the store, write every figure and table with
its provenance, then the index, into a staging folder that replaces the target whole."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from workbench.report import figures, folder
from workbench.report.data import SweepData, SweepRef, read_sweep
from workbench.report.index import index_page
from workbench.report.provenance import Provenance
from workbench.report.tables import ImprovementTable, ResultsTable
from workbench.study_record import ReportOptions


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
        for metric in o.metrics or sorted({d.metric for d in sweeps}):
            for axis in o.x_axes:
                self.figure(figures.curves(sweeps, metric, axis, o, style))
        self.figure(figures.final(sweeps, o, style))
        self.figure(figures.profiles(sweeps, style))
        self.figure(figures.best_of_k(sweeps, o, style))
        for d in sweeps:
            self.figure(figures.sensitivity(d, style))
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

    def figure(self, drawing: figures.Drawing | None) -> None:
        if drawing is None:
            return
        for suffix in (".png", ".pdf"):
            path = self.out / f"{drawing.stem}{suffix}"
            drawing.figure.savefig(path, dpi=120)
            self.written.append(path)
        self.provenance.write(self.out / f"{drawing.stem}.png", drawing.run_ids,
                              drawing.sweeps)

    def results_table(self, d: SweepData) -> None:
        table = ResultsTable.of(d, self.options)
        stem = folder.table_stem(d.name)
        for suffix, text in ((".csv", table.csv()), (".md", table.markdown()),
                             (".tex", table.latex()), (".html", table.html())):
            (self.out / f"{stem}{suffix}").write_text(text)
            self.written.append(self.out / f"{stem}{suffix}")
        self.provenance.write(self.out / f"{stem}.csv", table.run_ids, [d])

    def improvement_table(self, d: SweepData) -> None:
        table = ImprovementTable.of(d)
        if table is None:
            return
        stem = folder.improvement_stem(d.name)
        for suffix, text in ((".csv", table.csv()), (".md", table.markdown())):
            (self.out / f"{stem}{suffix}").write_text(text)
            self.written.append(self.out / f"{stem}{suffix}")
        self.provenance.write(self.out / f"{stem}.csv", table.run_ids, [d])
