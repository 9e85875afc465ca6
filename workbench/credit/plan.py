"""A credit spec (``workbench credit SPEC``): its keys, and its check into a ``CreditPlan``.

The task, the checkpoint's methods and the estimators are checked by the sweep spec's own
rules (``workbench.spec.sweep.check``: task parameters, method names, fixed values, what the task
provides), with each problem reported at the credit spec's key; every problem is found before
anything runs or is written.

Each estimator is measured on the rows of the sampler the training loop grows its rollouts
with (``sampler_of``): Tree-GRPO's trees for one that reads ``tree_ids`` (``loop.train`` under
``sampling: auto``; the tree's shape from the task's ``tree_count``, ``tree_expansions`` and
``tree_rounds``, with G / tree_count leaves kept per tree, so every G must give such trees),
independent rollouts for the others. Refused: an estimator that reads a value head's values
when the checkpoint has none, and one that reads both ``tree_ids`` and the rubric judge's
annotations (the judge cannot follow an episode across a restored state, as in the loop), and
one that reads ``ref_log_probs`` (the study keeps no reference policy).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from workbench import registry
from workbench.common.validation import SpecError, Strict, shorten, validate
from workbench.spec import sweep as spec
from workbench.spec.schema import MAX_SEED, NAME_PATTERN
from workbench.testbeds.agent.loop import AgentSettings
from workbench.testbeds.agent.task import RUBRIC_INPUTS  # what the task's rubric judge gives

VALUE_INPUTS = frozenset({"values", "next_values"})  # what only a value head gives
# the rows an estimator is measured on: those the training loop grows for it (``sampler_of``)
INDEPENDENT, TREE, SEGMENTS = "independent", "tree", "segments"
SAMPLERS = {
    INDEPENDENT: "G independent rollouts of each instance (episodes.play)",
    TREE: "Tree-GRPO's sampler (tree.play_trees): tree_count trees per instance, each one "
          "rollout then tree_rounds rounds of tree_expansions branches from uniformly drawn "
          "nodes, G / tree_count leaves kept per tree; a row is a kept leaf's whole path",
    SEGMENTS: "SPO-tree's sampler (tree.play_segment_trees): one tree per instance branching "
              "segment_branching[d] ways every segment_length steps (their product is G), "
              "every leaf kept; a row is a leaf's whole path",
}
# instances x steps x 2 x max(continuations): the rows stepped at once for one G (each
# holds its instance's grid; a million take about ten seconds on a 2-core CPU)
MAX_CONTINUATION_ROWS = 8_000_000


class MethodPick(Strict):
    """One method with its fixed values (the rest at their defaults); nothing is tuned."""

    name: str
    label: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.=-]{0,59}$",
                              description="names the entry in the figure and table (default: "
                                          "the method's name)")
    fixed: dict[str, Any] = {}


class TaskEntry(Strict):
    name: Literal["keydoor", "toolcalc"] = Field(
        description="an agent testbed (its states save and restore exactly)")
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="its parameters (`workbench tasks NAME`)")


class CheckpointEntry(Strict):
    methods: dict[str, str | MethodPick] = Field(
        default_factory=dict, description="a method per slot, as in a sweep (NAME or {name, "
                                          "fixed}); unnamed slots take the task's defaults")
    updates: int = Field(40, ge=0, le=1_000_000, description="policy updates (0: the "
                                                             "initial policy)")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="the training run's seed")


def _distinct(values: list[int], what: str) -> list[int]:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} must be distinct")
    return sorted(values)


class CreditSpec(Strict):
    name: str | None = Field(None, pattern=NAME_PATTERN)
    description: str = ""
    task: TaskEntry
    checkpoint: CheckpointEntry = CheckpointEntry()
    estimators: list[str | MethodPick] = Field(min_length=1, max_length=50)
    group_sizes: list[int] = Field(min_length=1, max_length=20,
                                   description="G: rollouts per instance")
    continuations: list[int] = Field(min_length=1, max_length=20,
                                     description="N: continuations per step for Q and for V")
    instances: int = Field(32, ge=2, le=100_000, description="held-out instances (split 1)")
    steps_per_instance: int = Field(4, ge=1, le=10_000,
                                    description="steps sampled from each instance's rollouts")
    seed: int = Field(0, ge=0, le=MAX_SEED,
                      description="rollouts, sampled steps, continuations and bootstrap")
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    resamples: int = Field(1000, ge=100, le=100_000, description="bootstrap resamples")
    gradient_batches: int = Field(
        0, ge=0, le=10_000,
        description="B: independent batches of G rollouts of each instance on which each "
                    "estimator's policy gradient is set against the exact one (the "
                    "policy-gradient bias, ``credit.gradient``; gradient.csv, .md, .png); 0: "
                    "not measured")

    @field_validator("gradient_batches")
    @classmethod
    def _gradient_batches(cls, value: int) -> int:
        if value == 1:
            raise ValueError("the gradient's bias needs 0 (not measured) or 2 or more batches")
        return value

    @field_validator("group_sizes")
    @classmethod
    def _group_sizes(cls, value: list[int]) -> list[int]:
        if not all(1 <= g <= 1024 for g in value):
            raise ValueError("each group size must be an integer in [1, 1024]")
        return _distinct(value, "group sizes")

    @field_validator("continuations")
    @classmethod
    def _continuations(cls, value: list[int]) -> list[int]:
        if not all(2 <= n <= 100_000 for n in value):
            raise ValueError("each continuation count must be an integer in [2, 100000] (two "
                             "or more give the Monte Carlo estimate a standard error)")
        return _distinct(value, "continuation counts")


@dataclass(frozen=True)
class Estimator:
    label: str
    method: registry.Method
    sampler: str  # the rows it is measured on (``SAMPLERS``)


def sampler_of(method: registry.Method) -> str:
    """The sampler the training loop grows ``method``'s rows with under ``sampling: auto``:
    its reference's (``AdvantageMethod.tree_sampler``: Tree-GRPO's or SPO-tree's trees), or
    independent rollouts."""
    return {"expansion": TREE, "segments": SEGMENTS}.get(method.tree_sampler, INDEPENDENT)


def tree_settings(task_params, group_size: int, sampler: str = TREE) -> AgentSettings:
    """The loop's settings for ``sampler``'s trees giving ``group_size`` rows per instance
    (``tree.TreeShape.of`` / ``SegmentShape.of`` take them); a ValueError where the task's
    tree shape cannot."""
    return AgentSettings.from_flat(task_params, group_size=group_size, sampling=sampler)


@dataclass(frozen=True)
class CreditPlan:
    """Everything a credit study needs, checked."""

    name: str
    source: str
    spec: CreditSpec
    task_params: Any  # the task's Params
    checkpoint_methods: dict[str, registry.Method]  # slot -> method
    critic: bool  # the checkpoint has a value head (its advantage method reads values)
    estimators: tuple[Estimator, ...]

    @property
    def document(self) -> dict:
        """The spec as checked (defaults filled in), for provenance."""
        return self.spec.model_dump(mode="json")


def load(path: str | Path) -> CreditPlan:
    """Read and check a credit spec; a SpecError naming the file, key and allowed values."""
    return check(spec.read_yaml(path), str(path), Path(path).stem)


def check(data: dict, source: str, default_name: str = "credit") -> CreditPlan:
    """The spec checked and resolved; a SpecError with every problem found. Where its
    structure has problems, the rest (the keys without any, back at their defaults) is still
    resolved, so a misspelt key and an unknown estimator are reported in one run."""
    try:
        checked = validate(CreditSpec, data, source)
    except SpecError as err:
        broken = {re.split(r"[.\[]", path, maxsplit=1)[0] for path, _ in err.problems}
        try:
            rest = CreditSpec.model_validate({k: v for k, v in data.items()
                                              if k not in broken})
            _resolve(rest, source, default_name)
        except SpecError as more:
            raise SpecError.of([err, more]) from None
        except ValueError:  # pydantic's ValidationError: a required key was among them
            pass
        raise
    return _resolve(checked, source, default_name)


def _resolve(checked: CreditSpec, source: str, default_name: str) -> CreditPlan:
    problems: list[SpecError] = []
    name = checked.name or default_name
    if not re.match(NAME_PATTERN, name):
        problems.append(SpecError(source, "name", f"{shorten(name)}: allowed: a letter or "
                                  "digit, then up to 99 of [A-Za-z0-9_.-] (the file name when "
                                  "name is unset)"))
    checkpoint = estimators = None
    try:
        checkpoint = _checkpoint(checked, source)
    except SpecError as err:
        problems.append(err)
    try:
        estimators = _estimators(checked, source)
    except SpecError as err:  # the task's problems are found by both checks: once each
        seen = {q for e in problems for q in e.problems}
        fresh = [q for q in err.problems if q not in seen]
        if fresh:
            problems.append(SpecError(source, *fresh[0], more=fresh[1:]))
    if checkpoint is not None and estimators is not None:
        sweep, methods = checkpoint
        critic = bool(VALUE_INPUTS & methods["advantage"].requirements(
            methods["advantage"].params))
        for i, estimator in enumerate(estimators):
            reads = estimator.method.requirements(estimator.method.params)
            if estimator.sampler != INDEPENDENT and reads & RUBRIC_INPUTS:
                problems.append(SpecError(
                    source, f"estimators[{i}]",
                    f"{estimator.label} reads tree_ids and "
                    f"{', '.join(sorted(reads & RUBRIC_INPUTS))}: its rows are trees grown "
                    "from restored states, and the rubric judge cannot follow an episode "
                    "across a restored state (the training loop refuses it too); allowed: an "
                    "estimator that does not read both"))
            if "ref_log_probs" in reads:
                problems.append(SpecError(
                    source, f"estimators[{i}]",
                    f"{estimator.label} reads ref_log_probs (the policy as training began), "
                    "which a credit study does not keep; allowed: an estimator that does not "
                    "read it"))
            needs = VALUE_INPUTS & reads
            if needs and not critic:
                problems.append(SpecError(
                    source, f"estimators[{i}]",
                    f"{estimator.label} reads {', '.join(sorted(needs))}, which only a value "
                    f"head gives, and the checkpoint (trained with advantage "
                    f"{methods['advantage'].name}) has none; allowed: drop it, or train the "
                    f"checkpoint with an advantage method that reads values "
                    f"(checkpoint.methods.advantage: gae)"))
        problems += _tree_problems(checked, sweep.task_params, estimators, source)
    rows = (checked.instances * checked.steps_per_instance * 2 * max(checked.continuations))
    if rows > MAX_CONTINUATION_ROWS:
        problems.append(SpecError(source, "continuations",
                                  f"instances x steps_per_instance x 2 x max(continuations) = "
                                  f"{rows:,} rolled-out rows at once; allowed: at most "
                                  f"{MAX_CONTINUATION_ROWS:,}"))
    if problems:
        raise SpecError.of(problems)
    sweep, methods = checkpoint
    return CreditPlan(name, source, checked, sweep.task_params, methods, critic,
                      tuple(estimators))


def _tree_problems(checked: CreditSpec, task_params, estimators: list[Estimator],
                   source: str) -> list[SpecError]:
    """One problem per G that the task's tree shape cannot give G rows per instance for, where
    an estimator is measured on trees."""
    p = task_params
    allowed = {
        TREE: (f"Tree-GRPO's trees of task.params tree_count {p.tree_count}, tree_expansions "
               f"{p.tree_expansions}, tree_rounds {p.tree_rounds}",
               f"group sizes that are multiples of tree_count and at most tree_count x (1 + "
               f"tree_rounds x tree_expansions) = "
               f"{p.tree_count * (1 + p.tree_rounds * p.tree_expansions)}"),
        SEGMENTS: (f"SPO-tree's trees of task.params segment_branching {p.segment_branching}",
                   f"the group size {math.prod(p.segment_branching)} (the product of "
                   f"segment_branching)"),
    }
    problems = []
    for sampler, (shape, sizes) in allowed.items():
        trees = [(i, e) for i, e in enumerate(estimators) if e.sampler == sampler]
        if not trees:
            continue
        i, first = trees[0]
        for g in checked.group_sizes:
            try:
                tree_settings(task_params, g, sampler)
            except ValueError as err:  # pydantic's ValidationError: the loop's own message
                errors = getattr(err, "errors", None)
                reason = (errors()[0]["msg"].removeprefix("Value error, ") if errors
                          else str(err))
                problems.append(SpecError(
                    source, "group_sizes",
                    f"G = {g} for {first.label} (estimators[{i}]), measured on {shape}: "
                    f"{reason}; allowed: {sizes}, or another tree shape in task.params"))
    return problems


def _sweep_document(checked: CreditSpec, methods: dict, seed: int, steps: int) -> dict:
    return {"task": checked.task.model_dump(), "methods": methods, "seeds": [seed],
            "trials": 1, "budget": {"steps": steps}}


def _checkpoint(checked: CreditSpec, source: str):
    """(the sweep the checkpoint's training is, slot -> method), checked as a sweep spec."""
    entries = {slot: [_plain(entry)] for slot, entry in checked.checkpoint.methods.items()}
    entries.setdefault("advantage", ["grpo"])
    document = _sweep_document(checked, entries, checked.checkpoint.seed,
                               max(1, checked.checkpoint.updates))
    try:
        sweep = spec.check(document, source)
    except SpecError as err:
        raise _renamed(err, _checkpoint_path) from None
    methods = {m.slot: m.cls(**m.fixed) for m in sweep.studies[0].methods}
    return sweep, methods


def _estimators(checked: CreditSpec, source: str) -> list[Estimator]:
    entries = [_plain(entry) for entry in checked.estimators]
    document = _sweep_document(checked, {"advantage": entries}, 0, 1)
    try:
        sweep = spec.check(document, source)
    except SpecError as err:
        raise _renamed(err, _estimator_path) from None
    chosen = [next(m for m in plan.methods if m.slot == "advantage") for plan in sweep.studies]
    methods = [(m.label, m.cls(**m.fixed)) for m in chosen]
    return [Estimator(label, method, sampler_of(method)) for label, method in methods]


def _plain(entry):
    return entry if isinstance(entry, str) else entry.model_dump(exclude_defaults=True)


def _checkpoint_path(path: str) -> str:
    """A sweep document's key as the credit spec spells it."""
    if match := re.fullmatch(r"methods\.(\w+)\[0\](.*)", path):
        return f"checkpoint.methods.{match[1]}{match[2]}"
    if path.startswith("methods"):
        return "checkpoint." + path
    return {"seeds": "checkpoint.seed", "budget.steps": "checkpoint.updates"}.get(path, path)


def _estimator_path(path: str) -> str:
    if path.startswith("methods.advantage"):
        return "estimators" + path.removeprefix("methods.advantage")
    return "estimators" if path == "methods" else path


def _renamed(err: SpecError, rename) -> SpecError:
    problems = [(rename(path), message) for path, message in err.problems]
    return SpecError(err.source, *problems[0], more=problems[1:])
