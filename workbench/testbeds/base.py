"""The task contract: a testbed with its training loop and the family slots it offers.

A task never imports the engine: it receives resolved methods, a seed, a device, a budget and
a ``log(step, metrics)`` callback, and returns its final metrics. Every metric name it logs is
defined once, in ``workbench.common.metrics``. ``Budget`` and ``LogFn`` live at the bottom layer
(``workbench.common.budget``) so that the training loops need not import this module.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from workbench.common.budget import Budget, LogFn, SeedsLogFn
from workbench.common.validation import Strict
from workbench.registry import Method

if TYPE_CHECKING:
    import torch


class TaskParams(Strict):
    """Base of each task's parameter model: unknown keys are errors."""


class OneThreadParams(TaskParams):
    """Parameters of a task whose steps are many small tensor operations: on the CPU they run
    on one torch thread per worker unless set (measured: benchmarks/seed_axis.py; a second
    thread only adds synchronisation at these sizes, and under load it costs several times)."""

    cpu_threads: int | None = Field(1, ge=1, le=1024, description="torch threads on the CPU "
                                    "(None: torch's default)")


@contextmanager
def cpu_threads(device: torch.device, threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` torch threads on the CPU (None, or another device: as
    is), restoring the previous count afterwards."""
    import torch

    before = torch.get_num_threads()
    if device.type == "cpu" and threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Task:
    """Base of every task."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    slots: ClassVar[tuple[str, ...]]
    default_methods: ClassVar[dict[str, str]] = {}  # slot -> method used when a spec names none
    # the inputs the task gives its methods: names from the families' REQUIRABLE
    provides: ClassVar[frozenset[str]] = frozenset()
    # slot -> what every method in it must use (e.g. a constrained task takes only step-size
    # methods that use its linear minimisation oracle, so iterates stay feasible)
    slot_requires: ClassVar[dict[str, frozenset[str]]] = {}
    Params: ClassVar[type[TaskParams]] = TaskParams
    metrics: ClassVar[dict[str, str]] = {}  # objective candidates: name -> natural direction
    # name -> (low, high), None unbounded: a range this task's values keep beyond the one the
    # vocabulary declares for every task (a loss that is >= 0 here); ``metric_bounds``
    bounds: ClassVar[dict[str, tuple[float | None, float | None]]] = {}
    default_objective: ClassVar[str] = "train/loss"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        from workbench.families import REQUIRABLE  # the families import torch: not before

        unknown = sorted(cls.provides - REQUIRABLE)
        if unknown:
            raise TypeError(
                f"{cls.__qualname__}.provides names {', '.join(unknown)}, which no family lets "
                "a method require (workbench.families.REQUIRABLE)")

    @classmethod
    def metric_bounds(cls, params: TaskParams) -> dict[str, tuple[float | None, float | None]]:
        """The ranges this task's metrics keep under ``params`` beyond the vocabulary's
        (``bounds``; a task whose range depends on its parameters overrides this); the study
        record carries them to the report."""
        return dict(cls.bounds)

    @classmethod
    def method_problem(cls, params: TaskParams, method: type) -> tuple[str, str] | None:
        """Why ``method`` cannot run under these (valid) ``params``, as (the params key, the
        message), or None; the sweep spec check reports it before anything runs."""
        return None

    @classmethod
    def objective_problem(cls, params: TaskParams, metric: str,
                          methods: Mapping[str, tuple[type, dict[str, Any]]]) -> str | None:
        """Why ``metric`` (one of ``metrics``) is never logged by a run of these (valid)
        ``params`` with ``methods`` (slot -> (method class, its resolved hyperparameters)),
        or None: a trial whose objective is never logged is pruned for nothing, so the sweep
        spec check refuses it before anything runs."""
        return None

    def run(
        self,
        params: TaskParams,
        methods: Mapping[str, Method],
        *,
        seed: int,
        device: torch.device,
        budget: Budget,
        log: LogFn,
    ) -> dict[str, Any]:
        """Train with ``methods`` in the slots from ``seed`` until ``budget`` is spent; return
        the final metrics.

        ``log(step, metrics)`` is the run's monitor (the engine's ``Monitor``): it records the
        step's metrics (names from ``workbench.common.metrics``) and may end the run by raising:
        ``workbench.engine.StopRun`` when the pruner stops the trial or the objective diverges
        past the spec's bound, or an interrupt. A loop lets whatever ``log`` raises propagate,
        holds no state that needs cleaning up past a ``with`` block.
        """
        raise NotImplementedError

    def run_seeds(
        self,
        params: TaskParams,
        methods: Mapping[str, Method],
        *,
        seeds: list[int],
        device: torch.device,
        budget: Budget,
        log: SeedsLogFn,
    ) -> list[dict[str, Any]]:
        """``run`` for every seed of ``seeds`` as one computation with a leading seed axis
        (``execution: {seeds: vectorised}``); each seed's final metrics. Seed i's metrics at
        every step are those ``run`` gives it alone (the parity contract: tests hold each task
        to it). ``log(step, per_seed)`` gets seed i's metrics, or None once seed i stopped; it
        may raise as ``run``'s ``log`` does, which ends every seed."""
        raise NotImplementedError

    @classmethod
    def runs_seeds_together(cls) -> bool:
        """Whether the task implements ``run_seeds``."""
        return cls.run_seeds is not Task.run_seeds

    @classmethod
    def seed_axis_problem(cls, params: TaskParams) -> str | None:
        """Why the task cannot run its seeds on a seed axis under these (valid) ``params``,
        or None."""
        if not cls.runs_seeds_together():
            return f"task {cls.name} runs its seeds one at a time (it has no run_seeds)"
        return None
