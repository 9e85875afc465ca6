"""Sweep specs: YAML files in ``sweeps/``, read, validated (``workbench.spec.schema``) and
resolved into studies (``workbench.spec.resolve``); and report specs (``reports/``), which
name sweep specs.

Every problem with a spec becomes one ``SpecError`` naming the file, the key path and what is
allowed; nothing is written before a spec has passed (see ``load``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from workbench.common import yamlsafe
from workbench.common.validation import SpecError, clip, shorten, validate
from workbench.spec.plan import ReportPlan, Sweep
from workbench.spec.resolve import resolve
from workbench.spec.schema import ReportFile, SweepSpec


def read_yaml(path: str | Path) -> Any:
    """The mapping in a YAML file; any problem is one SpecError naming the file."""
    path = Path(path)
    try:
        if path.is_dir():
            raise SpecError(clip(str(path)), "", "a folder; allowed: a YAML file")
        if not path.is_file():
            raise SpecError(clip(str(path)), "", "no such file")
        text = path.read_text()
    except OSError as err:  # a name too long, a file this user may not read, ...
        raise SpecError(clip(str(path)), "", f"cannot be read: {err.strerror or err}; "
                        "allowed: a readable YAML file") from None
    except UnicodeDecodeError:
        raise SpecError(str(path), "", "not a UTF-8 text file") from None
    try:
        data = yamlsafe.load(text)
    except yamlsafe.Refused as err:
        raise SpecError(str(path), err.path, err.message) from None
    except yaml.YAMLError as err:
        raise SpecError(str(path), "", f"not valid YAML: {yaml_problem(err)}") from None
    except (ValueError, TypeError, LookupError, AttributeError, OverflowError) as err:
        # PyYAML raises these for values it cannot build (!!int x, a date 2020-13-45)
        raise SpecError(str(path), "", f"a value YAML cannot build: {err}") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "", "the top level must be a mapping of keys to values")
    return data


def yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's error in one line: what is wrong and where (line and column, 1-based)."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = "; ".join(filter(None, [err.context, err.problem])) or "unreadable"
        return f"{what}{where}"
    if isinstance(err, yaml.reader.ReaderError):
        return f"{err.reason} at character {err.position + 1}"
    return " ".join(str(err).split())


def load(path: str | Path, storage: str | None = None, device: str | None = None) -> Sweep:
    """Read and check a spec; ``storage`` and ``device`` (from the command line) override the
    spec's."""
    source = str(path)
    return check(read_yaml(path), source, Path(path).stem, storage=storage, device=device)


def check(data: dict, source: str, default_name: str = "sweep", storage: str | None = None,
          device: str | None = None) -> Sweep:
    """A spec's mapping validated and resolved; a SpecError with every problem of both."""
    try:
        spec = validate(SweepSpec, data, source)
    except SpecError as err:
        raise _with_resolution_problems(err, data, source, default_name, storage) from None
    return resolve(spec, source, default_name=default_name, storage=storage, device=device)


def _with_resolution_problems(err: SpecError, data: dict, source: str, default_name: str,
                              storage: str | None) -> SpecError:
    """``err`` (the spec's structural problems) with what resolving the rest finds too: the
    keys with problems are dropped (back to their defaults) and the remainder resolved, so
    an unknown method and a misspelt pruner are both reported in one run."""
    broken = {re.split(r"[.\[]", path, maxsplit=1)[0] for path, _ in err.problems}
    if not broken or broken & {"task", "methods", ""}:
        return err
    try:
        rest = SweepSpec.model_validate({k: v for k, v in data.items() if k not in broken})
        resolve(rest, source, default_name, storage)
    except SpecError as more:
        return SpecError.of([err, more])
    except (ValidationError, ValueError, LookupError):
        return err
    return err


def load_report(path: str | Path, storage: str | None = None,
                load_sweep: Callable[..., Any] | None = None) -> ReportPlan:
    """A sweep spec (one sweep) or a report spec (``sweeps:``, paths relative to the spec's
    folder's parent or to the folder itself). ``load_sweep(path, storage=)`` reads each sweep
    spec (default ``load``; `workbench report` passes ``workbench.spec.resolved.load``)."""
    load_sweep = load_sweep or load
    data = read_yaml(path)
    if "sweeps" not in data:
        sweep = load_sweep(path, storage=storage)
        return ReportPlan(sweep.name, [sweep], sweep.report)
    try:
        spec = validate(ReportFile, data, str(path))
    except SpecError:
        raise
    base = Path(path).resolve().parent
    sweeps = []
    for i, entry in enumerate(spec.sweeps):
        target = Path(entry) if Path(entry).is_absolute() else base.parent / entry
        if not target.is_file():
            target = base / entry
        if not target.is_file():
            raise SpecError(str(path), f"sweeps[{i}]", f"no sweep spec at {shorten(entry)}")
        sweeps.append(load_sweep(target, storage=storage))
    return ReportPlan(spec.name, sweeps, spec.report)
