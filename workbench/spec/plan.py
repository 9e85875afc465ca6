"""What a checked sweep spec resolves into: ``Sweep`` (the engine's input), one ``StudyPlan`` per
Optuna study with its ``MethodChoice`` per slot, and the study's identity: the fingerprint
document of everything that determines its results, its name and device kind."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import optuna.distributions as od

from workbench import registry
from workbench.common import fingerprint
from workbench.common.validation import SpecError
from workbench.spec.schema import SweepSpec, artifact_root_problem, normalised_artifact_root
from workbench.store.study_record import EvaluationPlan, ReportOptions, StudyRecord
from workbench.testbeds import Task


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
    results (``workbench.common.fingerprint``); its digest, ``fingerprint``, names the study, so an
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
            root = normalised_artifact_root(value)
        except ValueError as err:
            raise SpecError("--artifact-root", "", str(err)) from None
        why = artifact_root_problem(root, self.name, not self.storage.startswith("sqlite"))
        if why is not None:
            raise SpecError("--artifact-root", "", why)
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
        (``workbench.store.study_record``)."""
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
    """Everything that determines a study's results (``workbench.common.fingerprint``): task and
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



@dataclass
class ReportPlan:
    """What to report: a title, the sweeps, and the report's options (a sweep spec's own
    ``report:`` section, so an edit to it shows at once; None where no spec is given: the
    report then takes the options its study runs recorded)."""

    name: str
    sweeps: list[Sweep]
    options: ReportOptions | None


