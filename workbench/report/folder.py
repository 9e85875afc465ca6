"""The report's folder: the names of its files, and replacing it whole.

A report is built in a hidden folder beside its target (``.NAME.building-PID``), then renamed
into place, so the target holds the old report (or nothing) until the new one is complete; a
folder that holds something other than a report (no ``provenance.json``) is never replaced.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from workbench.common.processes import process_alive
from workbench.report.data import ReportError


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


def curves_stem(metric: str, axis: str) -> str:
    return f"curves_{slug(metric)}_{slug(axis)}"


def sensitivity_stem(sweep: str) -> str:
    return f"sensitivity_{slug(sweep)}"


def table_stem(sweep: str) -> str:
    return f"table_{slug(sweep)}"


def improvement_stem(sweep: str) -> str:
    return f"poi_{slug(sweep)}"


def replaceable(out: Path) -> Path:
    """The folder the report replaces (a symlink's target): absent, empty or a report."""
    target = out.resolve() if out.is_symlink() else out
    if target.exists() and not (target.is_dir() and (
            (target / "provenance.json").is_file() or not any(target.iterdir()))):
        raise ReportError(f"{out} is not a report (it has no provenance.json) and would be "
                          "replaced: remove it or name another folder with --out")
    return target


def staging(target: Path) -> Path:
    """A fresh folder beside ``target`` to build in, once leftovers of killed builds are gone
    (``.NAME.building-PID`` and ``.NAME.old-PID`` of processes that have ended)."""
    if target.parent.is_dir():
        for leftover in target.parent.iterdir():
            stem, _, pid = leftover.name.rpartition("-")
            if (stem in (f".{target.name}.building", f".{target.name}.old") and pid.isdigit()
                    and not process_alive(int(pid))):
                shutil.rmtree(leftover, ignore_errors=True)
    folder = target.with_name(f".{target.name}.building-{os.getpid()}")
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def move_into_place(built: Path, target: Path) -> None:
    """Rename the new report to ``target``; an old one is moved aside first, then removed."""
    if not target.exists():
        built.rename(target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    target.rename(old)
    built.rename(target)
    shutil.rmtree(old)
