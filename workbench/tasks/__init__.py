"""Task registry: testbeds by name."""

from __future__ import annotations

from workbench.tasks.base import Budget, Task, TaskParams
from workbench.tasks.logreg import LogReg
from workbench.tasks.quadratic import Quadratic

TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (LogReg, Quadratic)}


def get_task(name: str) -> type[Task]:
    try:
        return TASKS[name]
    except KeyError:
        raise LookupError(f"unknown task {name!r}; allowed: {', '.join(sorted(TASKS))}") from None


__all__ = ["TASKS", "Budget", "Task", "TaskParams", "get_task"]
