"""A study's fingerprint: a hash of everything that determines its results.

The engine keys every study by ``digest(document)``, where the document (built by
``workbench.spec.plan.Sweep.fingerprint``) holds the task and its parameters, the budget, the
objective, each method's fixed values and search space, the sampler and pruner settings, the
seeds' execution mode, the device kind, the versions of the numerical libraries, and the
*code*: a content hash of every module of the project's own packages that the run imports,
found statically from the task's and the methods' modules and the engine's trial runner
(``code_hashes``). An uncommitted edit to one of those files changes the fingerprint; an edit
to README, a test or a module the run never imports does not. The seed list is not in it: a
(trial, seed) run is determined by the rest and its seed, so a sweep given more seeds keeps its
study and runs only the seeds each trial lacks (``workbench.engine.trial_seeds``).

Imports are read from the source text (``imports``), not from ``sys.modules``: a process imports far
more than one run needs (the registry imports every method), and the answer must not depend on
what happened to be imported before. Every ``import`` statement counts, at module level or in a
function, except those under ``if TYPE_CHECKING:``; a package's ``__init__`` counts wherever a
module inside it is imported. Files are parsed once per process (cached by path, size and
modification time), which keeps the fingerprint of a sweep to milliseconds
(``benchmarks/fingerprint_cost.py``).

``changes(old, new)`` says in one line what differs between two documents
(``budget.steps 200 → 50``); ``recheck(code)`` which recorded modules differ from the files on
disk now (the report's staleness check, which needs no import of the modules themselves).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import re
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

VERSION = 2  # of the document's layout; a new layout is a new fingerprint (2: no seeds)
SHORT = 12  # hex digits of the digest in study names and tables

# the numerical libraries whose version can change a number: always these three (optuna's
# samplers draw the trials), and these when the run's code imports them
ALWAYS_VERSIONED = ("numpy", "optuna", "torch")
PROJECT = ("workbench", "methods")  # the project's own packages, always hashed when imported
VERSIONED_IF_IMPORTED = {"scipy": "scipy", "sklearn": "scikit-learn",
                         "transformers": "transformers", "gymnasium": "gymnasium"}


def digest(document: Mapping[str, Any]) -> str:
    """SHA-256 of the document's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------------- the code


def code_hashes(roots: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """(module -> content hash, distribution -> version) for ``roots`` (module names) and every
    module they import, directly or not, of the project (``PROJECT``) or of a root's own
    top-level package (a method in another installed package). The versions are those of
    ``ALWAYS_VERSIONED`` and of the libraries in ``VERSIONED_IF_IMPORTED`` that any of those
    modules imports."""
    roots = list(roots)
    own = {*PROJECT, *(root.split(".")[0] for root in roots)}
    seen: dict[str, str] = {}
    third_party: set[str] = set()
    todo = [name for root in roots for name in _with_parents(root)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = module_file(name)
        if path is None:
            continue
        content_hash, imported = _scan(str(path), *_stamp(path))
        seen[name] = content_hash
        for target in _resolve(name, path, imported):
            top = target.split(".")[0]
            if top in own:
                todo.extend(_with_parents(target))
            else:
                third_party.add(top)
    versions = {dist: _version(dist) for dist in ALWAYS_VERSIONED}
    for top, dist in VERSIONED_IF_IMPORTED.items():
        if top in third_party:
            versions[dist] = _version(dist)
    return dict(sorted(seen.items())), dict(sorted(versions.items()))


def recheck(code: Mapping[str, str]) -> list[str]:
    """The modules of a recorded ``code`` map whose file now hashes differently or is gone."""
    changed = []
    for name, recorded in code.items():
        path = module_file(name)
        if path is None or _scan(str(path), *_stamp(path))[0] != recorded:
            changed.append(name)
    return changed


def module_file(name: str) -> Path | None:
    """The source file of module ``name`` (a package's ``__init__.py``), found from its
    top-level package's location without importing anything below it; None when absent."""
    top, *rest = name.split(".")
    base = _package_dir(top)
    if base is None:
        return _single_file_module(top) if not rest else None
    folder = base.joinpath(*rest)
    for candidate in (folder / "__init__.py", folder.with_suffix(".py") if rest else None):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def _package_dir(top: str) -> Path | None:
    module = sys.modules.get(top)
    locations = getattr(module, "__path__", None) if module is not None else None
    if locations is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return None
        locations = spec.submodule_search_locations if spec else None
    for location in locations or ():
        if (Path(location) / "__init__.py").is_file():
            return Path(location)
    return None


def _single_file_module(top: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _stamp(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_size, info.st_mtime_ns


@cache
def _scan(path: str, size: int, mtime_ns: int) -> tuple[str, tuple[tuple[str, int, tuple], ...]]:
    """(content hash, the file's import statements as (module, level, names)); cached per
    file version."""
    data = Path(path).read_bytes()
    return hashlib.sha256(data).hexdigest()[:16], tuple(imports(data.decode(errors="replace")))


_TYPE_CHECKING = re.compile(r"if\s+(?:typing\.)?TYPE_CHECKING\s*:")
_IMPORT = re.compile(r"import\s+(.+)")
_FROM = re.compile(r"from\s+(\.*)([\w.]*)\s+import\s+(.+)")


def imports(text: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """The import statements of Python source, as (module, relative level, imported names),
    read line by line (five times faster than ``ast``, which is what a cold fingerprint
    costs): every ``import``/``from`` statement that starts a line, at any depth, with its
    continuation lines, except under ``if TYPE_CHECKING:``. A line in a string that reads like
    an import counts too: over-counting only makes the fingerprint more careful
    (``tests/test_fingerprint.py`` checks it finds every import ``ast`` finds in the
    project)."""
    found: list[tuple[str, int, tuple[str, ...]]] = []
    lines = text.splitlines()
    skip_below: int | None = None  # the indent of an ``if TYPE_CHECKING:`` being skipped
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if skip_below is not None:
            if indent > skip_below:
                continue
            skip_below = None
        if _TYPE_CHECKING.match(stripped):
            skip_below = indent
            continue
        if not stripped.startswith(("import", "from")):
            continue
        statement = stripped.split("#", 1)[0]
        while (statement.count("(") > statement.count(")") or statement.rstrip().endswith(
                "\\")) and i < len(lines):
            statement = statement.rstrip().rstrip("\\") + " " + lines[i].split("#", 1)[0]
            i += 1
        statement = statement.replace("(", " ").replace(")", " ").strip().rstrip(";")
        if match := _FROM.fullmatch(statement):
            dots, module, names = match.groups()
            found.append((module, len(dots), tuple(_names(names))))
        elif match := _IMPORT.fullmatch(statement):
            found.extend((name, 0, ()) for name in _names(match.group(1)))
    return found


def _names(text: str) -> list[str]:
    """``a as b, c`` -> [a, c]."""
    return [part.split()[0] for part in text.split(",") if part.split()]


def _resolve(name: str, path: Path, imported) -> list[str]:
    """The module names an import statement of module ``name`` (file ``path``) may load."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = []
    for module, level, names in imported:
        if level:
            base = package.split(".")
            if level > 1:
                base = base[: len(base) - (level - 1)]
            module = ".".join([*base, module] if module else base)
        if not module:
            continue
        targets.append(module)
        targets.extend(f"{module}.{n}" for n in names if n != "*")
    return targets


@cache
def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# -------------------------------------------------------------------------------- differences


def changes(old: Mapping[str, Any], new: Mapping[str, Any], limit: int = 4) -> str:
    """What differs between two fingerprint documents, in one line: ``budget.steps 200 → 50``;
    changed modules as ``code: methods.step_size.polyak``; at most ``limit`` items shown."""
    old_flat, new_flat = _flatten(old), _flatten(new)
    items, code = [], []
    for key in sorted(old_flat.keys() | new_flat.keys()):
        before, after = old_flat.get(key, _ABSENT), new_flat.get(key, _ABSENT)
        if before == after:
            continue
        if key.startswith("code."):
            code.append(key.removeprefix("code."))
        else:
            items.append(f"{key} {_show(before)} → {_show(after)}")
    if code:
        items.append(f"code: {', '.join(code[:3])}" + (f" and {len(code) - 3} more"
                                                       if len(code) > 3 else ""))
    if not items:
        return "nothing recorded differs"
    shown = "; ".join(items[:limit])
    return shown + (f"; and {len(items) - limit} more" if len(items) > limit else "")


_ABSENT = object()


def _flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(none)"
    if isinstance(value, list) and len(value) > 6 and all(isinstance(v, int) for v in value):
        return f"[{value[0]}..{value[-1]}] ({len(value)})"
    return json.dumps(value) if not isinstance(value, str) else value
