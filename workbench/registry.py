"""The method registry: one class per scheme, registered with ``@register``.

Discovery imports every module of the ``methods`` package and every entry point of the group
``workbench.methods`` (a module or a class in another installed package), once, on first use.

    >>> from workbench import registry
    >>> registry.get("step_size", "constant")
    >>> registry.available("step_size")
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import sys
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

from workbench.hyperparams import Hyperparameter, HyperparameterError

FAMILIES = ("step_size", "batch_size", "entropy", "advantage")
FIDELITIES = ("reference-checked", "reconstructed")
ENTRY_POINT_GROUP = "workbench.methods"


class RegistryError(LookupError):
    """An unknown family or method, or a malformed declaration."""


@dataclass(frozen=True)
class Reference:
    """Where a scheme comes from: the paper and the implementation it follows, if any."""

    paper: str
    year: int
    implementation: str = ""

    def __str__(self) -> str:
        text = f"{self.paper} ({self.year})"
        return f"{text}; impl: {self.implementation}" if self.implementation else text


class HyperparameterValues:
    """A method's resolved hyperparameters, read as attributes (``self.hp.lr``); read-only.

    Every name read is recorded (``Method.hyperparameters_read``: the engine's unused-knob
    check). The view has no public attribute of its own, so any identifier not starting with
    ``_`` may name a hyperparameter (``params``, ``read``, ``hp``, ...).
    """

    __slots__ = ("_owner", "_values", "_read")

    def __init__(self, owner: str, values: dict[str, Any]) -> None:
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_read", set())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # slots not yet set (copy, pickle) or a dunder probe
            raise AttributeError(name)
        if name in self._values:
            self._read.add(name)
            return self._values[name]
        raise AttributeError(f"{self._owner} has no hyperparameter {name!r}; "
                             f"allowed: {', '.join(sorted(self._values)) or '(none)'}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._owner}: hyperparameters are read-only (set {name!r} in "
                             "the constructor's keyword arguments)")

    def __reduce__(self):  # copy and pickle rebuild the view (reads are not carried over)
        return type(self), (self._owner, self._values)

    def __dir__(self) -> list[str]:
        return sorted(self._values)

    def __repr__(self) -> str:
        return f"{self._owner}.hp({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


class Method:
    """Base of every registered scheme. Constructors only store resolved hyperparameters:
    ``params`` (the dict, for logging and copies) and ``hp`` (the same values, read in the
    method's code as ``self.hp.NAME``, each read recorded)."""

    name: ClassVar[str]
    family: ClassVar[str]
    hyperparameters: ClassVar[dict[str, Hyperparameter]] = {}
    requires: ClassVar[frozenset[str]] = frozenset()
    reference: ClassVar[Reference]
    fidelity: ClassVar[str]
    # whether the method runs the seeds of a trial as one computation with a leading seed axis
    # (``execution: {seeds: vectorised}``); what that asks is the family's (its module's
    # docstring), and its contract check holds it to parity with the seeds run one by one
    vectorised: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        self.params = self.resolve(params)
        self.hp = HyperparameterValues(self.key(), self.params)

    def hyperparameters_read(self) -> frozenset[str]:
        """The hyperparameters the code has read through ``self.hp`` so far (unused knobs)."""
        return frozenset(self.hp._read)

    @classmethod
    def key(cls) -> str:
        return f"{cls.family}/{cls.name}"

    @classmethod
    def resolve(cls, params: dict[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with ``params``, each validated against its declaration."""
        unknown = sorted(set(params) - set(cls.hyperparameters))
        if unknown:
            raise HyperparameterError(
                f"{cls.key()} has no hyperparameter {unknown[0]!r}; "
                f"allowed: {', '.join(sorted(cls.hyperparameters)) or '(none)'}"
            )
        resolved = {}
        for key, hp in cls.hyperparameters.items():
            value = params.get(key, hp.default)
            try:
                resolved[key] = hp.validate(value)
            except HyperparameterError as err:
                raise HyperparameterError(f"{cls.key()}.{key}: {err}") from None
        return resolved

    @classmethod
    def requirements(cls, params: dict[str, Any]) -> frozenset[str]:
        """What the task must provide for these resolved hyperparameters."""
        return frozenset(cls.requires)

    @classmethod
    def inert(cls, params: dict[str, Any], task_params: Any) -> str | None:
        """Why the method, with these resolved hyperparameters, would change nothing under the
        task's settings ``task_params`` (a spec naming it there is refused with the reason);
        None when it acts (the default)."""
        return None

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


_REGISTRY: dict[tuple[str, str], type[Method]] = {}
_discovered = False


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: check the declaration and add the method to the registry."""
    for attr in ("name", "family", "reference", "fidelity"):
        if not hasattr(cls, attr):
            raise RegistryError(f"{cls.__qualname__} must declare '{attr}'")
    if cls.family not in FAMILIES:
        raise RegistryError(f"{cls.__qualname__}.family={cls.family!r}; allowed: {FAMILIES}")
    if cls.fidelity not in FIDELITIES:
        raise RegistryError(
            f"{cls.__qualname__}.fidelity={cls.fidelity!r}; allowed: {FIDELITIES}"
        )
    if not isinstance(cls.reference, Reference):
        raise RegistryError(f"{cls.__qualname__}.reference must be a registry.Reference")
    for key, hp in cls.hyperparameters.items():
        if not key.isidentifier() or key.startswith("_"):
            raise RegistryError(f"{cls.__qualname__}: hyperparameter name {key!r} must be an "
                                "identifier not starting with '_' (it is read as self.hp.NAME)")
        try:
            hp.validate(hp.default)
            hp.distribution()
        except HyperparameterError as err:
            raise RegistryError(f"{cls.__qualname__}.{key}: {err}") from None
    existing = _REGISTRY.get((cls.family, cls.name))
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise RegistryError(
            f"{cls.family}/{cls.name} is registered twice: {existing.__module__} and "
            f"{cls.__module__}"
        )
    _REGISTRY[(cls.family, cls.name)] = cls
    return cls


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    import methods

    for info in pkgutil.walk_packages(methods.__path__, prefix="methods."):
        importlib.import_module(info.name)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
        except Exception as err:  # a broken plugin must not take the CLI down
            warnings.warn(
                f"skipping plugin entry point {entry.name!r} ({entry.value}): {err}",
                stacklevel=2,
            )
            continue
        if isinstance(loaded, type) and issubclass(loaded, Method):
            register(loaded)


def get(family: str, name: str) -> type[Method]:
    """The class registered as ``family/name``."""
    _discover()
    if family not in FAMILIES:
        raise RegistryError(f"unknown family {family!r}; allowed: {', '.join(FAMILIES)}")
    try:
        return _REGISTRY[(family, name)]
    except KeyError:
        names = ", ".join(available(family)) or "(none registered)"
        raise RegistryError(f"unknown {family} method {name!r}; allowed: {names}") from None


def available(family: str | None = None) -> list[str]:
    """Registered names of ``family``, or ``family/name`` keys of every family."""
    _discover()
    if family is None:
        return sorted(f"{f}/{n}" for f, n in _REGISTRY)
    if family not in FAMILIES:
        raise RegistryError(f"unknown family {family!r}; allowed: {', '.join(FAMILIES)}")
    return sorted(n for f, n in _REGISTRY if f == family)


def forget_module(prefix: str) -> None:
    """Drop methods defined in modules under ``prefix`` (tests that register throwaway ones)."""
    for key, cls in list(_REGISTRY.items()):
        if cls.__module__.startswith(prefix):
            del _REGISTRY[key]
    for name in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[name]
