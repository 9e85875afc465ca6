"""Each method's and task's detail as JSON-ready data: what ``workbench methods`` and
``workbench tasks`` show (``workbench.cli.listing`` lays it out), built from the registry's
classes and the tasks' parameter models."""

from __future__ import annotations

import typing
from typing import Any


def method_detail(cls) -> dict[str, Any]:
    return {"name": cls.name, "family": cls.family, "fidelity": cls.fidelity,
            "key": cls.key(), "paper": f"{cls.reference.paper} ({cls.reference.year})",
            "reference": str(cls.reference), "requires": sorted(cls.requires),
            "vectorised": bool(cls.vectorised),
            "doc": (cls.__doc__ or "").strip() or None,
            "module": cls.__module__,
            "hyperparameters": {
                name: {"type": hp.kind, "default": _jsonable(hp.default),
                       "allowed": hp.allowed(), "search": _search(hp),
                       "help": getattr(hp, "help", "")}
                for name, hp in cls.hyperparameters.items()}}


def _search(hp) -> str | None:
    """The default search range in words; None when the parameter is fixed by default."""
    dist = hp.distribution()
    if dist is None:
        return None
    if hasattr(dist, "choices"):
        return ", ".join(map(repr, dist.choices))
    return f"[{dist.low:g}, {dist.high:g}]" + (" log" if dist.log else "")


def task_detail(task) -> dict[str, Any]:
    return {"name": task.name, "slots": list(task.slots),
            "description": " ".join((task.description or "").split()),
            "defaults": dict(task.default_methods),
            "provides": sorted(task.provides), "metrics": dict(task.metrics),
            "objective": task.default_objective, "module": task.__module__,
            "seed_axis": task.runs_seeds_together(),
            "parameters": {name: _field(field)
                           for name, field in task.Params.model_fields.items()}}


def _field(field) -> dict[str, Any]:
    """A pydantic field's type, default, bounds and help, in words."""
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    bounds = [f"{sign} {getattr(m, name)}" for m in field.metadata
              for name, sign in signs.items() if getattr(m, name, None) is not None]
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    return {"type": _type_name(field.annotation), "default": _jsonable(default),
            "bounds": " and ".join(bounds), "help": field.description or ""}


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if annotation is type(None):
        return "none"
    return getattr(annotation, "__name__", str(annotation))


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return str(value)
    if isinstance(value, str | int | float | bool | type(None)):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)
