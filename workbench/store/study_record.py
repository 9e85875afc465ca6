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

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workbench.common.validation import Strict
from workbench.store import runs

RECORD_VERSION = 1
LINE_STYLES = ("-", "--", ":", "-.")  # a split figure's line per condition


class TargetSpec(Strict):
    metric: str
    value: float
    direction: Literal["minimize", "maximize"] = "maximize"


class RateSpec(Strict):
    """A curve to fit per seed (``rates`` figure): ``metric`` against ``x`` (``step``, a cost
    axis, or any other metric, joined as of each step ``metric`` is logged at) over ``window``
    of x, by ``model``: ``power`` ``metric`` ~ C ``x``^a (the default), ``exponential``
    ``metric`` = -a exp(``x``) + b (Cui et al. 2025's R = -a e^H + b) or ``affine``
    ``metric`` = a ``x`` + b."""

    metric: str
    x: str = "step"
    window: tuple[float, float]
    model: Literal["power", "exponential", "affine"] = "power"  # stats.claims.FIT_MODELS

    @model_validator(mode="after")
    def _window_in_order(self) -> RateSpec:
        low, high = self.window
        if self.model == "power" and not 0 < low < high:
            raise ValueError(f"window must be [low, high] with 0 < low < high (a power law is "
                             f"fitted on log x), not {list(self.window)}")
        if not low < high:
            raise ValueError(f"window must be [low, high] with low < high, not "
                             f"{list(self.window)}")
        return self


class SplitSpec(Strict):
    """A metric split by a condition: the curves of ``metric``_``by[i]`` (``split`` figure)."""

    metric: str
    by: list[str] = Field(min_length=1, max_length=len(LINE_STYLES))
    x: str = "step"

    def names(self) -> list[str]:
        return [f"{self.metric}_{part}" for part in self.by]


class ReportOptions(Strict):
    """What ``workbench report`` draws (all optional)."""

    x_axes: list[str] = ["step", "cost/samples", "cost/grad_evals", "time/wall_seconds"]
    metrics: list[str] | None = None  # learning curves; default: the objective's metric
    target: TargetSpec | None = None  # steps to reach it, per method
    aggregate: Literal["mean", "iqm", "median"] = "iqm"
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    resamples: int = Field(2000, ge=100, le=100_000)
    rates: list[RateSpec] = []  # a curve fitted per seed, its parameters' interval over seeds
    log_axes: dict[str, list[Literal["x", "y"]]] = {}  # learning-curve metric -> log axes
    split: list[SplitSpec] = []  # a metric's curves split by a condition


class EvaluationPlan(BaseModel):
    """Held-out evaluation of each study's best trial (the spec's ``evaluation:``, resolved):
    the seeds it may use, in order, disjoint from the tuning seeds; ``first`` of them in the
    first round, which is all when ``rule`` is ``fixed``; with ``separated``, ``step`` more per
    round until the best method's interval separates from the second's, or all are used."""

    model_config = ConfigDict(extra="ignore")

    seeds: list[int]
    rule: Literal["fixed", "separated"] = "fixed"
    first: int
    step: int = 1


class EvaluationOutcome(BaseModel):
    """How many held-out seeds the sweep used and why (on the sweep's experiment, tag
    ``runs.EVALUATION``): ``fixed`` (as many as asked), ``separated`` (the best method's
    interval separated from the second's), ``maximum`` (all seeds used without that), or
    ``incomplete`` (some evaluation failed or still runs)."""

    model_config = ConfigDict(extra="ignore")

    seeds: int
    reason: Literal["fixed", "separated", "maximum", "incomplete"]
    best: str | None = None
    second: str | None = None


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
    evaluation: EvaluationPlan | None = None  # held-out seeds, when the sweep asks for them
    # name -> (low, high), None unbounded: ranges the task knows beyond the vocabulary's
    # (``Task.metric_bounds``); the report's intervals stay inside both
    metric_bounds: dict[str, tuple[float | None, float | None]] = {}

    def to_tags(self) -> dict[str, str]:
        return runs.split_tag(runs.STUDY_RECORD, self.model_dump_json())

    @classmethod
    def from_tags(cls, tags: Mapping[str, Any]) -> StudyRecord | None:
        """The record in a run's tags; None when it has none (written by an older workbench).
        Raises ValueError (pydantic's ValidationError among them) on an unreadable one."""
        text = runs.joined_tag(tags, runs.STUDY_RECORD)
        if text is None:
            return None
        data, _ = json.JSONDecoder().raw_decode(text)
        return cls.model_validate(data)
