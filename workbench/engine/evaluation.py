"""Held-out evaluation: each study's best trial re-run on seeds never used for tuning.

The best trial is chosen on the tuning seeds, so its numbers there are biased upward (the
maximum of noisy estimates: the winner's curse), and more so for methods with more knobs. With
``evaluation:`` in the spec, once a study has its trials, its best trial (among the trials this
sweep counts, ``workbench.store.selection``) runs again on each held-out seed, one MLflow run
of kind ``evaluation`` each, under the trial's run (tag ``runs.EVALUATES``: the trial's number). The
report shows those runs in place of the tuning seeds.

Evaluations are claimed like trials, under the study's lock: the study's user attribute
``eval.TRIAL.SEED`` records who runs which seed (``running`` with its owner and a heartbeat;
then ``done``, ``diverged`` or ``failed``). A claim whose owner has died (this host: its process
is gone; another host: its heartbeat is ``HEARTBEAT_GRACE_S`` old) or was interrupted is taken
again; an evaluation whose method raised is not (it would raise again).

``decide`` is the rule of ``evaluation: {seeds: {min, max, until: separated}}``: after each
round, more seeds only while the interval of the best study's aggregate overlaps the second's.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback
from dataclasses import dataclass

import optuna
import torch

from workbench.common.processes import process_alive, this_host
from workbench.engine import trial_seeds
from workbench.engine.claims import FINISHED, Heartbeat, best_trial
from workbench.engine.monitor import Monitor, StopRun
from workbench.engine.studies import short_metric
from workbench.engine.trial import build_methods, execute, run_params, run_tags
from workbench.spec.plan import StudyPlan, Sweep
from workbench.stats import aggregates as stats
from workbench.store import disk_space, runs, selection
from workbench.store.database import HEARTBEAT_GRACE_S, Store
from workbench.store.sink import MetricSink
from workbench.store.study_record import EvaluationOutcome

DONE, DIVERGED, FAILED, RUNNING, INTERRUPTED = (
    "done", "diverged", "failed", "running", "interrupted")


def entry_key(trial_number: int, seed: int) -> str:
    return f"eval.{trial_number}.{seed}"


def best_counted_trial(study: optuna.Study, plan: StudyPlan, sweep: Sweep):
    """The study's best trial among those the sweep counts, once it has its finished trials,
    none runs and every complete one has its objective over the sweep's seeds; None before
    (or when none is complete)."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state == optuna.trial.TrialState.RUNNING for t in trials):
        return None
    attrs = study.user_attrs
    if trial_seeds.pending(trials, attrs, sweep.seeds):
        return None
    last = selection.cutoff(((t.number, t.state in FINISHED) for t in trials), plan.n_trials)
    counted = [t for t in trials if selection.counted(t.number, last)]
    if sum(t.state in FINISHED for t in counted) < plan.n_trials:
        return None
    return best_trial(trial_seeds.ranked(counted, attrs, sweep.seeds), sweep.direction)


@dataclass
class Evaluator:
    """Claims and runs the held-out evaluations of a sweep's studies for one worker."""

    sweep: Sweep
    store: Store
    storage: optuna.storages.BaseStorage
    client: object  # an MlflowClient
    sink: MetricSink
    device: torch.device

    def run(self, study: optuna.Study, plan: StudyPlan, seeds: list[int]) -> None:
        """Evaluate the study's best trial on every seed of ``seeds`` not yet evaluated."""
        while (claim := self.claim(study, plan, seeds)) is not None:
            self._evaluate(study, plan, *claim)

    def claim(self, study: optuna.Study, plan: StudyPlan, seeds: list[int]):
        """(best trial, seed, entry) claimed for this process, or None when nothing is left."""
        with self.store.lock(plan.name):
            best = best_counted_trial(study, plan, self.sweep)
            if best is None:
                return None
            attrs = study.user_attrs
            for seed in seeds:
                key = entry_key(best.number, seed)
                entry = attrs.get(key)
                if entry is not None and not _abandoned(entry):
                    continue
                if entry is not None and entry.get("run_id"):
                    runs.finish_run(self.client, entry["run_id"], "fail",
                                    tags={runs.FAIL_REASON: "worker died"})
                mine = {"state": RUNNING, "owner": {"host": this_host(),
                                                    "pid": os.getpid()}, "beat": time.time()}
                study.set_user_attr(key, mine)
                return best, seed, mine
        return None

    def _evaluate(self, study, plan: StudyPlan, best, seed: int, entry: dict) -> None:
        sweep, key = self.sweep, entry_key(best.number, seed)
        methods, config = build_methods(plan, best.params)
        name = f"{plan.label} t{best.number} held-out s{seed}"
        tags = {**run_tags(sweep, plan, study, self.device), runs.KIND: runs.EVALUATION,
                runs.SEED_TAG: seed, runs.EVALUATES: best.number}
        run_id = runs.start_run(self.client, study.user_attrs["mlflow_experiment_id"], name,
                                tags=tags,
                                params={**run_params(sweep, plan, self.device, config),
                                        "seed": seed},
                                parent=best.user_attrs["mlflow_run_id"])
        entry = {**entry, "run_id": run_id}
        study.set_user_attr(key, entry)
        index = len(sweep.seeds) + sweep.evaluation.seeds.index(seed)
        monitor = Monitor(sweep, self.sink, run_id, None, seed, index)
        state = FAILED
        try:
            with Heartbeat(lambda: self.storage.set_study_user_attr(
                    study._study_id, key, {**entry, "beat": time.time()})):
                try:
                    value = monitor.final_value(execute(sweep, plan, methods, seed, self.device,
                                                        monitor))
                except StopRun as stop:  # a held-out seed that diverges is a result
                    self.sink.flush()
                    runs.finish_run(self.client, run_id, "complete",
                                    tags={runs.DIVERGED: stop.detail},
                                    name=f"{name} | diverged")
                    state = DIVERGED
                    return
                self.sink.flush()
                runs.finish_run(self.client, run_id, "complete", metrics={"objective": value},
                                name=f"{name} | {short_metric(sweep.metric)}={value:.4g}")
                state = DONE
        except BaseException as err:
            if disk_space.is_disk_full(err):
                raise  # its claim is taken again on resume (store.disk_space)
            self.sink.flush()
            reason = f"{type(err).__name__}: {err}"[:500]
            with contextlib.suppress(Exception):
                self.client.log_text(run_id, "".join(traceback.format_exception(err)),
                                     "traceback.txt")
            runs.finish_run(self.client, run_id, "fail", tags={runs.FAIL_REASON: reason})
            state = FAILED if isinstance(err, Exception) else INTERRUPTED
            if not isinstance(err, Exception):
                raise
        finally:
            study.set_user_attr(key, {**entry, "state": state})


def _abandoned(entry: dict) -> bool:
    """Whether a claim may be taken again: interrupted, or running under a dead owner."""
    if entry.get("state") == INTERRUPTED:
        return True
    if entry.get("state") != RUNNING:
        return False
    owner = entry.get("owner") or {}
    if owner.get("host") == this_host():
        return not process_alive(int(owner.get("pid", -1)))
    return time.time() - float(entry.get("beat", 0.0)) > HEARTBEAT_GRACE_S


# ---------------------------------------------------------------------- the adaptive rule


def held_out_values(sweep: Sweep, storage, client) -> dict[str, dict[int, float]] | None:
    """Per study label, each held-out seed's objective of its best trial (a diverged seed
    counts as the worst possible value); None while a study has no best trial yet."""
    worst = math.inf if sweep.direction == "minimize" else -math.inf
    found = {}
    for plan in sweep.studies:
        study = optuna.load_study(study_name=plan.name, storage=storage)
        best = best_counted_trial(study, plan, sweep)
        if best is None:
            return None
        values = {}
        query = (f"tags.`{runs.STUDY_NAME}` = '{plan.name}' and tags.`{runs.KIND}` = "
                 f"'{runs.EVALUATION}' and tags.`{runs.EVALUATES}` = '{best.number}' and "
                 "attributes.status = 'FINISHED'")
        for run in client.search_runs([study.user_attrs["mlflow_experiment_id"]], query,
                                      max_results=50_000):
            seed = int(run.data.tags[runs.SEED_TAG])
            values[seed] = (worst if runs.DIVERGED in run.data.tags
                            else run.data.metrics.get("objective", math.nan))
        found[plan.label] = values
    return found


def decide(sweep: Sweep, values: dict[str, dict[int, float]],
           count: int) -> EvaluationOutcome | None:
    """The outcome once ``count`` held-out seeds ran: ``fixed`` (as asked, or nothing to
    compare), ``separated``, ``maximum`` or ``incomplete`` (an evaluation failed or is
    missing); None when the rule asks for another round."""
    plan = sweep.evaluation
    seeds = plan.seeds[:count]
    if any(any(s not in v or math.isnan(v[s]) for s in seeds) for v in values.values()):
        return EvaluationOutcome(seeds=count, reason="incomplete")
    if plan.rule == "fixed" or len(values) < 2:
        return EvaluationOutcome(seeds=count, reason="fixed")
    options = sweep.spec.report
    sign = 1.0 if sweep.direction == "minimize" else -1.0
    scored = sorted(values, key=lambda label: sign * stats.aggregate(
        [values[label][s] for s in seeds], options.aggregate))
    best, second = scored[0], scored[1]
    a, b = (stats.interval([values[label][s] for s in seeds], options.aggregate,
                           options.confidence) for label in (best, second))
    if (a.high < b.low) if sign > 0 else (a.low > b.high):
        return EvaluationOutcome(seeds=count, reason="separated", best=best, second=second)
    if count >= len(plan.seeds):
        return EvaluationOutcome(seeds=count, reason="maximum", best=best, second=second)
    return None
