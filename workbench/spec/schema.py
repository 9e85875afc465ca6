"""The sweep spec's schema: the pydantic models a YAML sweep spec (``sweeps/``) and a report
spec (``reports/``) must satisfy, key by key, before anything is resolved."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from workbench.common.validation import Strict, shorten
from workbench.store.study_record import ReportOptions
from workbench.testbeds import Budget

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"  # a sweep's or a report's name

# --------------------------------------------------------------------- the store's limits
# What MLflow's and Optuna's tables (their installed versions) hold, where a spec's value ends
# up in them. A value past one is refused by the spec check, with the limit in the message,
# before anything is written (SQLite ignores a column's length; PostgreSQL refuses the row;
# MLflow refuses or silently cuts some values itself). tests/test_bad_input_battery.py checks
# each number against the installed packages.
#
#   spec value                        where it goes                         limit
#   name (or the file's name)         experiment name (MLflow)              NAME_PATTERN: 100
#                                     experiments.name VARCHAR(256); MLflow's check: 500
#   description                       experiment tag mlflow.note.content    20,000 (MLflow's
#                                     MAX_EXPERIMENT_TAG_VAL_LENGTH)
#   methods' labels, task.vary values the study's label: run names          STUDY_LABEL_CHARS
#                                     (runs.name VARCHAR(250), the label    (250 less the
#                                     plus at most RUN_NAME_SUFFIX_CHARS),  suffix)
#                                     tags (VARCHAR(8000))
#   fixed values, task.params,        run params (MAX_PARAM_VAL_LENGTH)     6,000 characters
#   search-space choices, task.vary   as text (``str``); NUL nowhere        of text
#   artifact_root (with the name)     an experiment's artifact location     2,048 (MLflow's
#                                     (MLFLOW_ARTIFACT_LOCATION_MAX_LENGTH)  default)
#                                     runs.artifact_uri VARCHAR(200) on a    200 (PostgreSQL)
#                                     server store: location + /RUN_ID/artifacts
#   (methods: registered names)       Optuna's study name                   512 (Optuna's
#                                     (studies.study_name VARCHAR(512))     MAX_INDEXED_STRING_
#                                                                           LENGTH)
MLFLOW_EXPERIMENT_NAME_CHARS = 256  # experiments.name VARCHAR(256)
MLFLOW_EXPERIMENT_TAG_CHARS = 20_000  # mlflow.utils.validation.MAX_EXPERIMENT_TAG_VAL_LENGTH
MLFLOW_RUN_NAME_CHARS = 250  # runs.name VARCHAR(250)
MLFLOW_TAG_CHARS = 8000  # MAX_TAG_VAL_LENGTH, tags.value VARCHAR(8000)
MLFLOW_PARAM_CHARS = 6000  # MAX_PARAM_VAL_LENGTH
MLFLOW_ARTIFACT_LOCATION_CHARS = 2048  # MLFLOW_ARTIFACT_LOCATION_MAX_LENGTH's default
MLFLOW_RUN_ARTIFACT_URI_CHARS = 200  # runs.artifact_uri VARCHAR(200)
RUN_ARTIFACT_SUFFIX_CHARS = len("/0123456789abcdef0123456789abcdef/artifacts")
OPTUNA_STUDY_NAME_CHARS = 512  # optuna.storages._rdb.models.MAX_INDEXED_STRING_LENGTH
# The longest text the engine adds to a study's label in a run's name: `` (trials in sweep
# NAME)`` with another sweep's name of up to 100 characters, `` t123456 s2147483647 | loss=
# -1.234e+308`` for a seed run.
RUN_NAME_SUFFIX_CHARS = len(" (trials in sweep )") + 100
STUDY_LABEL_CHARS = MLFLOW_RUN_NAME_CHARS - RUN_NAME_SUFFIX_CHARS


def store_text_problem(value: Any, limit: int = MLFLOW_PARAM_CHARS,
                       where: str = "an MLflow param value") -> str | None:
    """Why ``value``'s text (``str(value)``, as a run's param stores it) does not fit the store:
    longer than ``limit`` characters, or holding a NUL character; None when it fits."""
    text = value if isinstance(value, str) else str(value)
    if "\x00" in text:
        return ("holds a NUL character (\\x00), which the store's text columns cannot hold "
                "(PostgreSQL refuses it); allowed: text without NUL")
    if len(text) > limit:
        return (f"{len(text):,} characters as text; allowed: at most {limit:,} ({where} "
                "holds no more)")
    return None


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
    description: str = Field("", description="shown by the MLflow UI on the sweep's "
                             "experiment (its tag mlflow.note.content)")
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

    @field_validator("storage")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("empty; allowed: sqlite:///FILE, postgresql://USER@HOST/DB (or "
                             "no storage key: ./workbench.db)")
        return value

    @field_validator("description")
    @classmethod
    def _fits_an_experiment_tag(cls, value: str) -> str:
        why = store_text_problem(value, MLFLOW_EXPERIMENT_TAG_CHARS,
                                 "MLflow's experiment tag, where the description is kept,")
        if why is not None:
            raise ValueError(why)
        return value

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
            if len(value) > 10_000:
                raise ValueError(f"{len(value)} seeds; allowed: at most 10000 (as a count)")
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


def artifact_root_problem(root: str, name: str, server: bool) -> str | None:
    """Why the sweep ``name``'s artifacts cannot go under the normalised ``root``: its
    experiment's location past MLflow's limit, or (``server``: a PostgreSQL store, which
    enforces column lengths) a run's artifact URI past ``runs.artifact_uri``; None when
    they fit."""
    from workbench.store.artifacts import experiment_location

    location = experiment_location(root, name)
    if len(location) > MLFLOW_ARTIFACT_LOCATION_CHARS:
        return (f"the experiment's artifact location {location[:80]}... is {len(location):,} "
                f"characters; allowed: at most {MLFLOW_ARTIFACT_LOCATION_CHARS:,} (MLflow's "
                "limit): a shorter root")
    longest = MLFLOW_RUN_ARTIFACT_URI_CHARS - RUN_ARTIFACT_SUFFIX_CHARS
    if server and len(location) > longest:
        return (f"the experiment's artifact location {location[:80]}... is {len(location):,} "
                f"characters; allowed on a PostgreSQL store: at most {longest} (MLflow's "
                f"runs.artifact_uri holds {MLFLOW_RUN_ARTIFACT_URI_CHARS}, with "
                f"/RUN_ID/artifacts): a shorter root or sweep name")
    return None


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


