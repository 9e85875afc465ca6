"""What a study run records for the report, so that the report needs neither the spec nor a task.

The engine writes a ``StudyRecord`` as JSON in the study run's tag ``runs.STUDY_RECORD`` when
it opens the study (and again each time the sweep runs); the report reads it back. It holds the
sweep's objective (metric, direction, ``at``), each metric's better direction, the seeds, the
report options (the spec's ``report:`` section, ``ReportOptions``, defined here for both sides)
and the study's place, trial count and search space. The method label, fidelity and study name
are the layout's own tags.

A record longer than one tag value continues in ``STUDY_RECORD.1``, ``.2``, ...; the reader
parses the first JSON value of the joined parts, so parts left over from a longer earlier
record are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from workbench import runs
from workbench.validation import Strict

RECORD_VERSION = 1


class TargetSpec(Strict):
    metric: str
    value: float
    direction: Literal["minimize", "maximize"] = "maximize"


class ReportOptions(Strict):
    """What ``workbench report`` draws (all optional)."""

    x_axes: list[str] = ["step", "cost/samples", "cost/grad_evals", "time/wall_seconds"]
    metrics: list[str] | None = None  # learning curves; default: the objective's metric
    target: TargetSpec | None = None  # steps to reach it, per method
    aggregate: Literal["mean", "iqm", "median"] = "iqm"
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    resamples: int = Field(2000, ge=100, le=100_000)


class StudyRecord(BaseModel):
    """One study run's record (unknown keys, from a newer workbench, are ignored)."""

    model_config = ConfigDict(extra="ignore")

    version: int = RECORD_VERSION
    task: str
    metric: str  # the objective's metric
    direction: Literal["minimize", "maximize"]
    at: str  # where on the curve the objective is read: final, best or auc
    metric_directions: dict[str, str]  # every metric the task logs -> its better direction
    seeds: list[int]
    report: ReportOptions
    position: int  # the study's place among the sweep's studies: the report's row order
    trials: int  # the trials the study asks for
    space: dict[str, dict[str, Any]]  # name -> optuna.distributions.distribution_to_json, parsed

    def to_tags(self) -> dict[str, str]:
        text = self.model_dump_json()
        size = runs.TAG_VALUE_CHARS
        return {_part_key(i // size): text[i : i + size] for i in range(0, len(text), size)}

    @classmethod
    def from_tags(cls, tags: Mapping[str, Any]) -> StudyRecord | None:
        """The record in a run's tags; None when it has none (written by an older workbench).
        Raises ValueError (pydantic's ValidationError among them) on an unreadable one."""
        parts = []
        while isinstance(tags.get(_part_key(len(parts))), str):
            parts.append(tags[_part_key(len(parts))])
        if not parts:
            return None
        data, _ = json.JSONDecoder().raw_decode("".join(parts))
        return cls.model_validate(data)


def _part_key(index: int) -> str:
    return runs.STUDY_RECORD if index == 0 else f"{runs.STUDY_RECORD}.{index}"
