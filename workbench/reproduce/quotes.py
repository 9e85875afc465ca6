"""Numbers quoted in Markdown, rendered from the file that holds them.

A quote is an invisible marker around the number as shown::

    <!--q reproductions/NAME/results/run.json cpu_seconds /60:.1f-->5.4<!--/q-->
    <!--q reproductions/NAME/results/table_NAME.csv method=adam+gigpo:iqm .3f-->0.549<!--/q-->

``FILE`` is relative to the repository's root; ``KEY`` is a dotted path into a JSON file (a
number indexes a list: ``0.left`` in ``checks.json``), or
``COLUMN=VALUE&...:COLUMN`` (the row whose cells match, then the column) into a CSV file;
``FORMAT`` is a Python format spec, optionally after ``/D`` or ``*M`` (divide or multiply
first). ``render`` rewrites each quote from its file; ``stale`` lists the quotes whose text
differs from it (``tests/test_quotes.py`` holds README and the reproductions' READMEs to it).

Usage: ``python -m workbench.reproduce.quotes [--check] FILE.md ...`` (exit 1 under
``--check`` when a quote differs).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent.parent
QUOTE = re.compile(r"<!--q (\S+\.(?:json|csv)) (\S+) (\S+?)-->(.*?)<!--/q-->")


@dataclass(frozen=True)
class Quote:
    file: str
    key: str
    form: str
    shown: str

    def value(self, root: Path = ROOT) -> str:
        """The quoted number as its file gives it, formatted."""
        path = root / self.file
        if path.suffix == ".json":
            raw = json.loads(path.read_text())
            for part in self.key.split("."):
                raw = raw[int(part)] if isinstance(raw, list) else raw[part]
        elif path.suffix == ".csv":
            raw = _cell(pd.read_csv(path), self.key, self.file)
        else:
            raise ValueError(f"{self.file}: a quote reads a .json or .csv file")
        return _formatted(float(raw), self.form)

    def describe(self) -> str:
        return f"{self.file} {self.key}"


def quotes(text: str) -> list[Quote]:
    return [Quote(*m.groups()) for m in QUOTE.finditer(text)]


def render(text: str, root: Path = ROOT) -> str:
    """``text`` with every quote's number taken from its file."""
    def fill(m: re.Match) -> str:
        q = Quote(*m.groups())
        return f"<!--q {q.file} {q.key} {q.form}-->{q.value(root)}<!--/q-->"

    return QUOTE.sub(fill, text)


def stale(text: str, root: Path = ROOT) -> list[str]:
    """One line per quote whose shown number is not what its file gives."""
    out = []
    for q in quotes(text):
        try:
            value = q.value(root)
        except (OSError, KeyError, ValueError, IndexError, TypeError) as err:
            out.append(f"{q.describe()}: unreadable ({err})")
            continue
        if value != q.shown:
            out.append(f"{q.describe()}: shows {q.shown}, the file gives {value}")
    return out


def _cell(table: pd.DataFrame, key: str, file: str):
    selector, _, column = key.rpartition(":")
    rows = table
    for condition in filter(None, selector.split("&")):
        name, _, wanted = condition.partition("=")
        rows = rows[rows[name].astype(str) == wanted]
    if len(rows) != 1 or column not in table.columns:
        raise KeyError(f"{file}: {len(rows)} rows match {selector!r} (column {column!r})")
    return rows[column].iloc[0]


def _formatted(value: float, form: str) -> str:
    scale = re.match(r"^([/*])([0-9.eE+-]+):(.*)$", form)
    if scale:
        op, factor, form = scale.groups()
        value = value / float(factor) if op == "/" else value * float(factor)
    return format(value, form)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    bad = 0
    for name in (a for a in argv if a != "--check"):
        path = Path(name)
        text = path.read_text()
        if check:
            for line in stale(text):
                print(f"{name}: {line}")
                bad += 1
        else:  # a quote whose file or key is not there: said, and the file left as it is
            unreadable = [line for line in stale(text) if ": unreadable (" in line]
            for line in unreadable:
                print(f"{name}: {line}")
            bad += len(unreadable)
            if not unreadable:
                path.write_text(render(text))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
