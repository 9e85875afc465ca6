"""The report's ``index.html``: each sweep's table, then every figure, with links to the other
formats, to the CSV of each figure's numbers and to each file's provenance."""

from __future__ import annotations

import html
from pathlib import Path

from workbench.report import folder
from workbench.report.data import SweepData


def index_page(title: str, created: str, sweeps: list[SweepData], out: Path,
               written: list[Path]) -> str:
    """The page for the report in ``out`` (its tables already written there); figures in the
    order of ``written``."""
    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}"
             "</title><style>body{font-family:sans-serif;max-width:1400px;margin:auto}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
             "padding:3px 6px}img{max-width:100%}</style>",
             f"<h1>{html.escape(title)}</h1>",
             f"<p>Rebuilt from the store at {html.escape(created)}: "
             + ", ".join(html.escape(f"{d.name} (task {d.record.task}, "
                                     f"{len(d.record.seeds)} seeds)") for d in sweeps)
             + ". Every figure and table has a JSON file beside it with its query, run "
               "ids, git commits and statistics settings; every figure the numbers it draws "
               "as CSV.</p>"]
    for d in sweeps:
        stem = folder.table_stem(d.name)
        parts.append(f"<h2>{html.escape(d.name)}</h2>")
        parts.append((out / f"{stem}.html").read_text())
        parts.append(f"<p>Also as <a href='{stem}.md'>Markdown</a>, "
                     f"<a href='{stem}.tex'>LaTeX</a>, <a href='{stem}.csv'>CSV</a>; "
                     f"<a href='{stem}.json'>provenance</a>.</p>")
        poi = out / f"{folder.improvement_stem(d.name)}.md"
        if poi.exists():
            parts.append(f"<p><a href='{poi.name}'>Probability of improvement</a></p>")
    names = {path.name for path in written}
    for path in written:
        if path.suffix == ".png":
            numbers = (f" · <a href='{path.stem}.csv'>numbers (CSV)</a>"
                       if f"{path.stem}.csv" in names else "")
            parts.append(f"<h3>{html.escape(path.stem)}</h3><img src='{path.name}' "
                         f"alt='{html.escape(path.stem)}'><p><a href='{path.stem}.pdf'>"
                         f"PDF</a>{numbers} · <a href='{path.stem}.json'>provenance</a></p>")
    return "\n".join(parts)
