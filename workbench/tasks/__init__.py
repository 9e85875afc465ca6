"""Task registry: testbeds by name.

A task's module is imported the first time its name is looked up, so a logreg sweep (or a spec
that fails validation) never pays for the RLVR testbed's `transformers` import.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from workbench.tasks.base import Budget, Task, TaskParams

#: name -> (module, class); tests/test_tasks.py checks each class's own `name` against its key.
_HOMES: dict[str, tuple[str, str]] = {
    "logreg": ("workbench.tasks.logreg", "LogReg"),
    "quadratic": ("workbench.tasks.quadratic", "Quadratic"),
    "least_squares": ("workbench.tasks.least_squares", "LeastSquares"),
    "simplex": ("workbench.tasks.simplex", "Simplex"),
    "mlp": ("workbench.tasks.mlp", "MLP"),
    "control": ("workbench.tasks.control", "Control"),
    "cartpole": ("workbench.tasks.control", "CartPole"),
    "acrobot": ("workbench.tasks.control", "Acrobot"),
    "mountain-car": ("workbench.tasks.control", "MountainCar"),
    "pendulum": ("workbench.tasks.control", "Pendulum"),
    "rlvr-arith": ("workbench.tasks.rlvr", "RLVRArith"),
    "rlvr-countdown": ("workbench.tasks.rlvr", "RLVRCountdown"),
}


class _LazyTasks(Mapping[str, type[Task]]):
    """{name: task class}, importing a task's module on first access."""

    def __getitem__(self, name: str) -> type[Task]:
        module, attribute = _HOMES[name]
        return getattr(importlib.import_module(module), attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(_HOMES)

    def __len__(self) -> int:
        return len(_HOMES)


TASKS: Mapping[str, type[Task]] = _LazyTasks()


def get_task(name: str) -> type[Task]:
    if name not in _HOMES:
        raise LookupError(f"unknown task {name!r}; allowed: {', '.join(sorted(_HOMES))}")
    return TASKS[name]


__all__ = ["TASKS", "Budget", "Task", "TaskParams", "get_task"]
