"""Sweep specs: YAML files in ``sweeps/``, validated with pydantic, resolved into studies; and
report specs (``reports/``), which name sweep specs.

Every problem with a spec becomes one ``SpecError`` naming the file, the key path and what is
allowed; nothing is written before a spec has passed (see ``load``).
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import optuna.distributions as od
import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from workbench import fingerprint, metrics, registry, yamlsafe
from workbench.hyperparams import HyperparameterError
from workbench.store import redact
from workbench.study_record import EvaluationPlan, ReportOptions, StudyRecord
from workbench.testbeds import Budget, Task, get_task
from workbench.validation import SpecError, Strict, did_you_mean, shorten, validate

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
                                      "artifacts (workbench.artifacts)")
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
    def _artifact_root(cls, value: str | None) -> str | None:
        return None if value is None else _artifact_root(value)

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


def _artifact_root(value: str) -> str:
    from workbench.artifacts import BadArtifactRoot, normalise_root

    try:
        return normalise_root(value)
    except BadArtifactRoot as err:
        raise ValueError(str(err)) from None


# ----------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class MethodChoice:
    """One method in one slot, with its fixed values and search space."""

    slot: str
    cls: type[registry.Method]
    fixed: dict[str, Any]
    space: dict[str, od.BaseDistribution]
    implicit: bool = False  # the task's default for a slot the spec does not name
    name: str | None = None  # the entry's label, when the spec gives one

    @property
    def label(self) -> str:
        return self.name or self.cls.name


@dataclass(frozen=True)
class StudyPlan:
    """One Optuna study: a method per slot. ``document`` holds everything that determines its
    results (``workbench.fingerprint``); its digest, ``fingerprint``, names the study, so an
    identical study is the same one in any sweep, and a changed one is a new study."""

    name: str
    methods: tuple[MethodChoice, ...]
    n_trials: int
    fingerprint: str = ""
    document: dict = field(default_factory=dict, compare=False, repr=False)
    vectorised: bool = False  # its trials run their seeds on a seed axis (``execution``)
    task_params: Any = field(default=None, compare=False, repr=False)  # the task's Params
    varied: tuple[tuple[str, Any], ...] = ()  # (parameter, value) of each ``task.vary`` key

    @property
    def label(self) -> str:
        """Each named slot's method label, joined by ``+``; then ``, KEY=VALUE`` of each
        varied task parameter (``adam, num_envs=64``)."""
        return with_varied("+".join(m.label for m in self.methods if not m.implicit),
                           self.varied)

    @property
    def display(self) -> str:
        """``SLOT=LABEL`` of each slot the spec names, joined by ``+``; then ``, KEY=VALUE``
        of each varied task parameter."""
        return with_varied("+".join(f"{m.slot}={m.label}" for m in self.methods
                                    if not m.implicit), self.varied)

    @property
    def combination(self) -> dict[str, str]:
        return {m.slot: m.cls.name for m in self.methods}

    def search_space(self) -> dict[str, od.BaseDistribution]:
        """Optuna parameter name ``slot.hyperparameter`` -> distribution."""
        return {f"{m.slot}.{k}": d for m in self.methods for k, d in m.space.items()}

    def grid(self, points: int) -> dict[str, list]:
        return {
            f"{m.slot}.{k}": m.cls.hyperparameters[k].grid(d, points)
            for m in self.methods for k, d in m.space.items()
        }


def with_varied(label: str, varied) -> str:
    """``label`` followed by ``, KEY=VALUE`` for each (key, value) of ``varied``, values as
    JSON writes them (``16``, ``0.1``, ``true``), strings bare."""
    shown = [f"{key}={value if isinstance(value, str) else json.dumps(value)}"
             for key, value in varied]
    return ", ".join([label, *shown])


@dataclass
class Sweep:
    """A checked spec, ready for the engine. ``task_params`` are the task's parameters
    without ``task.vary``; each study's own are its plan's (``params_of``)."""

    spec: SweepSpec
    name: str
    source: str
    task: type[Task]
    task_params: Any
    seeds: list[int]
    metric: str
    direction: str
    studies: list[StudyPlan]
    storage: str
    notes: list[str] = field(default_factory=list)
    evaluation: EvaluationPlan | None = None  # held-out seeds (``evaluation_plan``)

    @property
    def artifact_root(self) -> str | None:
        """The normalised artifact root every host reaches, None for the store's own folder."""
        return self.spec.artifact_root

    def with_artifact_root(self, value: str) -> Sweep:
        """This sweep with the artifact root ``value`` (``--artifact-root``)."""
        try:
            root = _artifact_root(value)
        except ValueError as err:
            raise SpecError("--artifact-root", "", str(err)) from None
        return replace(self, spec=self.spec.model_copy(update={"artifact_root": root}))

    @property
    def task_name(self) -> str:
        return self.task.name

    @property
    def max_failed_trials(self) -> int:
        return self.spec.max_failed_trials

    @property
    def report(self) -> ReportOptions:
        return self.spec.report

    def params_of(self, plan: StudyPlan) -> Any:
        """The task parameters ``plan``'s study runs with (``task.vary`` applied)."""
        return self.task_params if plan.task_params is None else plan.task_params

    def title(self, plan: StudyPlan) -> str:
        """The study's readable name in this sweep, for messages: ``SWEEP.SLOT=LABEL[+...]``
        (the Optuna study's name is its fingerprint's)."""
        return f"{self.name}.{plan.display}"

    def on_device(self, kind: str) -> Sweep:
        """This sweep with its studies keyed for runs on device kind ``kind`` (``cpu`` or
        ``cuda``; ``device_kind``): itself when they already are."""
        if all(plan.document.get("device") == kind for plan in self.studies):
            return self
        studies = []
        for plan in self.studies:
            document = {**plan.document, "device": kind}
            digest = fingerprint.digest(document)
            studies.append(replace(plan, name=study_name(self.task.name, plan.methods, digest),
                                   fingerprint=digest, document=document))
        return replace(self, studies=studies)

    def record_tags(self, plan: StudyPlan) -> dict[str, str]:
        """The tags of ``plan``'s study run that the report reads instead of this spec
        (``workbench.study_record``)."""
        record = StudyRecord(
            task=self.task.name, metric=self.metric, direction=self.direction,
            at=self.spec.objective.at, metric_directions=dict(self.task.metrics),
            seeds=self.seeds, report=self.spec.report, position=self.studies.index(plan),
            trials=plan.n_trials,
            space={name: json.loads(od.distribution_to_json(dist))
                   for name, dist in plan.search_space().items()},
            evaluation=self.evaluation,
            metric_bounds=self.task.metric_bounds(self.task_params))
        return record.to_tags()


MAX_SEED = 2**31 - 1


def read_yaml(path: str | Path) -> Any:
    """The mapping in a YAML file; any problem is one SpecError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), "", "no such file")
    try:
        data = yamlsafe.load(path.read_text())
    except yamlsafe.Refused as err:
        raise SpecError(str(path), err.path, err.message) from None
    except yaml.YAMLError as err:
        raise SpecError(str(path), "", f"not valid YAML: {err}") from None
    except UnicodeDecodeError:
        raise SpecError(str(path), "", "not a UTF-8 text file") from None
    except (ValueError, TypeError, LookupError, AttributeError, OverflowError) as err:
        # PyYAML raises these for values it cannot build (!!int x, a date 2020-13-45)
        raise SpecError(str(path), "", f"a value YAML cannot build: {err}") from None
    if not isinstance(data, dict):
        raise SpecError(str(path), "", "the top level must be a mapping of keys to values")
    return data


def default_storage() -> str:
    return "sqlite:///" + str(Path("workbench.db").resolve())


def normalise_storage(url: str, source: str, path: str) -> str:
    """An absolute SQLite path (workers may start elsewhere); other URLs as given."""
    if url.startswith("sqlite:///"):
        rest = url.removeprefix("sqlite:///")
        if not rest or rest == ":memory:":
            raise SpecError(source, path, "an in-memory SQLite store cannot be shared; name a file")
        try:
            return "sqlite:///" + str(Path(rest).expanduser().resolve())
        except (ValueError, RuntimeError, OSError) as err:
            raise SpecError(source, path, f"not a usable file path: {err}") from None
    if re.match(r"^postgresql(\+psycopg2)?://", url):
        # SQLAlchemy 2.1 defaults to psycopg 3; the workbench installs psycopg2
        return re.sub(r"^postgresql(\+psycopg2)?://", "postgresql+psycopg2://", url)
    raise SpecError(source, path, f"unsupported storage {shorten(redact(url))}; allowed: "
                    "sqlite:///FILE, postgresql://USER@HOST/DB")


def load(path: str | Path, storage: str | None = None, device: str | None = None) -> Sweep:
    """Read and check a spec; ``storage`` and ``device`` (from the command line) override the
    spec's."""
    source = str(path)
    return check(read_yaml(path), source, Path(path).stem, storage=storage, device=device)


def check(data: dict, source: str, default_name: str = "sweep", storage: str | None = None,
          device: str | None = None) -> Sweep:
    """A spec's mapping validated and resolved; a SpecError with every problem of both."""
    try:
        spec = validate(SweepSpec, data, source)
    except SpecError as err:
        raise _with_resolution_problems(err, data, source, default_name, storage) from None
    return resolve(spec, source, default_name=default_name, storage=storage, device=device)


def _suggesting(message: str, name, known) -> str:
    """``...; allowed: ...`` with ``did you mean ...?`` before the allowed values."""
    return message.replace("; allowed:", f"; {did_you_mean(name, known)}allowed:", 1)


def _with_resolution_problems(err: SpecError, data: dict, source: str, default_name: str,
                              storage: str | None) -> SpecError:
    """``err`` (the spec's structural problems) with what resolving the rest finds too: the
    keys with problems are dropped (back to their defaults) and the remainder resolved, so
    an unknown method and a misspelt pruner are both reported in one run."""
    broken = {re.split(r"[.\[]", path, maxsplit=1)[0] for path, _ in err.problems}
    if not broken or broken & {"task", "methods", ""}:
        return err
    try:
        rest = SweepSpec.model_validate({k: v for k, v in data.items() if k not in broken})
        resolve(rest, source, default_name, storage)
    except SpecError as more:
        return SpecError.of([err, more])
    except (ValidationError, ValueError, LookupError):
        return err
    return err


def resolve(spec: SweepSpec, source: str, default_name: str = "sweep",
            storage: str | None = None, device: str | None = None) -> Sweep:
    """The checked spec resolved into studies; a SpecError with every problem found (the
    task's name is needed before its slots and parameters can be checked)."""
    problems: list[SpecError] = []
    name = spec.name or default_name
    if not re.match(NAME_PATTERN, name):
        problems.append(SpecError(source, "name", f"{shorten(name)}: allowed: a letter or "
                                  "digit, then up to 99 of [A-Za-z0-9_.-] (the file name when "
                                  "name is unset)"))
    try:
        task = get_task(spec.task.name)
    except LookupError as err:
        from workbench.testbeds import TASKS

        raise SpecError.of([*problems, SpecError(
            source, "task.name", _suggesting(str(err), spec.task.name, TASKS))]) from None
    task_params = None
    try:
        task_params = validate(task.Params, spec.task.params, source, prefix="task.params")
    except SpecError as err:
        problems.append(err)
    variants = task_variants(source, task, spec.task, task_params, problems)

    metric = spec.objective.metric or task.default_objective
    if metric not in task.metrics:
        problems.append(SpecError(source, "objective.metric", f"task {task.name} has no metric "
                                  f"{shorten(metric)}; {did_you_mean(metric, task.metrics)}"
                                  f"allowed: " + ", ".join(task.metrics)))
    direction = spec.objective.direction or task.metrics.get(metric, "minimize")
    asked = spec.report
    named = [(f"report.metrics[{i}]", curve) for i, curve in enumerate(asked.metrics or [])]
    named += [(f"report.rates[{i}].metric", r.metric) for i, r in enumerate(asked.rates)]
    named += [(f"report.log_axes.{curve}", curve) for curve in asked.log_axes]
    named += [(f"report.split[{i}]", name) for i, s in enumerate(asked.split)
              for name in s.names()]
    for where, curve in named:
        # a curve may be any name of the vocabulary, not only an objective candidate
        if curve not in task.metrics and not metrics.is_known(curve):
            known = [*task.metrics, *metrics.VOCABULARY]
            problems.append(SpecError(source, where, f"no metric "
                                      f"{shorten(curve)} in the vocabulary; "
                                      f"{did_you_mean(curve, known)}allowed: a name of README's "
                                      f"metrics table (workbench/metrics.py) that task "
                                      f"{task.name} logs, e.g. " + ", ".join(task.metrics)))

    notes: list[str] = []
    per_slot: list[list[MethodChoice]] = []
    for slot, entries in spec.methods.items():
        if slot not in task.slots:
            problems.append(SpecError(source, f"methods.{slot}",
                                      f"task {task.name} has no slot {shorten(slot)}; "
                                      f"{did_you_mean(slot, task.slots)}allowed: "
                                      + ", ".join(task.slots)))
            continue
        per_slot.append(_resolve_slot(source, task, slot, entries, notes, problems))
    for slot in task.slots:
        if slot in spec.methods:
            continue
        if slot not in task.default_methods:
            problems.append(SpecError(source, f"methods.{slot}",
                                      f"task {task.name} needs methods for slot {slot!r}"))
            continue
        default = registry.get(slot, task.default_methods[slot])
        per_slot.append([MethodChoice(slot, default, {}, {}, implicit=True)])
    if not problems:
        seen = set()
        for choice in (c for choices in per_slot for c in choices):
            for varied, params in variants:
                found = task.method_problem(params, choice.cls)
                if found is None or found in seen:
                    continue
                seen.add(found)
                where = "task.vary" if found[0] in dict(varied) else "task.params"
                problems.append(SpecError(source, f"{where}.{found[0]}", found[1]))
    if not problems:
        said = set()
        for _, params in variants:
            for found in _never_logged(source, task, params, metric, per_slot):
                if str(found) not in said:
                    said.add(str(found))
                    problems.append(found)
    if problems:
        raise SpecError.of(problems)

    seeds = list(range(spec.seeds)) if isinstance(spec.seeds, int) else list(spec.seeds)
    kind = device_kind(device or spec.device)
    studies, by_fingerprint = [], {}
    for combo, (varied, params) in itertools.product(itertools.product(*per_slot), variants):
        label = with_varied("+".join(f"{m.slot}={m.label}" for m in combo if not m.implicit),
                            varied)
        shown = f"{name}.{label}"  # Sweep.title
        vectorised = _seed_mode(spec, task, params, combo, shown, source, notes)
        document = fingerprint_document(spec, task, params, metric, direction,
                                        combo, kind, vectorised)
        digest = fingerprint.digest(document)
        if digest in by_fingerprint:
            raise SpecError(source, "methods",
                            f"{by_fingerprint[digest]} and {label} are the same study (the "
                            "same methods, fixed values and search spaces): drop one")
        by_fingerprint[digest] = label
        plan = StudyPlan(study_name(task.name, combo, digest), tuple(combo), spec.trials,
                         digest, document, vectorised, params, varied)
        if not plan.search_space() and spec.trials > 1:
            notes.append(f"{shown}: nothing to tune; running 1 trial")
            plan = replace(plan, n_trials=1)
        elif spec.sampler.name == "grid":
            size = math.prod(len(v) for v in plan.grid(spec.sampler.grid_points).values())
            if size < spec.trials:
                notes.append(f"{shown}: the grid has {size} points; running {size} trials")
                plan = replace(plan, n_trials=size)
        studies.append(plan)

    url = storage if storage is not None else spec.storage
    url = normalise_storage(url, "--storage" if storage else source,
                            "" if storage else "storage") if url else default_storage()
    return Sweep(spec, name, source, task, task_params, seeds, metric, direction, studies,
                 url, notes, evaluation_plan(spec.evaluation, seeds))


MAX_VARIED = 256  # combinations of ``task.vary`` values in one sweep


def task_variants(source: str, task: type[Task], spec: TaskSpec, base, problems: list
                  ) -> list[tuple[tuple[tuple[str, Any], ...], Any]]:
    """Each combination of the values of ``task.vary`` (their product, in the spec's order)
    as (((key, value as JSON dumps it), ...), the task's Params with them); one with no key
    varied and ``base`` (``task.params`` checked; None when it failed) without ``vary``.
    Problems go to ``problems``: a key that is no parameter of the task or is also in
    ``params``, an empty list, a value the parameter does not allow, one listed twice."""
    fields = task.Params.model_fields
    combinations = math.prod(len(values) for values in spec.vary.values())
    if combinations > MAX_VARIED:
        problems.append(SpecError(source, "task.vary", f"{combinations:,} combinations of "
                                  f"values, each a study; allowed: at most {MAX_VARIED}"))
        return [((), base)]
    axes: list[list[tuple[str, Any]]] = []
    for key, values in spec.vary.items():
        where = f"task.vary.{key}"
        if key not in fields:
            problems.append(SpecError(source, where, f"task {task.name} has no parameter "
                                      f"{shorten(key)}; {did_you_mean(key, fields)}allowed: "
                                      + ", ".join(sorted(fields))))
        elif key in spec.params:
            problems.append(SpecError(source, where, "is also in task.params; allowed: one "
                                      "value there, or a list of values here"))
        elif not values:
            problems.append(SpecError(source, where, "an empty list; allowed: a list of the "
                                      "values to compare"))
        elif base is not None:
            axes.append(_axis(source, task, spec, key, values, problems))
    if base is None or len(axes) < len(spec.vary):
        return [((), base)]
    variants = []
    for varied in itertools.product(*axes):
        try:
            params = validate(task.Params, {**spec.params, **dict(varied)}, source)
        except SpecError as err:  # the values pass one at a time, not together
            shown = ", ".join(f"{k}={shorten(v)}" for k, v in varied)
            problems.append(SpecError(source, "task.vary", f"{shown}: {err.message}"))
            continue
        dumped = params.model_dump(mode="json")
        variants.append((tuple((k, dumped[k]) for k, _ in varied), params))
    return variants or [((), base)]


def _axis(source: str, task: type[Task], spec: TaskSpec, key: str, values: list,
          problems: list) -> list[tuple[str, Any]]:
    """``(key, value)`` of each of ``values`` that the task's Params take with
    ``task.params``; a problem for each other one, and for each listed twice."""
    axis, seen = [], {}
    for i, value in enumerate(values):
        where = f"task.vary.{key}[{i}]"
        try:
            params = validate(task.Params, {**spec.params, key: value}, source,
                              prefix="task.params")
        except SpecError as err:
            for path, message in err.problems:
                mine = path in (f"task.params.{key}", "task.params")
                problems.append(SpecError(source, where, message if mine
                                          else f"{path}: {message}"))
            continue
        checked = params.model_dump(mode="json")[key]
        if json.dumps(checked) in seen:
            problems.append(SpecError(source, where, f"{shorten(value)} is listed twice "
                                      f"(as {key}[{seen[json.dumps(checked)]}]); allowed: "
                                      "distinct values"))
            continue
        seen[json.dumps(checked)] = i
        axis.append((key, value))
    return axis


def _never_logged(source: str, task: type[Task], task_params, metric: str,
                  per_slot: list[list[MethodChoice]]) -> list[SpecError]:
    """The studies whose runs would never log the objective ``metric`` (each trial pruned for
    nothing, an empty report): one error naming them and why (``Task.objective_problem``)."""
    why_studies: dict[str, list[str]] = {}
    for combo in itertools.product(*per_slot):
        chosen = {m.slot: (m.cls, m.cls.resolve(m.fixed)) for m in combo}
        why = task.objective_problem(task_params, metric, chosen)
        if why is not None:
            label = "+".join(m.label for m in combo if not m.implicit) or task.name
            why_studies.setdefault(why, []).append(label)
    return [SpecError(source, "objective.metric", f"{metric} is never logged by the "
                      f"stud{'y' if len(labels) == 1 else 'ies'} {', '.join(labels)}: {why}; "
                      "choose another metric or methods that log it")
            for why, labels in why_studies.items()]


def seed_axis_problem(spec: SweepSpec, task: type[Task], task_params, combo) -> str | None:
    """Why the study of ``combo`` cannot run its seeds on a seed axis, or None."""
    why = task.seed_axis_problem(task_params)
    if why is not None:
        return why
    for m in combo:
        if not m.cls.vectorised:
            return f"{m.slot} method {m.cls.name} declares vectorised = False"
    if spec.budget.wall_seconds is not None:
        return "a budget in wall_seconds is counted per run, one seed at a time"
    if spec.pruner.name == "wilcoxon":
        return "the wilcoxon pruner compares one seed at a time"
    return None


def _seed_mode(spec: SweepSpec, task: type[Task], task_params, combo, shown: str,
               source: str, notes: list[str]) -> bool:
    """Whether the study runs its seeds on a seed axis (``execution.seeds``): ``vectorised``
    refuses a study that cannot, ``auto`` falls back to sequential with one note saying why."""
    mode = spec.execution.seeds
    if mode == "sequential":
        return False
    why = seed_axis_problem(spec, task, task_params, combo)
    if why is None:
        return True
    if mode == "vectorised":
        raise SpecError(source, "execution.seeds", f"{shown} cannot run vectorised: {why}; "
                        "allowed: sequential, or auto (vectorised where each study can)")
    notes.append(f"{shown}: seeds run sequentially ({why})")
    return False


def evaluation_plan(spec: EvaluationSpec | None, tuning: list[int]) -> EvaluationPlan | None:
    """The held-out seeds: the first integers from ``first_seed`` that are not tuning seeds,
    as many as the evaluation may use."""
    if spec is None:
        return None
    adaptive = isinstance(spec.seeds, AdaptiveSeeds)
    count = spec.seeds.max if adaptive else spec.seeds
    taken, seeds, seed = set(tuning), [], spec.first_seed
    while len(seeds) < count:
        if seed not in taken:
            seeds.append(seed)
        seed += 1
    if not adaptive:
        return EvaluationPlan(seeds=seeds, rule="fixed", first=count, step=count)
    return EvaluationPlan(seeds=seeds, rule="separated", first=spec.seeds.min,
                          step=spec.seeds.step or spec.seeds.min)


def _resolve_slot(source, task, slot, entries, notes, problems) -> list[MethodChoice]:
    """The slot's methods; each entry's problems go to ``problems`` (and the entry is left
    out), so a spec's every mistake is reported at once."""
    try:
        names = registry.available(slot)
    except registry.RegistryError as err:
        problems.append(SpecError(source, f"methods.{slot}", str(err)))
        return []
    if entries == "all":
        chosen = []
        for method_name in names:
            try:
                chosen.append(_resolve_method(source, task, slot, f"methods.{slot}",
                                              MethodEntry(name=method_name)))
            except SpecError as err:
                notes.append(f"skipping {slot}/{method_name}: {err.message}")
        if not chosen:
            problems.append(SpecError(source, f"methods.{slot}",
                                      f"no {slot} method fits task {task.name}"))
        return chosen
    chosen, seen = [], set()
    for i, entry in enumerate(entries):
        where = f"methods.{slot}[{i}]"
        name_at = where if isinstance(entry, str) else f"{where}.name"
        entry = MethodEntry(name=entry) if isinstance(entry, str) else entry
        label = entry.label or entry.name
        if label in seen:
            problems.append(SpecError(source, name_at if entry.label is None
                                      else f"{where}.label", f"{slot}/{label} is listed "
                                      "twice; give each entry its own label"))
            continue
        seen.add(label)
        try:
            chosen.append(_resolve_method(source, task, slot, where, entry, name_at))
        except SpecError as err:
            problems.append(err)
    return chosen


def _resolve_method(source, task, slot, where, entry: MethodEntry,
                    name_at: str | None = None) -> MethodChoice:
    try:
        cls = registry.get(slot, entry.name)
    except registry.RegistryError:
        fitting = fitting_methods(task, slot)
        raise SpecError(source, name_at or where,
                        f"unknown {slot} method {shorten(entry.name)}; "
                        f"{did_you_mean(entry.name, fitting)}allowed for task {task.name}: "
                        + ", ".join(fitting)) from None
    allowed = ", ".join(sorted(cls.hyperparameters)) or "(none)"
    fixed = {}
    for key, value in entry.fixed.items():
        if key not in cls.hyperparameters:
            raise SpecError(source, f"{where}.fixed.{key}",
                            f"{cls.key()} has no hyperparameter {shorten(key)}; "
                            f"{did_you_mean(key, cls.hyperparameters)}allowed: {allowed}")
        try:
            fixed[key] = cls.hyperparameters[key].validate(value)
        except HyperparameterError as err:
            raise SpecError(source, f"{where}.fixed.{key}",
                            f"{err}; allowed: {cls.hyperparameters[key].allowed()}") from None
    space = {}
    for key, hp in cls.hyperparameters.items():
        if key in fixed:
            continue
        override = entry.search_space.get(key)
        if override == "fixed":
            continue
        try:
            if override is None:
                dist = hp.distribution()
            else:
                dist = hp.distribution(override.low, override.high, override.log,
                                       override.choices)
        except HyperparameterError as err:
            raise SpecError(source, f"{where}.search_space.{key}",
                            f"{err}; allowed: {hp.allowed()}") from None
        if dist is not None:
            space[key] = dist
    for key in entry.search_space:
        if key not in cls.hyperparameters:
            raise SpecError(source, f"{where}.search_space.{key}",
                            f"{cls.key()} has no hyperparameter {shorten(key)}; "
                            f"{did_you_mean(key, cls.hyperparameters)}allowed: {allowed}")
        if key in fixed:
            raise SpecError(source, f"{where}.search_space.{key}",
                            "is also fixed; give it either a fixed value or a search range")
    _check_requirements(source, task, where, cls, fixed, space)
    return MethodChoice(slot, cls, fixed, space, name=entry.label)


def _check_requirements(source, task, where, cls, fixed, space) -> None:
    """Every reachable configuration's requirements must be met by the task, and must include
    what the task demands of its slot's methods."""
    categorical = {k: d.choices for k, d in space.items()
                   if isinstance(d, od.CategoricalDistribution)}
    demanded = task.slot_requires.get(cls.family, frozenset())
    for values in itertools.product(*categorical.values()):
        params = cls.resolve({**fixed, **dict(zip(categorical, values, strict=True))})
        if not demanded <= cls.requirements(params):
            fitting = [n for n in registry.available(cls.family)
                       if demanded <= _default_requirements(registry.get(cls.family, n))]
            raise SpecError(source, where,
                            f"task {task.name} takes only {cls.family} methods that use "
                            f"{', '.join(sorted(demanded))}; allowed: {', '.join(fitting)}")
        unmet = sorted(cls.requirements(params) - task.provides)
        if unmet:
            shown = ", ".join(f"{k}={params[k]!r}" for k in [*fixed, *categorical])
            shown = shown or "its defaults"
            raise SpecError(
                source, where,
                f"{cls.key()} (with {shown}) needs {', '.join(unmet)}, which task "
                f"{task.name} does not provide (it provides: {', '.join(sorted(task.provides))})",
            )


def fitting_methods(task: type[Task], slot: str) -> list[str]:
    """The methods of ``slot`` that ``task`` can run with their defaults."""
    demanded = task.slot_requires.get(slot, frozenset())
    fits = []
    for name in registry.available(slot):
        needs = _default_requirements(registry.get(slot, name))
        if demanded <= needs and needs <= task.provides:
            fits.append(name)
    return fits


def _default_requirements(cls) -> frozenset[str]:
    return cls.requirements(cls.resolve({}))


# ----------------------------------------------------------------------------- fingerprints

RUNNER = "workbench.engine.trial"  # the engine's module that runs a trial: its code counts too


def device_kind(name: str | None) -> str:
    """``cpu`` or ``cuda``: what a run asked to use ``name`` (auto, cpu, cuda, cuda:N)
    computes on. A CUDA run's numbers differ from a CPU run's, so the kind is part of a
    study's fingerprint (the index is not)."""
    if name in (None, "auto"):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if str(name).startswith("cuda") else "cpu"


def study_name(task: str, combo, digest: str) -> str:
    """The Optuna study's name: task, the method of each named slot, the fingerprint's first
    ``fingerprint.SHORT`` hex digits (``logreg.step_size=polyak.3fa2b1c9d0e1``)."""
    named = [m for m in combo if not m.implicit] or list(combo)
    methods = "+".join(f"{m.slot}={m.cls.name}" for m in named)
    return f"{task}.{methods}.{digest[: fingerprint.SHORT]}"


def fingerprint_document(spec: SweepSpec, task: type[Task], task_params,
                         metric: str, direction: str, combo, device: str,
                         vectorised: bool = False) -> dict:
    """Everything that determines a study's results (``workbench.fingerprint``): task and
    parameters, budget, objective, each slot's method with its fixed values (defaults
    resolved) and search space, the sampler's and pruner's settings that act, the device kind,
    the seeds' execution mode, the code (every module of the project the run imports) and the
    libraries' versions. Not in
    it: labels, trial counts, failure limits, storage and report options, which change how
    much is run or how it is shown, never what a trial computes; nor the seed list: a (trial,
    seed) run is determined by the rest and its seed, so a sweep given more or other seeds
    keeps its study and runs only the seeds its trials lack
    (``workbench.engine.trial_seeds``)."""
    methods = {}
    for m in combo:
        space = {k: repr(d) for k, d in m.space.items()}
        fixed = {k: v for k, v in m.cls.resolve(m.fixed).items() if k not in space}
        methods[m.slot] = {"name": m.cls.key(), "fixed": fixed, "space": space}
    code, versions = fingerprint.code_hashes(
        [task.__module__, *(m.cls.__module__ for m in combo), RUNNER])
    o = spec.objective
    return {
        "version": fingerprint.VERSION,
        "task": {"name": task.name, "params": task_params.model_dump(mode="json")},
        "budget": spec.budget.model_dump(mode="json"),
        "objective": {"metric": metric, "direction": direction, "aggregate": o.aggregate,
                      "at": o.at, "diverge_past": o.diverge_past},
        "methods": methods,
        "sampler": _acting(spec.sampler, SAMPLER_SETTINGS),
        "pruner": _acting(spec.pruner, PRUNER_SETTINGS),
        "device": device,
        "execution": {"seeds": "vectorised" if vectorised else "sequential"},
        "code": code,
        "versions": versions,
    }


# per sampler or pruner, the settings that change what it does
SAMPLER_SETTINGS = {"tpe": ("seed", "startup_trials"), "cmaes": ("seed", "startup_trials"),
                    "random": ("seed",), "grid": ("seed", "grid_points")}
PRUNER_SETTINGS = {"median": ("startup_trials", "warmup_steps", "report_points"),
                   "hyperband": ("report_points", "reduction_factor"),
                   "wilcoxon": ("p_threshold", "startup_seeds"), "none": ()}


def _acting(settings, table: dict[str, tuple[str, ...]]) -> dict:
    return {"name": settings.name,
            **{key: getattr(settings, key) for key in table[settings.name]}}


# ----------------------------------------------------------------------------- report specs


class ReportFile(Strict):
    """A report spec in ``reports/``: several sweeps drawn together."""

    name: str = Field(pattern=NAME_PATTERN)
    sweeps: list[str] = Field(min_length=1)
    report: ReportOptions = ReportOptions()


@dataclass
class ReportPlan:
    """What to report: a title, the sweeps, and the report's options (a sweep spec's own
    ``report:`` section, so an edit to it shows at once; None where no spec is given: the
    report then takes the options its study runs recorded)."""

    name: str
    sweeps: list[Sweep]
    options: ReportOptions | None


def load_report(path: str | Path, storage: str | None = None,
                load_sweep: Callable[..., Any] | None = None) -> ReportPlan:
    """A sweep spec (one sweep) or a report spec (``sweeps:``, paths relative to the spec's
    folder's parent or to the folder itself). ``load_sweep(path, storage=)`` reads each sweep
    spec (default ``load``; `workbench report` passes ``workbench.resolved.load``)."""
    load_sweep = load_sweep or load
    data = read_yaml(path)
    if "sweeps" not in data:
        sweep = load_sweep(path, storage=storage)
        return ReportPlan(sweep.name, [sweep], sweep.report)
    try:
        spec = validate(ReportFile, data, str(path))
    except SpecError:
        raise
    base = Path(path).resolve().parent
    sweeps = []
    for i, entry in enumerate(spec.sweeps):
        target = Path(entry) if Path(entry).is_absolute() else base.parent / entry
        if not target.is_file():
            target = base / entry
        if not target.is_file():
            raise SpecError(str(path), f"sweeps[{i}]", f"no sweep spec at {shorten(entry)}")
        sweeps.append(load_sweep(target, storage=storage))
    return ReportPlan(spec.name, sweeps, spec.report)
