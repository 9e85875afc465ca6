"""A validated ``SweepSpec`` resolved into a ``Sweep``: the task and its parameters (with
``task.vary``), each slot's methods with fixed values and search spaces, what the task
must provide for them, the seeds' execution mode, one ``StudyPlan`` per combination.
Every problem found is collected into one ``SpecError``."""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import replace
from typing import Any

import optuna.distributions as od

from workbench import registry
from workbench.common import fingerprint, metrics
from workbench.common.validation import SpecError, did_you_mean, shorten, validate
from workbench.hyperparams import HyperparameterError
from workbench.spec.plan import (
    MethodChoice,
    StudyPlan,
    Sweep,
    device_kind,
    fingerprint_document,
    study_name,
    with_varied,
)
from workbench.spec.schema import (
    MLFLOW_RUN_NAME_CHARS,
    NAME_PATTERN,
    OPTUNA_STUDY_NAME_CHARS,
    RUN_NAME_SUFFIX_CHARS,
    STUDY_LABEL_CHARS,
    AdaptiveSeeds,
    EvaluationSpec,
    MethodEntry,
    SweepSpec,
    TaskSpec,
    artifact_root_problem,
    store_text_problem,
)
from workbench.store.database import default_storage, normalise_storage
from workbench.store.study_record import EvaluationPlan
from workbench.testbeds import Task, get_task


def _suggesting(message: str, name, known) -> str:
    """``...; allowed: ...`` with ``did you mean ...?`` before the allowed values."""
    return message.replace("; allowed:", f"; {did_you_mean(name, known)}allowed:", 1)


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
    problems += _task_params_too_long(source, spec.task, variants)

    metric = spec.objective.metric or task.default_objective
    if metric not in task.metrics:
        problems.append(SpecError(source, "objective.metric", f"task {task.name} has no metric "
                                  f"{shorten(metric)}; {did_you_mean(metric, task.metrics)}"
                                  f"allowed: " + ", ".join(task.metrics)))
    direction = spec.objective.direction or task.metrics.get(metric, "minimize")
    asked = spec.report
    named = [(f"report.metrics[{i}]", curve) for i, curve in enumerate(asked.metrics or [])]
    named += [(f"report.rates[{i}].metric", r.metric) for i, r in enumerate(asked.rates)]
    named += [(f"report.rates[{i}].x", r.x) for i, r in enumerate(asked.rates) if r.x != "step"]
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
                                      f"metrics table (workbench/common/metrics.py) that task "
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
            for found in [*_never_logged(source, task, params, metric, per_slot),
                          *_inert(source, params, per_slot)]:
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
        _fits_the_store(source, plan)
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
    if storage is not None and not storage.strip():
        raise SpecError("--storage", "", "empty; allowed: sqlite:///FILE or "
                        "postgresql://USER@HOST/DB")
    url = normalise_storage(url, "--storage" if storage else source,
                            "" if storage else "storage") if url else default_storage()
    if spec.artifact_root is not None:
        why = artifact_root_problem(spec.artifact_root, name, not url.startswith("sqlite"))
        if why is not None:
            raise SpecError(source, "artifact_root", why)
    return Sweep(spec, name, source, task, task_params, seeds, metric, direction, studies,
                 url, notes, evaluation_plan(spec.evaluation, seeds))


def _fits_the_store(source: str, plan: StudyPlan) -> None:
    """A SpecError when the study's names do not fit MLflow's and Optuna's tables (see
    ``workbench.spec.schema``): its label, which begins every run name and is a tag, and its
    Optuna name."""
    label = plan.label
    if len(label) > STUDY_LABEL_CHARS:
        methods = "+".join(m.label for m in plan.methods if not m.implicit)
        where = "methods" if len(methods) > STUDY_LABEL_CHARS else "task.vary"
        raise SpecError(source, where, f"the study {shorten(label, 80)} is labelled with "
                        f"{len(label)} characters (its methods' labels joined by +, then each "
                        f"varied task value); allowed: at most {STUDY_LABEL_CHARS} (a run's name "
                        f"is the label and up to {RUN_NAME_SUFFIX_CHARS} more, and MLflow's "
                        f"runs.name holds {MLFLOW_RUN_NAME_CHARS}): shorter labels or values")
    if len(plan.name) > OPTUNA_STUDY_NAME_CHARS:
        raise SpecError(source, "methods", f"the Optuna study name {shorten(plan.name, 80)} is "
                        f"{len(plan.name)} characters; allowed: at most "
                        f"{OPTUNA_STUDY_NAME_CHARS} (Optuna's studies.study_name): methods "
                        "with shorter registered names")


def _task_params_too_long(source: str, spec: TaskSpec, variants) -> list[SpecError]:
    """A problem for each task parameter whose text does not fit a run's param."""
    found, said = [], set()
    for varied, params in variants:
        if params is None:
            continue
        for key, value in params.model_dump().items():
            why = store_text_problem(value)
            where = f"task.vary.{key}" if key in dict(varied) else f"task.params.{key}"
            if why is not None and where not in said:
                said.add(where)
                found.append(SpecError(source, where, why))
    return found


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


def _inert(source, params, per_slot) -> list[SpecError]:
    """A method that would change nothing under the task's settings (``Method.inert``), with
    its fixed values and defaults: refused, with the reason."""
    found = []
    for choices in per_slot:
        for i, m in enumerate(choices):
            reason = m.cls.inert(m.cls.resolve(m.fixed), params)
            if reason is not None:
                found.append(SpecError(source, f"methods.{m.slot}[{i}]",
                                       f"{m.cls.key()}: {reason}"))
    return found


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
        why = store_text_problem(fixed[key])  # a run's param holds it
        if why is not None:
            raise SpecError(source, f"{where}.fixed.{key}", why)
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
        for choice in getattr(dist, "choices", ()):  # the one drawn becomes a run's param
            why = store_text_problem(choice)
            if why is not None:
                raise SpecError(source, f"{where}.search_space.{key}", f"a choice {why}")
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


