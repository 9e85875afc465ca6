"""When a run stops (``Budget``) and how it reports a step (``LogFn``): the bottom-layer types
every testbed's loop and the engine share."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from pydantic import Field, model_validator

from workbench.common.validation import Strict

# ``log(step, metrics)``: records one step's metrics. It may raise to stop the run (the engine's
# ``StopRun`` when the trial is pruned or diverged); a loop lets that propagate.
LogFn = Callable[[int, Mapping[str, float]], None]

# ``log(step, per_seed)``: the same for the S seeds of a trial run as one computation
# (``Task.run_seeds``): seed i's metrics, or None once seed i has stopped.
SeedsLogFn = Callable[[int, Sequence[Mapping[str, float] | None]], None]


MAX_STEPS = 10_000_000


class Budget(Strict):
    """When a run stops: whichever limit comes first (steps is always set: 100 by default,
    or ``MAX_STEPS`` when ``samples`` or ``wall_seconds`` is given without it, so that a
    budget in samples is not also cut at 100 steps)."""

    steps: int = Field(100, ge=1, le=MAX_STEPS)
    samples: int | None = Field(None, ge=1)
    wall_seconds: float | None = Field(None, gt=0)

    key_synonyms: ClassVar[dict[str, str]] = {
        **dict.fromkeys(("env_steps", "environment_steps", "timesteps", "total_timesteps",
                         "frames", "transitions", "examples"), "samples"),
        **dict.fromkeys(("updates", "iterations", "iters", "gradient_steps"), "steps"),
        **dict.fromkeys(("time", "seconds", "wall_time", "walltime", "time_limit"),
                        "wall_seconds"),
    }

    @model_validator(mode="before")
    @classmethod
    def _steps_unbounded_beside_another_limit(cls, data):
        if (isinstance(data, dict) and "steps" not in data
                and (data.get("samples") is not None or data.get("wall_seconds") is not None)):
            return {**data, "steps": MAX_STEPS}
        return data

    def spent(self, samples: int, seconds: float) -> bool:
        """Whether ``samples`` or ``seconds`` used so far reach their limit (steps are the
        loop's own count)."""
        return ((self.samples is not None and samples >= self.samples)
                or (self.wall_seconds is not None and seconds >= self.wall_seconds))

    def planned_steps(self, batch: int) -> int:
        """Steps the budget allows at ``batch`` samples each: the horizon schedules use."""
        if self.samples is None:
            return self.steps
        return max(1, min(self.steps, math.ceil(self.samples / batch)))
