"""The family contracts run on methods: deterministic checks that a method keeps its family's
promises (each family module's docstring says what its contract checks).

``check(cls)`` runs the contract of ``cls.family`` on a method class (registered or not) and
returns the problems as plain-English sentences; ``check_all(family)`` does it for every
registered method. A method is run in several configurations (``configurations``): its
defaults; for each hyperparameter with a default search range, the low and the high end of
that range (the others at their defaults); and every choice of each ``Choice``. A
configuration whose ``requirements(params)`` the contract's synthetic problem does not provide
is skipped silently; if none can run, that is the problem reported. The synthetic problems
provide every input the family's ``REQUIRABLE`` names. An exception raised by the method
becomes a problem naming its type and message.
"""

from __future__ import annotations

from workbench import registry
from workbench.families import advantage, batch_size, entropy, step_size
from workbench.families._checks import ContractViolation, configurations, describe

#: family -> its module (``REQUIRABLE``, ``check_configuration``).
FAMILY_MODULES = {module.FAMILY: module for module in (step_size, batch_size, entropy, advantage)}


def check(cls: type[registry.Method]) -> list[str]:
    """The contract of ``cls.family`` run on ``cls``: problems as sentences (empty: passes)."""
    key = f"{getattr(cls, 'family', '?')}/{getattr(cls, 'name', cls.__qualname__)}"
    family = FAMILY_MODULES.get(getattr(cls, "family", None))
    if family is None:
        return [f"{key}: unknown family; allowed: {', '.join(registry.FAMILIES)}"]
    provided = frozenset(family.REQUIRABLE)
    problems, ran, unmet = [], 0, set()
    for label, overrides in configurations(cls):
        where = key if label == "defaults" else f"{key} with {label}"
        try:
            method = cls(**overrides)
            needs = cls.requirements(method.params)
        except Exception as err:  # a declaration the method itself rejects
            problems.append(f"{where}: could not be built: {describe(err)}")
            continue
        missing = set(needs) - provided
        if missing:
            unmet |= missing
            continue
        ran += 1
        try:
            family.check_configuration(cls, overrides, method)
        except ContractViolation as violation:
            problems.extend(f"{where}: {line}" for line in violation.args)
        except Exception as err:  # raised where no narrower guard names the call
            problems.append(f"{where}: raised {describe(err)}")
    if ran == 0 and not problems:
        problems.append(
            f"{key}: no configuration can run on the {cls.family} contract's synthetic "
            f"problem: they require {', '.join(sorted(unmet))}, which it does not provide "
            f"(it provides {', '.join(sorted(provided))})"
        )
    return problems


def check_all(family: str | None = None) -> dict[str, list[str]]:
    """``family/name`` -> problems, for every registered method (of ``family`` if given)."""
    keys = registry.available() if family is None else [
        f"{family}/{name}" for name in registry.available(family)]
    return {key: check(registry.get(*key.split("/", 1))) for key in keys}
