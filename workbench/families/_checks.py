"""The machinery every family's contract check shares: the configurations a method is run in,
the violation a broken promise raises, and small guards and synthetic inputs.

A family module checks one configuration with ``check_configuration(cls, overrides, method)``,
raising ``ContractViolation`` (one sentence per problem, without the method's name);
``workbench.families.checks`` runs it over ``configurations(cls)``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any

import torch

from workbench import registry
from workbench.hyperparams import Choice, HyperparameterError


class ContractViolation(Exception):
    """One broken promise; its message is the problem sentence (without the method's name)."""


def configurations(cls: type[registry.Method]) -> list[tuple[str, dict[str, Any]]]:
    """(label, overrides): the defaults, both ends of each default search range, each choice."""
    configs: list[tuple[str, dict[str, Any]]] = [("defaults", {})]
    for key, hp in cls.hyperparameters.items():
        if isinstance(hp, Choice):
            configs += [(f"{key}={c!r}", {key: c}) for c in hp.choices if c != hp.default]
            continue
        try:
            dist = hp.distribution()
        except HyperparameterError as err:
            configs.append((f"{key}'s default search range ({err})", {key: None}))
            continue
        if dist is None:
            continue
        for end, value in (("low", dist.low), ("high", dist.high)):
            if value != hp.default:
                configs.append((f"{key}={value!r} (the {end} end of its search range)",
                                {key: value}))
    return configs


def describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def guarded(what: str, call: Callable[[], Any]) -> Any:
    """``call()``, with an exception it raises turned into a violation naming ``what``."""
    try:
        return call()
    except ContractViolation:
        raise
    except Exception as err:
        raise ContractViolation(f"raised {describe(err)} {what}") from None


def is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def right_padded_mask(gen: torch.Generator, rows: int, horizon: int) -> torch.Tensor:
    """Float mask, 1 on a prefix of each row: lengths in [horizon / 4, horizon], row 0 full."""
    lengths = torch.randint(horizon // 4, horizon + 1, (rows,), generator=gen)
    lengths[0] = horizon
    return (torch.arange(horizon) < lengths[:, None]).to(torch.float64)


def check_unchanged(what: str, original: Mapping[str, torch.Tensor],
                    given: Mapping[str, torch.Tensor]) -> None:
    """``given`` (the clones a method was called with) still equals ``original``."""
    for name, tensor in original.items():
        if not torch.equal(tensor, given[name]):
            raise ContractViolation(f"changed its input {name!r} in place (in {what})")
