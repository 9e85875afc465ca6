"""Strict pydantic models and one-line error messages: file, key path, what is allowed."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError


class SpecError(ValueError):
    """A bad spec or argument: one message naming the file, the key path and what is allowed."""

    def __init__(self, source: str, path: str, message: str):
        self.source, self.path, self.message = source, path, message
        where = f"{source}: {path}" if path else source
        super().__init__(f"{where}: {message}")


class Strict(BaseModel):
    """A model whose unknown keys are errors that list the allowed ones."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = set(cls.model_fields)
            for key in data:
                if key not in allowed:
                    raise PydanticCustomError(
                        "unknown_key", "unknown key {key}; allowed: {allowed}",
                        {"key": str(key), "allowed": ", ".join(sorted(allowed))},
                    )
        return data


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
    elif first["type"] == "missing":
        message = "required key is missing"
    elif first["type"] == "value_error":
        message = message.removeprefix("Value error, ")
    if prefix:
        path = f"{prefix}.{path}" if path else prefix
    return SpecError(source, path, message)
