"""The sweep spec's schema: the pydantic models a YAML sweep spec (``sweeps/``) and a report
spec (``reports/``) must satisfy, key by key, before anything is resolved."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from workbench.common.validation import Strict, shorten
from workbench.store.study_record import ReportOptions
from workbench.testbeds import Budget

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"  # a sweep's or a report's name


class Range(Strict):
    """A search-space override: a numeric range or a list of choices."""

    low: float | None = None
    high: float | None = None
    log: bool | None = None
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Range:
        if self.choices is not None and (self.low is not None or self.high is not None):
            raise ValueError("give either low/high or choices, not both")
        if self.choices is not None and not self.choices:
            raise ValueError("choices must not be empty")
        return self


class MethodEntry(Strict):
    name: str
    label: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.=-]{0,59}$",
        description="names this entry in studies and reports (default: the method's name); "
                    "lets one method appear twice with different fixed values")
    fixed: dict[str, Any] = {}
    search_space: dict[str, Range | Literal["fixed"]] = {}


class TaskSpec(Strict):
    name: str
    params: dict[str, Any] = {}
    vary: dict[str, list[Any]] = Field(
        {}, description="task parameter -> its values: a study per value (per combination of "
                        "values, over several keys) of each method combination")


class SamplerSpec(Strict):
    name: Literal["tpe", "random", "grid", "cmaes"] = "tpe"
    seed: int = 0
    startup_trials: int = Field(10, ge=0, le=100_000, description="TPE/CMA-ES random start")
    grid_points: int = Field(5, ge=2, le=1000, description="points per numeric axis (grid)")


class PrunerSpec(Strict):
    name: Literal["median", "hyperband", "wilcoxon", "none"] = "median"
    startup_trials: int = Field(5, ge=0, description="trials before median pruning starts")
    p_threshold: float = Field(0.1, gt=0.0, lt=1.0, description="wilcoxon: prune below this "
                               "p-value of the signed-rank test against the best trial")
    startup_seeds: int = Field(2, ge=0, description="wilcoxon: seeds run before pruning")
    warmup_steps: int = Field(0, ge=0, description="report points before pruning starts")
    report_points: int = Field(10, ge=1, le=10_000, description="intermediate values per seed")
    reduction_factor: int = Field(3, ge=2, le=100, description="hyperband")


class ObjectiveSpec(Strict):
    metric: str | None = None
    direction: Literal["minimize", "maximize"] | None = None
    aggregate: Literal["mean", "iqm", "median"] = "mean"
    at: Literal["final", "best", "auc"] = "final"
    diverge_past: float | None = Field(
        None, description="a run whose metric goes past this (above when minimizing, below "
                          "when maximizing) ends early; its trial is pruned as diverged")


class AdaptiveSeeds(Strict):
    """Held-out seeds added in rounds until the best method's interval separates from the
    second's (the report's aggregate and confidence), or ``max`` are used."""

    min: int = Field(5, ge=2, le=10_000, description="seeds of the first round")
    max: int = Field(30, ge=2, le=10_000, description="seeds at most")
    step: int | None = Field(None, ge=1, le=10_000, description="seeds per later round "
                                                                "(default: min)")
    until: Literal["separated"] = "separated"

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveSeeds:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        return self


class EvaluationSpec(Strict):
    """Re-run each study's best trial on seeds never used for tuning."""

    seeds: int | AdaptiveSeeds = Field(description="how many held-out seeds, or {min, max, "
                                                   "step, until: separated}")
    first_seed: int = Field(1000, ge=0, le=2**31 - 1, description="held-out seeds are the "
                            "first integers from here that are not tuning seeds")

    @field_validator("seeds")
    @classmethod
    def _count(cls, value):
        if isinstance(value, int) and not 1 <= value <= 10_000:
            raise ValueError("a held-out seed count must be between 1 and 10000")
        return value


class ExecutionSpec(Strict):
    """How a trial runs its seeds: one after another, or as one computation with a leading seed
    axis (``Task.run_seeds``; each seed still its own run with its own metrics)."""

    seeds: Literal["sequential", "vectorised", "auto"] = Field(
        "sequential", description="vectorised: every study must support it; auto: vectorised "
                                  "where the task and each method of the study do")


class LauncherSpec(Strict):
    """What starts the sweep's workers: local processes (``--workers N``) or Ray tasks placed on
    a Ray cluster by resources (``workbench.engine.ray_launcher``). Neither changes a number:
    not part of a study's fingerprint."""

    name: Literal["local", "ray"] = "local"
    address: str | None = Field(None, description="ray: auto, HOST:PORT or ray://HOST:PORT; "
                                                  "none: a local Ray cluster for the call")
    workers: int | None = Field(None, ge=1, le=100_000, description="ray: workers (default: "
                                "as many as the cluster's CPUs or GPUs hold)")
    cpus_per_worker: float = Field(1.0, gt=0, le=1024)
    gpus_per_worker: float = Field(0.0, ge=0, le=64, description="fractions below 1 share a "
                                   "GPU, as Ray allows")
    max_restarts: int = Field(3, ge=0, le=1000, description="ray: how often a worker whose "
                              "process or node died is started again")

    @field_validator("gpus_per_worker")
    @classmethod
    def _whole_above_one(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError("above 1, a whole number of GPUs (Ray places fractions below 1)")
        return value


class SweepSpec(Strict):
    name: str | None = Field(None, pattern=NAME_PATTERN)
    description: str = ""
    task: TaskSpec
    methods: dict[str, Literal["all"] | list[str | MethodEntry]]
    seeds: int | list[int] = 3
    trials: int = Field(10, ge=1, le=1_000_000)
    max_failed_trials: int = Field(3, ge=1, le=1_000_000,
                                   description="a study whose method raised this often stops")
    retry_crashed: bool = Field(True, description="rerun, with the same parameters, a trial "
                                                  "whose worker died (killed, out of memory)")
    sampler: SamplerSpec = SamplerSpec()
    pruner: PrunerSpec = PrunerSpec()
    objective: ObjectiveSpec = ObjectiveSpec()
    budget: Budget = Budget()
    device: Literal["auto", "cpu", "cuda"] = "auto"
    storage: str | None = None
    artifact_root: str | None = Field(None, description="where every host's workers put "
                                      "artifacts (workbench.store.artifacts)")
    launcher: LauncherSpec = LauncherSpec()
    report: ReportOptions = ReportOptions()
    evaluation: EvaluationSpec | None = None
    execution: ExecutionSpec = ExecutionSpec()

    @field_validator("sampler", "pruner", "launcher", mode="before")
    @classmethod
    def _name_only(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("artifact_root")
    @classmethod
    def normalised_artifact_root(cls, value: str | None) -> str | None:
        return None if value is None else normalised_artifact_root(value)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: int | list[int]) -> int | list[int]:
        if isinstance(value, int) and not 1 <= value <= 10_000:
            raise ValueError("a seed count must be between 1 and 10000")
        if isinstance(value, list):
            if not value:
                raise ValueError("the seed list must not be empty")
            if max(value) > MAX_SEED:
                raise ValueError(f"seeds must be at most {MAX_SEED}")
            if len(set(value)) != len(value):
                raise ValueError("seeds must be distinct")
            if min(value) < 0:
                raise ValueError("seeds must be non-negative")
        return value

    @field_validator("methods")
    @classmethod
    def _some_methods(cls, value: dict) -> dict:
        if not value:
            raise ValueError("name at least one slot with methods")
        for slot, entries in value.items():
            if isinstance(entries, list) and not entries:
                raise ValueError(f"slot {shorten(slot)} lists no methods")
        return value


def normalised_artifact_root(value: str) -> str:
    from workbench.store.artifacts import BadArtifactRoot, normalise_root

    try:
        return normalise_root(value)
    except BadArtifactRoot as err:
        raise ValueError(str(err)) from None


MAX_SEED = 2**31 - 1


class ReportFile(Strict):
    """A report spec in ``reports/``: several sweeps drawn together."""

    name: str = Field(pattern=NAME_PATTERN)
    sweeps: list[str] = Field(min_length=1)
    report: ReportOptions = ReportOptions()


