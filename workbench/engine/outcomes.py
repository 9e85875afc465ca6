"""What a study's trials say about it: the best, and whether its method's failures stopped
it. Pure functions of trials, either Optuna's (``FrozenTrial``) or the rows `workbench
status` reads with SQL (``workbench.store.optuna_tables.TrialRow``): states compare by name, so this
module imports neither Optuna nor the engine's heavier parts."""

from __future__ import annotations

from typing import Any

FINISHED_STATES = ("COMPLETE", "PRUNED")


def state(trial) -> str:
    """The trial's state name (``COMPLETE``, ``PRUNED``, ``FAIL``, ``RUNNING``, ``WAITING``)."""
    return getattr(trial.state, "name", trial.state)


def best_trial(trials, direction: str) -> Any | None:
    """The best complete trial among ``trials`` (the lowest number among equals); None when
    none is complete."""
    complete = [t for t in trials if state(t) == "COMPLETE"]
    if not complete:
        return None
    sign = 1.0 if direction == "minimize" else -1.0
    return min(complete, key=lambda t: (sign * t.value, t.number))


def raised_count(trials) -> int:
    """Trials failed because their method raised (not because their worker died)."""
    return sum(state(t) == "FAIL" and "fail_reason" in t.user_attrs for t in trials)


def interrupted(trial) -> bool:
    """A trial failed by an interrupt (Ctrl-C, SIGTERM): not a failure of its method, and
    queued again with its parameters (``Claims``), so no count of failures includes it."""
    return state(trial) == "FAIL" and "interrupted" in trial.user_attrs


def worker_died(trial) -> bool:
    """A failed trial that did not fail itself: its worker was killed or it was found dead."""
    return (state(trial) == "FAIL"
            and not {"fail_reason", "interrupted"} & trial.user_attrs.keys())


def failure_stop(trials, limit: int) -> str | None:
    """Why a study claims no more trials: its method raised ``max_failed_trials`` times."""
    raised = raised_count(trials)
    if raised < limit:
        return None
    return f"stopped after {raised} failed trials (max_failed_trials: {limit})"
