"""Where each study of a sweep stands: trials per state, the best value, why it stopped, and
whether its results are up to date, stale or superseded.

A sweep counts the trials of a study up to its own trial count (``workbench.selection``): a
study shared with a sweep that asked for more trials shows this sweep's share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from workbench import fingerprint, runs, selection
from workbench.engine.claims import FINISHED, best_trial, failure_stop
from workbench.engine.studies import study_runs
from workbench.spec import Sweep
from workbench.study_record import StudyRecord

UP_TO_DATE, NOT_STARTED, STALE, SUPERSEDED = "up to date", "not started", "stale", "superseded"


@dataclass
class StudyStatus:
    """One study's trials per state, its best value and parameters, and its failures."""

    name: str
    label: str
    total: int
    complete: int
    pruned: int
    failed: int
    running: int
    best_value: float | None
    best_params: dict
    fail_reasons: list[str] = field(default_factory=list)
    stop_reason: str | None = None  # why it claims no more trials though short
    fingerprint: str = ""
    state: str = ""  # UP_TO_DATE, NOT_STARTED, STALE or SUPERSEDED (``sweep_status``)
    note: str = ""  # what changed (stale, superseded) or where its trials live (shared)

    @property
    def finished(self) -> int:
        return self.complete + self.pruned

    def shortfall(self) -> str | None:
        """Why the study ended with fewer finished trials than it asks for, once no trial of
        it is running; None when it is complete or another process still runs some."""
        if self.finished >= self.total or self.running:
            return None
        return self.stop_reason or "no trial left to claim; run the same command again"


def study_status(sweep: Sweep, storage) -> list[StudyStatus]:
    """Trials per state and the best value of every study of the sweep (missing studies count
    as empty)."""
    existing = {s.study_name for s in optuna.get_all_study_summaries(storage, False)}
    return [_status(plan.name, plan.label, plan.n_trials, sweep, storage, existing,
                    plan.fingerprint) for plan in sweep.studies]


def _status(name: str, label: str, total: int, sweep: Sweep, storage, existing,
            digest: str) -> StudyStatus:
    counts = dict.fromkeys(TrialState, 0)
    best_value, best_params, reasons, stop = None, {}, [], None
    if name in existing:
        trials = optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
        last = selection.cutoff(((t.number, t.state in FINISHED) for t in trials), total)
        for t in trials:
            if t.state == TrialState.RUNNING or selection.counted(t.number, last):
                counts[t.state] += 1
                if t.state == TrialState.FAIL:
                    reasons.append(t.user_attrs.get("fail_reason")
                                   or t.user_attrs.get("interrupted", "worker died"))
        best = best_trial([t for t in trials if selection.counted(t.number, last)],
                          sweep.direction)
        if best is not None:
            best_value, best_params = best.value, best.params
        if counts[TrialState.COMPLETE] + counts[TrialState.PRUNED] < total:
            stop = failure_stop(trials, sweep.spec.max_failed_trials)
    return StudyStatus(name, label, total, counts[TrialState.COMPLETE],
                       counts[TrialState.PRUNED], counts[TrialState.FAIL],
                       counts[TrialState.RUNNING], best_value, best_params, reasons, stop,
                       digest)


def sweep_status(sweep: Sweep, store) -> list[StudyStatus]:
    """``study_status`` with each study's state, then the other studies the sweep's experiment
    holds: stale (the sweep still shows it, but the spec or the code has changed since: the
    note says what) or superseded (a later version of the sweep replaced it)."""
    storage = store.optuna_storage()
    statuses = study_status(sweep, storage)
    client = store.mlflow_client()
    experiment = client.get_experiment_by_name(sweep.name)
    recorded = study_runs(client, experiment.experiment_id) if experiment else []
    by_fingerprint = {run.data.tags.get(runs.FINGERPRINT): run for run in recorded}
    for status in statuses:
        run = by_fingerprint.get(status.fingerprint)
        status.state = UP_TO_DATE if status.finished or status.running else NOT_STARTED
        if run is not None and runs.HOME_EXPERIMENT in run.data.tags:
            home = client.get_experiment(run.data.tags[runs.HOME_EXPERIMENT])
            status.note = f"trials in sweep {home.name}"
    plans = {plan.label: plan for plan in sweep.studies}
    existing = {s.study_name for s in optuna.get_all_study_summaries(storage, False)}
    for run in recorded:
        tags = run.data.tags
        digest = tags.get(runs.FINGERPRINT, "")
        if digest and digest in {s.fingerprint for s in statuses}:
            continue
        try:
            record = StudyRecord.from_tags(tags)
        except ValueError:
            record = None
        label = tags.get(runs.METHOD, "?")
        status = _status(tags.get(runs.STUDY_NAME, ""), label,
                         record.trials if record else 0, sweep, storage, existing, digest)
        if tags.get(runs.STUDY_STATE) == runs.SUPERSEDED:
            status.state, status.note = SUPERSEDED, tags.get(runs.SUPERSEDED_NOTE, "")
        else:
            status.state = STALE
            status.note = _stale_note(tags, plans.get(label))
        statuses.append(status)
    return statuses


def _stale_note(tags: dict, plan) -> str:
    """What differs between a study the sweep still shows and what the sweep would run now."""
    text = runs.joined_tag(tags, runs.FINGERPRINT_DOC)
    if text is None:
        return "written by an earlier workbench, without a fingerprint"
    if plan is None:
        return "no longer in the spec"
    old, _ = json.JSONDecoder().raw_decode(text)
    return fingerprint.changes(old, plan.document) + "; run the sweep to replace it"
