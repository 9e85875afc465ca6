"""The monitor of one seed run: the ``log`` function a task's loop calls at every step.

It records the step's metrics to the sink, tracks the objective, and may stop the run by
raising ``StopRun``: ``diverged`` when the objective metric passes the spec's ``diverge_past``
bound or, without one, grows explosively (``workbench.stats.objective.Divergence``), or ends not
finite; ``pruned`` when Optuna's pruner says so at a report point. A task
lets the exception propagate (the task contract, ``workbench.testbeds.base.Task.run``); the trial
runner catches it and marks the seed run and the trial pruned with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import optuna

from workbench.spec.plan import Sweep
from workbench.stats import aggregates as stats
from workbench.stats.objective import Divergence, ObjectiveTracker
from workbench.store.sink import MetricSink


class StopRun(Exception):
    """Ends a trial early, marked pruned: the pruner said so, or the run diverged."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def report_steps(steps: int, points: int) -> dict[int, int]:
    """Training step -> index of the intermediate value reported there."""
    marks = sorted({max(1, round(steps * (i + 1) / points)) for i in range(points)})
    return {step: i for i, step in enumerate(marks)}


def replayed_reports(sweep: Sweep, history) -> dict[int, float]:
    """The intermediate values a ``Monitor`` reported (report point index -> objective so
    far) in a seed run that logged ``history``, its (step, value) points of the objective
    metric: what a seed run kept from a stopped trial reports again for the trial that takes
    it over (``TrialRunner``)."""
    spec = sweep.spec
    marks = report_steps(spec.budget.steps, spec.pruner.report_points)
    objective = ObjectiveTracker(sweep.metric, sweep.direction, spec.objective.at)
    found = {}
    for step, value in sorted(history):
        objective.add(value)
        if step in marks and math.isfinite(objective.value()):
            found[marks[step]] = objective.value()
    return found


class Monitor:
    """The ``LogFn`` of seed ``seed`` (the trial's ``seed_index``-th) of ``trial``.

    Each call logs the metrics of a step to ``run_id`` through ``sink``; a step with the
    objective metric adds it to the objective, checks divergence and, at a report point, reports
    the objective so far to Optuna as intermediate value ``seed_index * points + i`` (the same
    for every trial) and asks the pruner (not the wilcoxon pruner, which takes one value per
    seed, and not for an evaluation run, whose ``trial`` is None). Both stops raise ``StopRun``.
    """

    def __init__(self, sweep: Sweep, sink: MetricSink, run_id: str,
                 trial: optuna.Trial | None, seed: int, seed_index: int):
        spec = sweep.spec
        self.sink, self.run_id, self.trial = sink, run_id, trial
        self.seed, self.seed_index = seed, seed_index
        self.metric, self.direction = sweep.metric, sweep.direction
        self.divergence = Divergence(sweep.metric, sweep.direction, spec.objective.diverge_past)
        self.pruner = spec.pruner.name
        self.points = spec.pruner.report_points
        self.marks = report_steps(spec.budget.steps, self.points)
        self.objective = ObjectiveTracker(sweep.metric, sweep.direction, spec.objective.at)

    def __call__(self, step: int, metrics: Mapping[str, float]) -> None:
        self.sink.log(self.run_id, step, dict(metrics))
        if self.metric not in metrics:  # e.g. validation metrics every few steps
            return
        value = float(metrics[self.metric])
        self.objective.add(value)
        why = self.divergence.check(value)
        if why:
            raise StopRun("diverged", f"{why} at seed {self.seed}, step {step}")
        if (self.trial is not None and self.pruner != "wilcoxon" and step in self.marks
                and math.isfinite(self.objective.value())):
            self.trial.report(self.objective.value(),
                              self.seed_index * self.points + self.marks[step])
            if self.trial.should_prune():
                raise StopRun("pruned", f"{self.pruner} pruner at seed {self.seed}, "
                                        f"step {step}")

    def final_value(self, result: Mapping) -> float:
        """The run's objective once the task returned ``result``; ``StopRun`` (diverged) when
        the task says it diverged or the objective is not finite."""
        value = self.objective.value()
        if result.get("diverged") or not math.isfinite(value):
            raise StopRun("diverged", f"{self.metric} not finite at seed {self.seed}, step "
                                      f"{result.get('steps')}")
        return value


class SeedsMonitor:
    """The ``SeedsLogFn`` of a trial whose seeds run on one seed axis (``Task.run_seeds``).

    Each seed's metrics go through its own ``Monitor`` (its run, its objective, its divergence
    check; none of them reports to Optuna). At a report point, once every running seed has
    reached it, the trial reports the objective so far aggregated over those seeds as
    intermediate value ``i`` (the same for every trial of the study, which never mixes modes)
    and asks the pruner; a prune or any seed's divergence raises ``StopRun``, ending all seeds.
    """

    def __init__(self, sweep: Sweep, monitors: Sequence[Monitor], trial: optuna.Trial | None):
        spec = sweep.spec
        self.monitors, self.trial = list(monitors), trial
        self.pruner = spec.pruner.name
        self.aggregate = spec.objective.aggregate
        self.marks = report_steps(spec.budget.steps, spec.pruner.report_points)

    def __call__(self, step: int, per_seed: Sequence[Mapping[str, float] | None]) -> None:
        for monitor, metrics in zip(self.monitors, per_seed, strict=True):
            if metrics is not None:
                monitor(step, metrics)
        if self.trial is None or self.pruner == "wilcoxon" or step not in self.marks:
            return
        values = [m.objective.value() for m, metrics in zip(self.monitors, per_seed,
                                                              strict=True)
                  if metrics is not None]
        values = [v for v in values if math.isfinite(v)]
        if not values:
            return
        self.trial.report(stats.aggregate(values, self.aggregate), self.marks[step])
        if self.trial.should_prune():
            raise StopRun("pruned", f"{self.pruner} pruner at step {step} (all seeds)")
