"""Task registry: testbeds by name."""

from __future__ import annotations

from workbench.tasks.base import Budget, Task, TaskParams
from workbench.tasks.control import CONTROL_TASKS
from workbench.tasks.least_squares import LeastSquares
from workbench.tasks.logreg import LogReg
from workbench.tasks.mlp import MLP
from workbench.tasks.quadratic import Quadratic
from workbench.tasks.rlvr import RLVR_TASKS
from workbench.tasks.simplex import Simplex

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (LogReg, Quadratic, LeastSquares, Simplex, MLP, *CONTROL_TASKS,
                                         *RLVR_TASKS)
}


def get_task(name: str) -> type[Task]:
    try:
        return TASKS[name]
    except KeyError:
        raise LookupError(f"unknown task {name!r}; allowed: {', '.join(sorted(TASKS))}") from None


__all__ = ["TASKS", "Budget", "Task", "TaskParams", "get_task"]
