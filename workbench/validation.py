"""Strict pydantic models and one-line error messages: file, key path, what is allowed."""

from __future__ import annotations

import re
import reprlib
import types
import typing
from typing import Any

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

SHOWN_CHARS = 200  # of a user's value in a message


def shorten(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters, without building the whole repr."""
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother = 3, limit, limit
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 10
    return clip(short.repr(value), limit)


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters, marked with ... when cut."""
    return text if len(text) <= limit else text[:limit] + "..."


MESSAGE_CHARS = 2000  # a message longer than this loses its middle, never "allowed: ..."


class SpecError(ValueError):
    """A bad spec or argument: one message naming the file, the key path and what is allowed."""

    def __init__(self, source: str, path: str, message: str):
        if len(message) > MESSAGE_CHARS:
            half = MESSAGE_CHARS // 2
            message = f"{message[:half]} ... {message[-half:]}"
        self.source, self.path, self.message = source, clip(path), message
        where = f"{source}: {self.path}" if path else source
        super().__init__(f"{where}: {message}")


class Strict(BaseModel):
    """A model whose unknown keys are errors that list the allowed ones, and which takes
    neither a boolean for a number (pydantic reads true as 1) nor an infinite or NaN float."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields)
            for key in data:
                if key not in allowed:
                    raise PydanticCustomError(
                        "unknown_key", "unknown key {key}; allowed: {allowed}",
                        {"key": clip(str(key)), "allowed": ", ".join(sorted(allowed))},
                    )
            for key, value in data.items():
                _refuse_boolean_number(str(key), cls.model_fields[key], value)
        return data


def _refuse_boolean_number(key: str, field: FieldInfo, value: Any) -> None:
    """A boolean where the field takes a number but no boolean: an error naming its path."""
    found = _misplaced_boolean(field.annotation, value, key)
    if found is not None:
        path, kind, boolean = found
        allowed = f"{kind}{_bounds(field)}" if path == key else kind
        raise PydanticCustomError("boolean_number", "a boolean ({value}); allowed: {allowed}",
                                  {"key": path, "value": str(boolean).lower(),
                                   "allowed": allowed})


def _misplaced_boolean(annotation: Any, value: Any, path: str) -> tuple[str, str, bool] | None:
    """(path, "an integer" or "a number", the boolean) of the first boolean in ``value`` that
    the annotation would read as a number; None when there is none."""
    members = _members(annotation)
    if isinstance(value, bool):
        takes_bool = any(m in (bool, Any, object) or value in _literal_values(m)
                         for m in members)
        kind = "an integer" if int in members else "a number" if float in members else None
        return None if takes_bool or kind is None else (path, kind, value)
    for member in members:
        origin, args = typing.get_origin(member), typing.get_args(member)
        if isinstance(value, list) and origin in (list, tuple, set) and args:
            for i, item in enumerate(value):
                found = _misplaced_boolean(args[0], item, f"{path}[{i}]")
                if found:
                    return found
        if isinstance(value, dict) and origin is dict and len(args) == 2:
            for key, item in value.items():
                found = _misplaced_boolean(args[1], item, f"{path}.{key}")
                if found:
                    return found
    return None


def _members(annotation: Any) -> list[Any]:
    """The types a (possibly Optional, Union or Annotated) annotation admits."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _literal_values(member: Any) -> tuple:
    return typing.get_args(member) if typing.get_origin(member) is typing.Literal else ()


def _bounds(field: FieldInfo) -> str:
    """`` >= 1 and <= 10`` from a field's ge/gt/le/lt constraints ("" without any)."""
    signs = {annotated_types.Ge: (">=", "ge"), annotated_types.Gt: (">", "gt"),
             annotated_types.Le: ("<=", "le"), annotated_types.Lt: ("<", "lt")}
    parts = [f"{sign} {getattr(m, name)}" for m in field.metadata
             for kind, (sign, name) in signs.items() if isinstance(m, kind)]
    return " " + " and ".join(parts) if parts else ""


# Parts of a pydantic error location that name a union branch or a validator, not a key.
_BRANCH = re.compile(r"[\[\](),']|^(str|int|float|bool|dict|list|none)$|^[A-Z]")


def key_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _BRANCH.search(str(part)):
            out += ("." if out else "") + str(part)
    return out


_GENERIC = {"string_type", "int_type", "float_type", "bool_type", "model_type", "dict_type",
            "list_type", "literal_error", "int_parsing", "float_parsing"}


def _depth(err: dict) -> tuple[int, bool]:
    """Deeper errors first; among equals, a specific one before a union branch's type error."""
    keys = [p for p in err["loc"] if isinstance(p, int) or not _BRANCH.search(str(p))]
    return len(keys), err["type"] not in _GENERIC


def spec_error(source: str, err: ValidationError, prefix: str = "") -> SpecError:
    """The most specific of pydantic's errors (it reports one per union branch)."""
    first = max(err.errors(), key=_depth)
    path = key_path(first["loc"])
    message = first["msg"]
    if first["type"] == "unknown_key":
        path = f"{path}.{first['ctx']['key']}" if path else first["ctx"]["key"]
        message = f"unknown key; allowed: {first['ctx']['allowed']}"
    elif first["type"] == "boolean_number":
        path = f"{path}.{first['ctx']['key']}" if path else first["ctx"]["key"]
    elif first["type"] == "finite_number":
        message = f"{shorten(first['input'])} is not finite; allowed: a finite number"
    elif first["type"] == "missing":
        message = "required key is missing"
    elif first["type"] == "value_error":
        message = message.removeprefix("Value error, ")
    if prefix:
        path = f"{prefix}.{path}" if path else prefix
    return SpecError(source, path, message)
