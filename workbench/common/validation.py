"""Strict pydantic models and one-line error messages: file, key path, what is allowed."""

from __future__ import annotations

import copy
import re
import reprlib
import types
import typing
from typing import Any, ClassVar

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
    """A bad spec or argument: one message naming the file, the key path and what is allowed;
    ``problems``, every (path, message) found at once (the first is ``path``, ``message``)."""

    def __init__(self, source: str, path: str, message: str,
                 more: list[tuple[str, str]] | None = None):
        problems = [(clip(p), _cut(m)) for p, m in [(path, message), *(more or [])]]
        self.source, self.problems = source, problems
        self.path, self.message = problems[0]
        if len(problems) == 1:
            where = f"{source}: {self.path}" if path else source
            super().__init__(f"{where}: {self.message}")
        else:
            lines = [f"  {p}: {m}" if p else f"  {m}" for p, m in problems]
            super().__init__(f"{source}: {len(problems)} problems\n" + "\n".join(lines))

    @classmethod
    def of(cls, errors: list[SpecError]) -> SpecError:
        """One error holding every problem of ``errors`` (of one source)."""
        problems = [p for err in errors for p in err.problems]
        return cls(errors[0].source, *problems[0], more=problems[1:])


def _cut(message: str) -> str:
    if len(message) > MESSAGE_CHARS:
        half = MESSAGE_CHARS // 2
        message = f"{message[:half]} ... {message[-half:]}"
    return message


def did_you_mean(name: Any, allowed, synonyms: dict | None = None) -> str:
    """``did you mean 'steps'? `` when ``name`` is a known synonym of one of ``allowed``
    (``synonyms``: word -> key, checked first, so a look-alike key of another meaning is not
    offered) or close to one (difflib's ratio of at least 0.7), else ""."""
    import difflib

    meant = (synonyms or {}).get(str(name).lower())
    if meant is not None and meant in [str(a) for a in allowed]:
        return f"did you mean {meant!r}? "
    close = difflib.get_close_matches(str(name), [str(a) for a in allowed], n=1, cutoff=0.7)
    return f"did you mean {close[0]!r}? " if close else ""


class Strict(BaseModel):
    """A model whose unknown keys are errors that list the allowed ones, and which takes
    neither a boolean for a number (pydantic reads true as 1) nor an infinite or NaN float."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # Words people write for a key (lower case -> the key): the unknown-key message suggests
    # the key they mean, not the look-alike key (``env_steps`` is ``samples``, not ``steps``).
    key_synonyms: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields)
            unknown = [clip(str(key)) for key in data if key not in allowed]
            if unknown:  # every one at once; the message names the first
                raise PydanticCustomError(
                    "unknown_key", "unknown key {key}; allowed: {allowed}",
                    {"key": unknown[0], "keys": unknown, "allowed": ", ".join(sorted(allowed)),
                     "synonyms": cls.key_synonyms},
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


def validate(model: type[BaseModel], data: Any, source: str, prefix: str = "") -> Any:
    """``model.model_validate(data)``, or a SpecError with every problem at once: an unknown
    key stops pydantic at its model, so each round drops the unknown keys found (from a copy)
    and validates again, until no unknown key is left."""
    data = copy.deepcopy(data)
    problems: list[tuple[str, str]] = []
    for _ in range(MAX_ROUNDS):
        try:
            checked = model.model_validate(data)
        except ValidationError as err:
            found = spec_error(source, err, prefix).problems
            problems += [p for p in found if p not in problems]
            if not _drop_unknown(data, err):
                break
        else:
            if not problems:
                return checked
            break
    raise SpecError(source, *problems[0], more=problems[1:])


MAX_ROUNDS = 20  # of ``validate``: nested models with unknown keys, one level per round


def _drop_unknown(data: Any, err: ValidationError) -> bool:
    """Remove the unknown keys ``err`` reports from ``data`` (walking its location, skipping
    the parts that name a union branch); whether any was removed."""
    removed = False
    for error in err.errors():
        if error["type"] != "unknown_key":
            continue
        here = data
        for part in error["loc"]:
            if isinstance(here, dict) and part in here:
                here = here[part]
            elif isinstance(here, list) and isinstance(part, int) and part < len(here):
                here = here[part]
        if isinstance(here, dict):
            for key in error["ctx"].get("keys", [error["ctx"]["key"]]):
                for actual in [k for k in here if clip(str(k)) == key]:
                    del here[actual]
                    removed = True
    return removed


def spec_error(source: str, err: ValidationError, prefix: str = "") -> SpecError:
    """Every problem pydantic found, once per key path: for a path, the most specific of its
    errors (pydantic reports one per union branch), and no bare type error of a path under
    which a deeper one explains it."""
    best: dict[str, dict] = {}
    for error in err.errors():
        path = key_path(error["loc"])
        if path not in best or _depth(error) > _depth(best[path]):
            best[path] = error
    problems = []
    for path, error in best.items():
        deeper = any(other != path and (not path or other.startswith((f"{path}.", f"{path}[")))
                     for other in best)
        if deeper and error["type"] in _GENERIC:
            continue
        problems += _describe(path, error)
    if prefix:
        problems = [(f"{prefix}.{path}" if path else prefix, message)
                    for path, message in problems]
    return SpecError(source, *problems[0], more=problems[1:])


def _describe(path: str, error: dict) -> list[tuple[str, str]]:
    """One pydantic error as (key path, message) pairs (an unknown_key error: one per key)."""
    kind, message = error["type"], error["msg"]
    if kind == "unknown_key":
        allowed, synonyms = error["ctx"]["allowed"].split(", "), error["ctx"].get("synonyms")
        return [(f"{path}.{key}" if path else key,
                 f"unknown key; {did_you_mean(key, allowed, synonyms)}"
                 f"allowed: {error['ctx']['allowed']}")
                for key in error["ctx"].get("keys", [error["ctx"]["key"]])]
    if kind == "boolean_number":
        path = f"{path}.{error['ctx']['key']}" if path else error["ctx"]["key"]
    elif kind == "finite_number":
        message = f"{shorten(error['input'])} is not finite; allowed: a finite number"
    elif kind == "missing":
        message = "required key is missing"
    elif kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind == "literal_error":
        choices = re.findall(r"'([^']*)'", error["ctx"].get("expected", ""))
        message = (f"{shorten(error['input'])}: {did_you_mean(error['input'], choices)}"
                   f"allowed: {', '.join(choices)}")
    return [(path, message)]
