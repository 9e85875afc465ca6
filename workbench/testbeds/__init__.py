"""The testbeds, one folder each (``optimisation``, ``control``, ``rlvr``, ``agent``), and the
task registry: tasks by name. The pieces both RL testbeds share sit in ``shared``, the task contract
in ``base``; no testbed imports another's folder, except ``agent_lm``, which composes two
(the agent environments played by the RLVR testbed's language model), and ``value`` (DQN),
which runs the control testbed's environments; both sit above the testbeds they use.

A task's module is imported the first time its name is looked up, so a logreg sweep (or a spec
that fails validation) never pays for the RLVR testbed's `transformers` import.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from workbench.testbeds.base import Budget, Task, TaskParams

#: name -> (module, class); tests/test_tasks.py checks each class's own `name` against its key.
_HOMES: dict[str, tuple[str, str]] = {
    "logreg": ("workbench.testbeds.optimisation.logreg", "LogReg"),
    "quadratic": ("workbench.testbeds.optimisation.quadratic", "Quadratic"),
    "least_squares": ("workbench.testbeds.optimisation.least_squares", "LeastSquares"),
    "simplex": ("workbench.testbeds.optimisation.simplex", "Simplex"),
    "mlp": ("workbench.testbeds.optimisation.mlp", "MLP"),
    "control": ("workbench.testbeds.control.task", "Control"),
    "cartpole": ("workbench.testbeds.control.task", "CartPole"),
    "acrobot": ("workbench.testbeds.control.task", "Acrobot"),
    "mountain-car": ("workbench.testbeds.control.task", "MountainCar"),
    "pendulum": ("workbench.testbeds.control.task", "Pendulum"),
    "dqn-cartpole": ("workbench.testbeds.value.task", "DQNCartPole"),
    "lqr-ars": ("workbench.testbeds.lq.task", "LQRARS"),
    "rlvr-arith": ("workbench.testbeds.rlvr.task", "RLVRArith"),
    "rlvr-countdown": ("workbench.testbeds.rlvr.task", "RLVRCountdown"),
    "keydoor": ("workbench.testbeds.agent.task", "KeyDoorTask"),
    "toolcalc": ("workbench.testbeds.agent.task", "ToolCalcTask"),
    "keydoor-lm": ("workbench.testbeds.agent_lm.task", "KeyDoorLMTask"),
    "toolcalc-lm": ("workbench.testbeds.agent_lm.task", "ToolCalcLMTask"),
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
