"""The claim protocol: which worker runs which trial, and the repair of what a kill left.

A worker claims a trial under the store's lock (one per study) only while its study has fewer
finished plus running trials than the spec asks for, so running the same command again (or
several workers at once) never adds a trial beyond that number. A claimed trial records its
owner (host, pid) under that lock and beats a heartbeat while it runs.

A kill may land anywhere, and the next claim (under the same lock) repairs what it left:

- a trial closes out by ending its MLflow run first and telling Optuna second, so a kill in
  between leaves a RUNNING trial whose worker is gone;
- such a trial is failed at once when it has no owner (its claimer died inside the claim, and
  claims hold the lock), or its owner ran on this host and has ended; through its stale
  heartbeat otherwise;
- every MLflow run still RUNNING of a finished trial then takes that trial's status, and the run
  of a trial whose worker died is FAILED, even one that ended before the trial was told.

Before a new trial, a worker brings the study's complete trials to the sweep's seeds
(``claim_seeds``, ``workbench.engine.trial_seeds``): a trial that has run every seed asked for
has its objective recomputed at once; one that lacks seeds is claimed (a study attribute
``extending.NUMBER`` with its owner and heartbeat, as a held-out evaluation's) and extended by
running only those (``TrialRunner.extend``, ``end_extension``). A recomputed objective is
written to the trial run (metric ``objective`` at a later step, tag ``runs.OBJECTIVE_SEEDS``)
first, then replaces the Optuna trial's value (``WorkerStorage.replace_value``), then the
trial's seed record: a kill in between leaves the trial to recompute again.

An interrupted trial (Ctrl-C, SIGTERM: its worker marks it ``interrupted``) is no failure: the
next claim queues its parameters again (``requeue_interrupted``), and no count of failures
includes it.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial, TrialState

from workbench.common.processes import owner, process_alive, this_host
from workbench.engine import trial_seeds
from workbench.engine.outcomes import (  # noqa: F401 (re-exported: the engine's names)
    best_trial,
    failure_stop,
    interrupted,
    raised_count,
    worker_died,
)
from workbench.engine.studies import make_sampler, run_key, short_metric
from workbench.spec.plan import StudyPlan, Sweep
from workbench.stats import aggregates as stats
from workbench.store import runs, selection
from workbench.store.database import HEARTBEAT_GRACE_S, HEARTBEAT_INTERVAL_S, Store
from workbench.store.study_record import StudyRecord

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class Heartbeat:
    """Calls ``beat`` every ``HEARTBEAT_INTERVAL_S`` while the block runs, so that work whose
    worker was killed is later found stale (a trial's Optuna heartbeat, an evaluation's claim).
    A beat that fails is skipped: it only makes the work look stale sooner."""

    def __init__(self, beat: Callable[[], object]):
        self.beat = beat
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stop_event.wait(HEARTBEAT_INTERVAL_S):
            with contextlib.suppress(Exception):
                self.beat()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join()


@dataclass
class Claims:
    """Claims the trials of a sweep's studies for one worker, repairing what kills left first,
    and closes a study's run once the study is done (both under the study's lock)."""

    sweep: Sweep
    store: Store
    storage: optuna.storages.BaseStorage
    client: object  # an MlflowClient
    # study id -> its failed trials when this worker last searched its RUNNING runs
    _failed_seen: dict = field(default_factory=dict, init=False, repr=False)

    def claim(self, study: optuna.Study, plan: StudyPlan) -> optuna.Trial | None:
        """A new trial of ``study`` owned by this process, or None when none is left."""
        with self.store.lock(plan.name), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # heartbeats with ask/tell are what we want here
            trials = self._clean_up(study)
            if not self._may_claim(plan, trials):
                return None
            study.sampler = make_sampler(self.sweep, plan, len(trials))
            trial = study.ask()
            self.storage.record_heartbeat(trial._trial_id)
            trial.set_user_attr("worker", owner())
            return trial

    def close_study_run(self, study: optuna.Study, plan: StudyPlan, experiment_id: str) -> None:
        """End the study's runs once the study is done, under the claim lock so that one
        worker does it: this sweep's study run (in ``experiment_id``) by this sweep's trial
        count, and the study's home run, when another sweep's, by the count that sweep
        recorded. FINISHED with the best objective when the count is finished, FAILED (with
        the reason) when ``max_failed_trials`` stopped the study short of it."""
        with self.store.lock(plan.name):
            trials = study.get_trials(deepcopy=False)
            if any(t.state == TrialState.RUNNING for t in trials):
                return  # the worker running that trial closes the study run after it
            attrs = study.user_attrs
            if trial_seeds.pending(trials, attrs, self.sweep.seeds):
                return  # a trial still lacks seeds: the worker extending it closes after it
            own = attrs.get(run_key(experiment_id))
            home = attrs.get("mlflow_run_id")
            for run_id in dict.fromkeys(r for r in (own, home) if r):
                run = self.client.get_run(run_id)
                if run.data.tags.get(runs.STUDY_STATE) == runs.SUPERSEDED:
                    continue
                wanted = plan.n_trials if run_id == own else _recorded_trials(run)
                if wanted is not None:
                    self._close(run, trials, wanted, plan, attrs)

    def _close(self, run, trials, wanted: int, plan: StudyPlan, attrs: dict) -> None:
        status, run_id = run.info.status, run.info.run_id
        last = selection.cutoff(((t.number, t.state in FINISHED) for t in trials), wanted)
        counted = [t for t in trials if selection.counted(t.number, last)]
        if sum(t.state in FINISHED for t in counted) >= wanted:
            counted = trial_seeds.ranked(counted, attrs, self.sweep.seeds)  # for the best
            if status != runs.FINISHED or run.data.tags.get(runs.OBJECTIVE_SEEDS) != _listed(
                    self.sweep.seeds):  # once more when the seeds changed
                self._end_study_run(counted, plan, run_id, "complete")
        elif status == runs.RUNNING:
            reason = failure_stop(trials, self.sweep.spec.max_failed_trials)
            if reason:
                self._end_study_run(counted, plan, run_id, "fail",
                                    tags={runs.FAIL_REASON: reason})

    def _end_study_run(self, trials, plan, run_id: str, state: str, tags=None) -> None:
        metrics, name = {}, plan.label
        best = best_trial(trials, self.sweep.direction)
        tags = {**(tags or {}), runs.OBJECTIVE_SEEDS: _listed(self.sweep.seeds)}
        if best is not None:
            metrics["objective"] = best.value
            name = f"{plan.label} | best {short_metric(self.sweep.metric)}={best.value:.4g}"
        runs.finish_run(self.client, run_id, state, metrics=metrics, name=name, tags=tags)

    # ------------------------------------------------------------------ the sweep's seeds

    def claim_seeds(self, study: optuna.Study, plan: StudyPlan):
        """The next complete trial of the study to extend to the sweep's seeds, claimed for
        this process, as (trial, missing seeds, claim entry); None when none is left. Trials
        that need no new run are recomputed on the way."""
        seeds = self.sweep.seeds
        with self.store.lock(plan.name):
            attrs = study.user_attrs
            if trial_seeds.REVISION in attrs and hasattr(self.storage, "forget_finished"):
                self.storage.forget_finished(study._study_id, attrs[trial_seeds.REVISION])
            for t in trial_seeds.pending(study.get_trials(deepcopy=False), attrs, seeds):
                record = trial_seeds.of(t.user_attrs, attrs, t.number)
                missing = trial_seeds.missing(record, seeds)
                if not missing:
                    self._recompute(study, plan, t, record.values)
                    attrs = study.user_attrs
                    continue
                key = trial_seeds.extension_key(t.number)
                entry = attrs.get(key)
                if entry is not None and entry.get("state") == "running":
                    if not _abandoned(entry):
                        continue  # another worker extends it
                    self._fail_seed_runs(study, t)
                mine = {"state": "running", "owner": owner(), "beat": time.time(),
                        "seeds": list(seeds)}
                study.set_user_attr(key, mine)
                return t, missing, mine
        return None

    def beat(self, study: optuna.Study, number: int, entry: dict):
        """The heartbeat of an extension claim: its entry with the time now."""
        key = trial_seeds.extension_key(number)
        return lambda: self.storage.set_study_user_attr(study._study_id, key,
                                                        {**entry, "beat": time.time()})

    def end_extension(self, study: optuna.Study, plan: StudyPlan, trial, entry: dict,
                      state: str, values: dict | None = None, reason: str = "") -> None:
        """Record how an extension ended; once ``done``, the trial's objective over the
        sweep's seeds, from its stored seeds' objectives and ``values`` (the new ones)."""
        with self.store.lock(plan.name):
            if state == "done":
                record = trial_seeds.of(trial.user_attrs, study.user_attrs, trial.number)
                self._recompute(study, plan, trial, {**record.values, **values})
            study.set_user_attr(trial_seeds.extension_key(trial.number),
                                {**entry, "state": state, "reason": reason})

    def _recompute(self, study: optuna.Study, plan: StudyPlan, trial,
                   values: dict[int, float]) -> None:
        """Make ``trial``'s objective the aggregate of ``values`` over the sweep's seeds: in
        its trial run, then Optuna's value, then its seed record (called under the lock)."""
        seeds, attrs = self.sweep.seeds, study.user_attrs
        objective = stats.aggregate([values[s] for s in seeds],
                                    self.sweep.spec.objective.aggregate)
        revision = int(attrs.get(trial_seeds.REVISION, 0)) + 1
        run_id = trial.user_attrs.get("mlflow_run_id")
        if run_id:
            from mlflow.entities import Metric, RunTag

            name = f"{plan.label} t{trial.number} | {short_metric(self.sweep.metric)}=" \
                   f"{objective:.4g}"
            self.client.log_batch(run_id, metrics=[Metric("objective", objective,
                                                          int(time.time() * 1000), revision)],
                                  tags=[RunTag(runs.OBJECTIVE_SEEDS, _listed(seeds)),
                                        RunTag("mlflow.runName", name)])
        self.storage.replace_value(study._study_id, trial._trial_id, objective)
        study.set_user_attr(trial_seeds.record_key(trial.number),
                            trial_seeds.TrialSeeds(values, tuple(seeds)).to_attr())
        study.set_user_attr(trial_seeds.REVISION, revision)

    def _fail_seed_runs(self, study: optuna.Study, trial) -> None:
        """End the seed runs a dead extension of ``trial`` left RUNNING as failed."""
        found = self.client.search_runs(
            [study.user_attrs["mlflow_experiment_id"]],
            f"tags.`optuna.trial_id` = '{trial._trial_id}' and tags.`{runs.KIND}` = "
            f"'{runs.SEED}' and attributes.status = 'RUNNING'", max_results=10_000)
        for run in found:
            runs.finish_run(self.client, run.info.run_id, "fail",
                            tags={runs.FAIL_REASON: "worker died"})

    # ------------------------------------------------------------------ crash housekeeping

    def repair(self, study_name: str) -> None:
        """Fail the dead trials of a study this sweep no longer runs (superseded) and end the
        runs they left, under its lock; its crashed trials are not queued again."""
        with self.store.lock(study_name), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optuna.load_study(study_name=study_name, storage=self.storage)
            optuna.storages.fail_stale_trials(study)
            self._fail_dead_trials(study.get_trials(deepcopy=False))
            self._close_orphans(study, study.get_trials(deepcopy=False))

    def _clean_up(self, study: optuna.Study) -> list:
        """Fail dead trials, end the runs they left, queue retries; the trials after that.

        The trials are read again only after a step changed them (a dead trial failed, a
        crashed one queued), so a claim with nothing to repair reads them once."""
        optuna.storages.fail_stale_trials(study)
        trials = study.get_trials(deepcopy=False)
        if self._fail_dead_trials(trials):
            trials = study.get_trials(deepcopy=False)
        self._close_orphans(study, trials)
        if self._retry_crashed(study, trials) | bool(requeue_interrupted(study, trials)):
            trials = study.get_trials(deepcopy=False)
        return trials

    def requeue(self, plans: list[StudyPlan]) -> int:
        """Queue the interrupted trials of ``plans``' studies again (each under its lock), as
        the next claim would; how many were queued now (for the user's line after Ctrl-C)."""
        existing = {s.study_name for s in optuna.get_all_study_summaries(self.storage, False)}
        queued = 0
        for plan in plans:
            if plan.name not in existing:
                continue
            with self.store.lock(plan.name), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                study = optuna.load_study(study_name=plan.name, storage=self.storage)
                queued += requeue_interrupted(study, study.get_trials(deepcopy=False))
        return queued

    def stop_all(self, plans: list[StudyPlan], reason: str) -> int:
        """Mark each RUNNING trial of ``plans``' studies that no live worker runs any more
        (this process's, or a worker that has ended) as stopped by ``reason`` (a full disk):
        FAIL with ``interrupted`` set, so that the next claim queues its parameters again and
        no count of failures includes it; its runs end FAILED with the reason. How many."""
        existing = {s.study_name for s in optuna.get_all_study_summaries(self.storage, False)}
        stopped = 0
        for plan in plans:
            if plan.name not in existing:
                continue
            with self.store.lock(plan.name), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                study = optuna.load_study(study_name=plan.name, storage=self.storage)
                before = stopped
                for t in study.get_trials(deepcopy=False):
                    worker = t.user_attrs.get("worker")
                    if t.state != TrialState.RUNNING or (may_be_running(worker)
                                                         and worker != owner()):
                        continue
                    self.storage.set_trial_user_attr(t._trial_id, "interrupted", reason)
                    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                        self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
                    stopped += 1
                if stopped > before:
                    self._close_orphans(study, study.get_trials(deepcopy=False))
        return stopped

    def _may_claim(self, plan: StudyPlan, trials) -> bool:
        """Fewer finished plus running trials than the study asks for, and failures left.

        Once a trial has failed, running trials count as failures to come: the study then runs
        only as many trials at once as it has failures left, so it never ends with more than
        ``max_failed_trials`` failed trials, unless its first failures come together (at most
        one per worker running it)."""
        running = sum(t.state == TrialState.RUNNING for t in trials)
        finished = sum(t.state in FINISHED for t in trials)
        raised, limit = raised_count(trials), self.sweep.spec.max_failed_trials
        if finished + running >= plan.n_trials or raised >= limit:
            return False
        return raised == 0 or raised + running < limit

    def _fail_dead_trials(self, trials) -> bool:
        """Fail each RUNNING trial whose worker is gone (called under the claim lock); whether
        any was."""
        found = False
        for t in trials:
            if t.state == TrialState.RUNNING and not may_be_running(t.user_attrs.get("worker")):
                found = True
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                    self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        return found

    def _retry_crashed(self, study, trials) -> bool:
        """Queue the parameters of a trial whose worker died (not one whose method raised)
        again, once, when the spec says so (``retry_crashed``); whether any was queued."""
        if not self.sweep.spec.retry_crashed:
            return False
        crashed = [t for t in trials if worker_died(t) and t.params]
        if not crashed:
            return False  # no study attributes to read
        marks, queued = study.user_attrs, False
        for t in crashed:
            if f"retried.{t.number}" not in marks:
                study.enqueue_trial(t.params, user_attrs={"retry_of": t.number},
                                    skip_if_exists=False)
                study.set_user_attr(f"retried.{t.number}", True)
                queued = True
        return queued

    def _close_orphans(self, study, trials) -> None:
        """Make the MLflow runs of finished trials agree with them, whatever a kill left: a
        run still RUNNING takes its trial's status; the trial run of a trial whose worker died
        is FAILED, even one that ended before the trial was told."""
        # A trial ends its runs before it is told, so only a failed trial (a kill, a raise) can
        # leave a run RUNNING: the runs are searched at this worker's first claim of the study
        # and again each time the study has more failed trials, not at every claim
        failed = sum(t.state == TrialState.FAIL for t in trials)
        if self._failed_seen.get(study._study_id) != failed:
            by_number = {t.number: t for t in trials}
            attrs = None
            for run in self._running_runs(study):
                trial = by_number.get(int(run.data.tags.get("optuna.trial_number", -1)))
                if trial is None or not trial.state.is_finished():
                    continue
                attrs = study.user_attrs if attrs is None else attrs
                entry = attrs.get(trial_seeds.extension_key(trial.number)) or {}
                if entry.get("state") == "running":
                    continue  # a new seed run of an extension: ``claim_seeds`` repairs it
                self._end_like(run.info.run_id, trial)
            self._failed_seen[study._study_id] = failed
        died = [t for t in trials if worker_died(t)]
        if not died:
            return
        marks = study.user_attrs  # finished trials cannot take attributes: the study keeps them
        for t in died:
            if f"closed.{t.number}" not in marks:
                run_id = t.user_attrs.get("mlflow_run_id")
                if run_id and self.client.get_run(run_id).info.status != runs.FAILED:
                    self._end_like(run_id, t)
                study.set_user_attr(f"closed.{t.number}", True)

    def _running_runs(self, study: optuna.Study) -> list:
        """The MLflow runs of the study's trials and seeds still marked RUNNING."""
        return self.client.search_runs(
            [study.user_attrs["mlflow_experiment_id"]],
            f"tags.`optuna.study_id` = '{study._study_id}' and attributes.status = 'RUNNING'",
            max_results=10_000)

    def _end_like(self, run_id: str, trial: FrozenTrial) -> None:
        """End an MLflow run with the status of its (finished) trial."""
        if trial.state != TrialState.FAIL:
            state = "complete" if trial.state == TrialState.COMPLETE else "pruned"
            runs.finish_run(self.client, run_id, state)
            return
        reason = (trial.user_attrs.get("fail_reason") or trial.user_attrs.get("interrupted")
                  or "worker died")
        runs.finish_run(self.client, run_id, "fail", tags={runs.FAIL_REASON: reason})


def requeue_interrupted(study: optuna.Study, trials) -> int:
    """Queue each interrupted trial of ``study`` (``outcomes.interrupted``) again with its
    parameters, once (the study's ``requeued.N`` marks it; called under the claim lock): an
    interrupt is no failure, the trial runs again when the sweep is resumed. How many were
    queued now."""
    found = [t for t in trials if interrupted(t)]
    if not found:
        return 0  # no study attributes to read
    marks, queued = study.user_attrs, 0
    for t in found:
        if f"requeued.{t.number}" not in marks:
            study.enqueue_trial(t.params, user_attrs={"requeue_of": t.number},
                                skip_if_exists=False)
            study.set_user_attr(f"requeued.{t.number}", True)
            queued += 1
    return queued


def _recorded_trials(run) -> int | None:
    """The trial count the sweep that owns a study run recorded in it."""
    try:
        record = StudyRecord.from_tags(run.data.tags)
    except ValueError:
        return None
    return None if record is None else record.trials


def _listed(seeds: list[int]) -> str:
    return ",".join(map(str, seeds))


def _abandoned(entry: dict) -> bool:
    """Whether a running extension claim may be taken again: its owner is gone (this host's
    process ended, or another host's heartbeat is stale)."""
    who = entry.get("owner") or {}
    if who.get("host") == this_host():
        return not process_alive(int(who.get("pid", -1)))
    return time.time() - float(entry.get("beat", 0.0)) > HEARTBEAT_GRACE_S


def may_be_running(owner: dict | None) -> bool:
    """Whether a RUNNING trial's worker may still run it, seen under the claim lock.

    No owner: its claimer died inside the claim (which records the owner under the lock held
    now), so nobody runs it. An owner on this host runs it while its process lives. Another
    host's owner is trusted until Optuna finds its heartbeat stale."""
    if owner is None:
        return False
    return owner["host"] != this_host() or process_alive(owner["pid"])
