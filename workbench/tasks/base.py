"""The task contract: a testbed with its training loop and the family slots it offers.

A task never imports the engine: it receives resolved methods, a seed, a device, a budget and
a ``log(step, metrics)`` callback, and returns its final metrics. Metric names follow one scheme
across tasks: ``train/loss``, ``train/accuracy``, ``train/grad_norm``, ``method/step_size``,
``cost/samples``, ``cost/grad_evals``, ``cost/loss_evals``, ``time/wall_seconds``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
from pydantic import Field

from workbench.registry import Method
from workbench.validation import Strict

LogFn = Callable[[int, Mapping[str, float]], None]


class TaskParams(Strict):
    """Base of each task's parameter model: unknown keys are errors."""


class Budget(Strict):
    """When a run stops: whichever limit comes first (steps is always set)."""

    steps: int = Field(100, ge=1, le=10_000_000)
    samples: int | None = Field(None, ge=1)
    wall_seconds: float | None = Field(None, gt=0)

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


@contextmanager
def cpu_threads(device: torch.device, threads: int | None) -> Iterator[None]:
    """Run the block with ``threads`` torch threads on the CPU (None, or another device: as
    is), restoring the previous count afterwards."""
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
    provides: ClassVar[frozenset[str]] = frozenset()
    # slot -> what every method in it must use (e.g. a constrained task takes only step-size
    # methods that use its linear minimisation oracle, so iterates stay feasible)
    slot_requires: ClassVar[dict[str, frozenset[str]]] = {}
    Params: ClassVar[type[TaskParams]] = TaskParams
    metrics: ClassVar[dict[str, str]] = {}  # objective candidates: name -> natural direction
    default_objective: ClassVar[str] = "train/loss"

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
        raise NotImplementedError
