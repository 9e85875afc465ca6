"""Where each study of a sweep stands: trials per state, the best value, why it stopped, and
whether its results are up to date, stale or superseded.

A sweep counts the trials of a study up to its own trial count (``workbench.store.selection``): a
study shared with a sweep that asked for more trials shows this sweep's share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlalchemy as sa

from workbench.common import fingerprint
from workbench.engine import trial_seeds
from workbench.engine.outcomes import (
    FINISHED_STATES,
    best_trial,
    failure_stop,
    interrupted,
    state,
)
from workbench.store import optuna_tables, runs, selection
from workbench.store.study_record import StudyRecord

if TYPE_CHECKING:  # either, the second kept between calls (`workbench.spec.resolved`)
    from workbench.spec.plan import Sweep
    from workbench.spec.resolved import ResolvedSweep

UP_TO_DATE, NOT_STARTED, STALE, SUPERSEDED = "up to date", "not started", "stale", "superseded"
SEEDS_TO_ADD = "seeds to add"  # complete trials whose objective is over other seeds


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
    other_seeds: int = 0  # counted complete trials whose objective is over other seeds

    @property
    def finished(self) -> int:
        return self.complete + self.pruned

    def shortfall(self) -> str | None:
        """Why the study ended with fewer finished trials than it asks for, once no trial of
        it is running; None when it is complete or another process still runs some."""
        if self.finished >= self.total or self.running:
            return None
        return self.stop_reason or "no trial left to claim; run the same command again"


def study_status(sweep: Sweep | ResolvedSweep, store) -> list[StudyStatus]:
    """Trials per state and the best value of every study of the sweep (missing studies count
    as empty), read from Optuna's tables (``workbench.store.optuna_tables``)."""
    existing = optuna_tables.study_ids(store.optuna_url)
    return [_status(plan.name, plan.label, plan.n_trials, sweep, store, existing,
                    plan.fingerprint) for plan in sweep.studies]


def _status(name: str, label: str, total: int, sweep: Sweep | ResolvedSweep, store,
            existing: dict[str, int], digest: str) -> StudyStatus:
    counts = dict.fromkeys(("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING"), 0)
    best_value, best_params, reasons, stop, other = None, {}, [], None, 0
    if name in existing:
        trials = optuna_tables.trials(store.optuna_url, existing[name])
        attrs = optuna_tables.study_user_attrs(store.optuna_url, existing[name])
        last = selection.cutoff(((t.number, state(t) in FINISHED_STATES) for t in trials),
                                total)
        for t in trials:
            if interrupted(t):  # queued again: the trial that replaces it counts
                continue
            if state(t) == "RUNNING" or selection.counted(t.number, last):
                counts[state(t)] += 1
                if state(t) == "FAIL":
                    reasons.append(t.user_attrs.get("fail_reason", "worker died"))
        counted = [t for t in trials if selection.counted(t.number, last)]
        ranked = trial_seeds.ranked(counted, attrs, sweep.seeds)
        other = len(counted) - len(ranked)
        best = best_trial(ranked, sweep.direction)
        if best is not None:
            best_value, best_params = best.value, best.params
        if counts["COMPLETE"] + counts["PRUNED"] < total:
            stop = failure_stop(trials, sweep.max_failed_trials)
    return StudyStatus(name, label, total, counts["COMPLETE"], counts["PRUNED"],
                       counts["FAIL"], counts["RUNNING"], best_value, best_params, reasons,
                       stop, digest, other_seeds=other)


def sweep_status(sweep: Sweep | ResolvedSweep, store) -> list[StudyStatus]:
    """``study_status`` with each study's state, then the other studies the sweep's experiment
    holds: stale (the sweep still shows it, but the spec or the code has changed since: the
    note says what) or superseded (a later version of the sweep replaced it). The study runs'
    tags are read with SQL (no MLflow client to import)."""
    statuses = study_status(sweep, store)
    recorded, experiment_names = _study_run_tags(store, sweep.name)
    by_fingerprint = {tags.get(runs.FINGERPRINT): tags for tags in recorded}
    for status in statuses:
        tags = by_fingerprint.get(status.fingerprint)
        status.state = UP_TO_DATE if status.finished or status.running else NOT_STARTED
        if status.other_seeds:
            status.state = SEEDS_TO_ADD
            status.note = (f"{status.other_seeds} complete trials have their objective over "
                           f"other seeds than {_shown(sweep.seeds)} (not ranked); run the "
                           "sweep to run the seeds they lack")
        if tags is not None and runs.HOME_EXPERIMENT in tags:
            home = experiment_names.get(tags[runs.HOME_EXPERIMENT], "?")
            status.note = "; ".join(filter(None, (f"trials in sweep {home}", status.note)))
    plans = {plan.label: plan for plan in sweep.studies}
    existing = optuna_tables.study_ids(store.optuna_url)
    for tags in recorded:
        digest = tags.get(runs.FINGERPRINT, "")
        if digest and digest in {s.fingerprint for s in statuses}:
            continue
        try:
            record = StudyRecord.from_tags(tags)
        except ValueError:
            record = None
        label = tags.get(runs.METHOD, "?")
        status = _status(tags.get(runs.STUDY_NAME, ""), label,
                         record.trials if record else 0, sweep, store, existing, digest)
        if tags.get(runs.STUDY_STATE) == runs.SUPERSEDED:
            status.state, status.note = SUPERSEDED, tags.get(runs.SUPERSEDED_NOTE, "")
        else:
            status.state = STALE
            status.note = _stale_note(tags, plans.get(label))
        statuses.append(status)
    return statuses


def _study_run_tags(store, sweep_name: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """(the tags of each active study run of the sweep's experiment, oldest first; every
    experiment's name by id), read from MLflow's tables."""
    engine = sa.create_engine(store.mlflow_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        names = {str(i): n for i, n in conn.execute(sa.text(
            "SELECT experiment_id, name FROM experiments"))}
        rows = conn.execute(sa.text(
            "SELECT r.run_uuid, t.key, t.value FROM runs r "
            "JOIN experiments e ON e.experiment_id = r.experiment_id "
            "JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE e.name = :sweep AND e.lifecycle_stage = 'active' "
            "AND r.lifecycle_stage = 'active' AND r.run_uuid IN (SELECT run_uuid FROM tags "
            "WHERE key = :kind AND value = :study) ORDER BY r.start_time, r.run_uuid"),
            {"sweep": sweep_name, "kind": runs.KIND, "study": runs.STUDY}).all()
    tags: dict[str, dict[str, str]] = {}
    for run, key, value in rows:
        tags.setdefault(run, {})[key] = value
    return list(tags.values()), names


def _shown(seeds: list[int]) -> str:
    """``[0, 1, 2]``, or ``[0..29] (30)`` for a long list."""
    if len(seeds) > 6:
        return f"[{seeds[0]}..{seeds[-1]}] ({len(seeds)})"
    return str(list(seeds))


def _stale_note(tags: dict, plan) -> str:
    """What differs between a study the sweep still shows and what the sweep would run now."""
    text = runs.joined_tag(tags, runs.FINGERPRINT_DOC)
    if text is None:
        return "written by an earlier workbench, without a fingerprint"
    if plan is None:
        return "no longer in the spec"
    old, _ = json.JSONDecoder().raw_decode(text)
    return fingerprint.changes(old, plan.document) + "; run the sweep to replace it"
