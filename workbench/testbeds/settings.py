"""A training loop's settings as a pydantic model, nested where the loop has parts, built from a
task's flat parameters in one call.

A loop declares its knobs once, with their bounds, on ``Settings`` models: its own, and one
model per part as a nested field (the control loop's ``ppo: PPOSettings``). A sweep's YAML gives
a task's parameters as flat keys, so the task's params model inherits the knob models (all
fields flat, each defined once) and hands the loop ``LoopSettings.from_flat(params)``.
"""

from __future__ import annotations

import typing
from typing import Any, Self

from workbench.common.validation import Strict


class Settings(Strict):
    """Base of a loop's settings: unknown keys are errors (``Strict``); a field whose type is
    another ``Settings`` model is a nested group."""

    @classmethod
    def from_flat(cls, flat: Any, **overrides: Any) -> Self:
        """This model filled from the attributes of ``flat`` (a task's params) of the same names,
        each nested group from the same ``flat``; ``overrides`` replace top-level values."""
        unknown = set(overrides) - set(cls.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for name, field in cls.model_fields.items():
            if name in overrides:
                values[name] = overrides[name]
            elif _is_group(field.annotation):
                values[name] = field.annotation.from_flat(flat)
            else:
                values[name] = getattr(flat, name)
        return cls.model_validate(values)


def _is_group(annotation: Any) -> bool:
    return (isinstance(annotation, type) and typing.get_origin(annotation) is None
            and issubclass(annotation, Settings))
