"""The sweep engine: one Optuna study per method combination, trials over every seed.

A worker claims a trial under the store's lock only while its study has fewer finished plus
running trials than the spec asks for, so running the same command again (or several workers
at once) never adds a trial beyond that number. A claimed trial samples its hyperparameters,
runs the task once per seed (one MLflow run each), reports intermediate values for pruning at
``pruner.report_points`` steps per seed (intermediate step ``seed_index * points + i``, the
same for every trial) and returns the objective aggregated over seeds.

A kill may land anywhere, and the next claim (under the same lock) repairs what it left:

- a trial closes out by ending its MLflow run first and telling Optuna second, so a kill in
  between leaves a RUNNING trial whose worker is gone;
- such a trial is failed at once when it has no owner (its claimer died inside the claim, and
  claims hold the lock), or its owner ran on this host and has ended; through its stale
  heartbeat otherwise;
- every MLflow run still RUNNING of a finished trial then takes that trial's status, and the run
  of a trial whose worker died is FAILED, even one that ended before the trial was told.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import platform
import re
import signal
import sys
import threading
import time
import traceback
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
import torch
from optuna.trial import TrialState

from workbench import layout, seeds, stats, tracking
from workbench.cache import cache_root
from workbench.objective import ObjectiveTracker
from workbench.processes import process_alive
from workbench.sink import MetricSink
from workbench.spec import SpecError, StudyPlan, Sweep, load
from workbench.store import HEARTBEAT_INTERVAL_S, Store

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


class StopRun(Exception):
    """Ends a trial early, marked pruned: the pruner said so, or the run diverged."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def resolve_device(name: str | None) -> torch.device:
    """``auto`` (or None): CUDA when available, else the CPU."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if name != "cpu" and match is None:
        raise SpecError("--device", "", f"unknown device {name!r}; allowed: auto, cpu, cuda, "
                        "cuda:N")
    if match is not None:
        if not torch.cuda.is_available():
            raise SpecError("--device", "", f"{name} was asked for but "
                            "torch.cuda.is_available() is false; allowed here: auto, cpu")
        index = int(match.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise SpecError("--device", "", f"{name}: this machine has "
                            f"{torch.cuda.device_count()} CUDA device(s)")
    return torch.device(name)


def make_sampler(sweep: Sweep, plan: StudyPlan, salt: int) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded from the spec's seed, the study and ``salt`` (the number of
    trials so far), so a resumed or parallel worker does not replay earlier draws."""
    spec = sweep.spec.sampler
    seed = zlib.crc32(f"{spec.seed}:{plan.name}:{salt}".encode())
    if spec.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.name == "grid":
        return optuna.samplers.GridSampler(plan.grid(spec.grid_points), seed=seed)
    if spec.name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=spec.startup_trials,
                                            warn_independent_sampling=False)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.startup_trials,
                                      constant_liar=True)


def make_pruner(sweep: Sweep) -> optuna.pruners.BasePruner:
    spec = sweep.spec.pruner
    if spec.name == "none":
        return optuna.pruners.NopPruner()
    if spec.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=len(sweep.seeds) * spec.report_points,
            reduction_factor=spec.reduction_factor)
    return optuna.pruners.MedianPruner(n_startup_trials=spec.startup_trials,
                                       n_warmup_steps=spec.warmup_steps)


def report_steps(steps: int, points: int) -> dict[int, int]:
    """Training step -> index of the intermediate value reported there."""
    marks = sorted({max(1, round(steps * (i + 1) / points)) for i in range(points)})
    return {step: i for i, step in enumerate(marks)}


def suggest(trial: optuna.Trial, name: str, dist) -> object:
    if isinstance(dist, optuna.distributions.FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=dist.log)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    return trial.suggest_categorical(name, dist.choices)


class Heartbeat:
    """Records the trial's heartbeat so a killed worker's trial is later found stale."""

    def __init__(self, storage, trial_id: int):
        self.storage, self.trial_id = storage, trial_id
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self.stop_event.wait(HEARTBEAT_INTERVAL_S):
            try:
                self.storage.record_heartbeat(self.trial_id)
            except Exception:  # a missed beat only makes the trial look stale later
                pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join()


def setup(sweep: Sweep, store: Store) -> None:
    """Create the store, the experiment, every study and its parent run (idempotent)."""
    with store.lock("store"):  # several processes, maybe of other sweeps, may create it at once
        store.prepare(cache_root())
    with store.lock(f"setup:{sweep.name}"):
        storage = store.optuna_storage()
        client = store.mlflow_client()
        experiment_id = tracking.ensure_experiment(client, sweep.name, store.artifact_root)
        for plan in sweep.studies:
            study = optuna.create_study(study_name=plan.name, storage=storage,
                                        direction=sweep.direction, load_if_exists=True)
            if "mlflow_run_id" in study.user_attrs:
                continue
            tags = {**tracking.provenance(), **_plan_tags(sweep, plan),
                    layout.KIND: layout.STUDY, "optuna.study_name": plan.name,
                    "optuna.study_id": study._study_id}
            run_id = tracking.start_run(client, experiment_id, plan.label, tags=tags,
                                        params=_study_params(sweep, plan))
            study.set_user_attr("mlflow_run_id", run_id)
            study.set_user_attr("mlflow_experiment_id", experiment_id)
            study.set_user_attr("sweep", sweep.name)
            study.set_user_attr("combination", plan.combination)
            study.set_user_attr("n_trials", plan.n_trials)


def _plan_tags(sweep: Sweep, plan: StudyPlan) -> dict[str, str]:
    tags = {layout.SWEEP: sweep.name, layout.STUDY_NAME: plan.name,
            layout.METHOD: plan.label, layout.TASK: sweep.task.name}
    for m in plan.methods:
        tags[layout.slot_tag(layout.METHOD, m.slot)] = m.cls.name
        tags[layout.slot_tag(layout.FIDELITY, m.slot)] = m.cls.fidelity
    fidelities = {m.cls.fidelity for m in plan.methods if not m.implicit}
    tags[layout.FIDELITY] = fidelities.pop() if len(fidelities) == 1 else "mixed"
    return tags


def _study_params(sweep: Sweep, plan: StudyPlan) -> dict[str, object]:
    params = {"task": sweep.task.name, "objective.metric": sweep.metric,
              "objective.direction": sweep.direction, "objective.at": sweep.spec.objective.at,
              "objective.aggregate": sweep.spec.objective.aggregate,
              "seeds": ",".join(map(str, sweep.seeds)), "trials": plan.n_trials,
              "sampler": sweep.spec.sampler.name, "pruner": sweep.spec.pruner.name}
    for key, value in sweep.spec.budget.model_dump().items():
        params[f"budget.{key}"] = value
    for key, value in sweep.task_params.model_dump().items():
        params[f"task.{key}"] = value
    for name, dist in plan.search_space().items():
        params[f"space.{name}"] = repr(dist)
    return params


@dataclass
class Worker:
    """Claims and runs trials of every study of a sweep until none is left to claim."""

    sweep: Sweep
    store: Store
    device: torch.device
    index: int = 0
    on_trial_end: Callable[[], None] | None = None
    warned: set = field(default_factory=set)

    def run(self) -> None:
        self.storage = self.store.optuna_storage()
        self.client = self.store.mlflow_client()
        plans = self.sweep.studies
        start = self.index % len(plans)
        with MetricSink(self.store.mlflow_url) as self.sink:
            for plan in plans[start:] + plans[:start]:
                study = optuna.load_study(study_name=plan.name, storage=self.storage,
                                          pruner=make_pruner(self.sweep))
                while (trial := self._claim(study, plan)) is not None:
                    self._run_trial(study, plan, trial)
                    if self.on_trial_end:
                        self.on_trial_end()
                self._close_study_run(study, plan)

    def _claim(self, study: optuna.Study, plan: StudyPlan) -> optuna.Trial | None:
        with self.store.lock(plan.name), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # heartbeats with ask/tell are what we want here
            trials = self._clean_up(study)
            if not self._may_claim(plan, trials):
                return None
            study.sampler = make_sampler(self.sweep, plan, len(trials))
            trial = study.ask()
            self.storage.record_heartbeat(trial._trial_id)
            trial.set_user_attr("worker", {"host": platform.node(), "pid": os.getpid()})
            return trial

    def _clean_up(self, study: optuna.Study) -> list:
        """Fail dead trials, end the runs they left, queue retries; the trials after that."""
        optuna.storages.fail_stale_trials(study)
        self._fail_dead_trials(study.get_trials(deepcopy=False))
        trials = study.get_trials(deepcopy=False)
        self._close_orphans(study, trials)
        self._retry_crashed(study, trials)
        return study.get_trials(deepcopy=False)

    def _may_claim(self, plan: StudyPlan, trials) -> bool:
        """Fewer finished plus running trials than the study asks for, and failures left.

        Once a trial has failed, running trials count as failures to come: the study then runs
        only as many trials at once as it has failures left, so it never ends with more than
        ``max_failed_trials`` failed trials, unless its first failures come together (at most
        one per worker running it)."""
        running = sum(t.state == TrialState.RUNNING for t in trials)
        finished = sum(t.state in FINISHED for t in trials)
        raised, limit = _raised(trials), self.sweep.spec.max_failed_trials
        if finished + running >= plan.n_trials or raised >= limit:
            return False
        return raised == 0 or raised + running < limit

    def _fail_dead_trials(self, trials) -> None:
        """Fail each RUNNING trial whose worker is gone (called under the claim lock)."""
        for t in trials:
            if t.state == TrialState.RUNNING and not _may_be_running(t.user_attrs.get("worker")):
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                    self.storage.set_trial_state_values(t._trial_id, TrialState.FAIL)

    def _retry_crashed(self, study, trials) -> None:
        """Queue the parameters of a trial whose worker died (not one whose method raised)
        again, once, when the spec says so (``retry_crashed``)."""
        if not self.sweep.spec.retry_crashed:
            return
        marks = study.user_attrs
        for t in trials:
            if (t.state == TrialState.FAIL and "fail_reason" not in t.user_attrs
                    and f"retried.{t.number}" not in marks and t.params):
                study.enqueue_trial(t.params, user_attrs={"retry_of": t.number},
                                    skip_if_exists=False)
                study.set_user_attr(f"retried.{t.number}", True)

    def _close_orphans(self, study, trials) -> None:
        """Make the MLflow runs of finished trials agree with them, whatever a kill left: a
        run still RUNNING takes its trial's status; the trial run of a trial whose worker died
        is FAILED, even one that ended before the trial was told."""
        by_number = {t.number: t for t in trials}
        for run in self._running_runs(study):
            trial = by_number.get(int(run.data.tags.get("optuna.trial_number", -1)))
            if trial is not None and trial.state.is_finished():
                self._end_like(run.info.run_id, trial)
        marks = study.user_attrs  # finished trials cannot take attributes: the study keeps them
        for t in trials:
            if _worker_died(t) and f"closed.{t.number}" not in marks:
                run_id = t.user_attrs.get("mlflow_run_id")
                if run_id and self.client.get_run(run_id).info.status != layout.FAILED:
                    self._end_like(run_id, t)
                study.set_user_attr(f"closed.{t.number}", True)

    def _running_runs(self, study: optuna.Study) -> list:
        """The MLflow runs of the study's trials and seeds still marked RUNNING."""
        return self.client.search_runs(
            [study.user_attrs["mlflow_experiment_id"]],
            f"tags.`optuna.study_id` = '{study._study_id}' and attributes.status = 'RUNNING'",
            max_results=10_000)

    def _end_like(self, run_id: str, trial: optuna.trial.FrozenTrial) -> None:
        """End an MLflow run with the status of its (finished) trial."""
        if trial.state != TrialState.FAIL:
            state = "complete" if trial.state == TrialState.COMPLETE else "pruned"
            tracking.finish_run(self.client, run_id, state)
            return
        reason = (trial.user_attrs.get("fail_reason") or trial.user_attrs.get("interrupted")
                  or "worker died")
        tracking.finish_run(self.client, run_id, "fail", tags={layout.FAIL_REASON: reason})

    def _close_study_run(self, study: optuna.Study, plan: StudyPlan) -> None:
        """End the study's MLflow run once the study is done, under the claim lock so that one
        worker does it: FINISHED when it has all its trials, FAILED (with the reason) when
        ``max_failed_trials`` stopped it."""
        with self.store.lock(plan.name):
            trials = study.get_trials(deepcopy=False)
            if any(t.state == TrialState.RUNNING for t in trials):
                return  # the worker running that trial closes the study run after it
            run_id = study.user_attrs["mlflow_run_id"]
            status = self.client.get_run(run_id).info.status
            if sum(t.state in FINISHED for t in trials) >= plan.n_trials:
                if status != layout.FINISHED:
                    self._end_study_run(study, plan, run_id, "complete")
            elif status == layout.RUNNING:
                reason = failure_stop(trials, self.sweep.spec.max_failed_trials)
                if reason:
                    self._end_study_run(study, plan, run_id, "fail",
                                        tags={layout.FAIL_REASON: reason})

    def _end_study_run(self, study, plan, run_id: str, state: str, tags=None) -> None:
        metrics, name = {}, plan.label
        if any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
            metrics["objective"] = study.best_value
            name = f"{plan.label} | best {_short(self.sweep.metric)}={study.best_value:.4g}"
        tracking.finish_run(self.client, run_id, state, metrics=metrics, name=name, tags=tags)

    # ------------------------------------------------------------------------------ trials

    def _run_trial(self, study: optuna.Study, plan: StudyPlan, trial: optuna.Trial) -> None:
        sweep = self.sweep
        sampled = {name: suggest(trial, name, dist) for name, dist in plan.search_space().items()}
        methods, config_methods = {}, {}
        for m in plan.methods:
            values = dict(m.fixed)
            values.update({k.split(".", 1)[1]: v for k, v in sampled.items()
                           if k.split(".", 1)[0] == m.slot})
            methods[m.slot] = m.cls(**values)
            config_methods[m.slot] = {"name": m.cls.name, "params": methods[m.slot].params}
        config = {
            "sweep": sweep.name, "study": plan.name, "trial": trial.number,
            "task": {"name": sweep.task.name, "params": sweep.task_params.model_dump()},
            "methods": config_methods, "seeds": sweep.seeds,
            "budget": sweep.spec.budget.model_dump(), "device": str(self.device),
            "objective": {"metric": sweep.metric, "direction": sweep.direction,
                          "at": sweep.spec.objective.at,
                          "aggregate": sweep.spec.objective.aggregate},
        }
        params = {"task": sweep.task.name, "device": str(self.device)}
        params.update({f"task.{k}": v for k, v in config["task"]["params"].items()})
        for slot, entry in config_methods.items():
            params[f"method.{slot}"] = entry["name"]
            params.update({f"{slot}.{k}": v for k, v in entry["params"].items()})
        tags = {**tracking.provenance(), **_plan_tags(sweep, plan), "device": str(self.device),
                "optuna.study_name": plan.name, "optuna.study_id": study._study_id,
                "optuna.trial_number": trial.number, "optuna.trial_id": trial._trial_id}
        experiment_id = study.user_attrs["mlflow_experiment_id"]
        trial_run = tracking.start_run(
            self.client, experiment_id, f"{plan.label} t{trial.number}",
            tags={**tags, layout.KIND: layout.TRIAL}, params=params,
            parent=study.user_attrs["mlflow_run_id"])
        trial.set_user_attr("mlflow_run_id", trial_run)
        self.client.log_dict(trial_run, config, "config.yaml")

        values: list[float] = []
        with Heartbeat(self.storage, trial._trial_id):
            try:
                for k, seed in enumerate(sweep.seeds):
                    values.append(self._run_seed(trial, plan, methods, params, tags, trial_run,
                                                 k, seed, experiment_id))
            except StopRun as stop:
                trial.set_user_attr("prune_reason", stop.reason)
                tracking.finish_run(self.client, trial_run, "pruned",
                                    tags={layout.PRUNE_REASON: stop.reason,
                                          layout.PRUNE_DETAIL: stop.detail})
                study.tell(trial, state=TrialState.PRUNED)
                return
            except BaseException as err:
                self._fail_trial(study, trial, trial_run, err)
                if not isinstance(err, Exception):
                    raise
                return
        objective = stats.aggregate(values, sweep.spec.objective.aggregate)
        tracking.finish_run(self.client, trial_run, "complete",
                            metrics={"objective": objective},
                            name=f"{plan.label} t{trial.number} | {_short(sweep.metric)}="
                                 f"{objective:.4g}")
        study.tell(trial, objective)

    def _unused_knobs(self, plan: StudyPlan, methods: dict, trial_run: str) -> None:
        """Warn, once per study and process, about searched hyperparameters the run never
        read: tuning them spends budget on a dimension with no effect on the code path."""
        unused = unused_knobs(plan, methods)
        if not unused:
            return
        self.client.set_tag(trial_run, layout.UNUSED_KNOBS, ",".join(unused))
        if plan.name in self.warned:
            return
        self.warned.add(plan.name)
        shown = "; ".join(f"{slot}={m.params}" for slot, m in methods.items())
        print(f"warning: {plan.name}: {', '.join(unused)} searched but never read by the "
              f"code in its first trial ({shown}): it has no effect there; fix it or drop it "
              "from the search space", file=sys.stderr, flush=True)

    def _fail_trial(self, study, trial, trial_run, err: BaseException) -> None:
        text = "".join(traceback.format_exception(err))
        reason = f"{type(err).__name__}: {err}"[:500]
        try:
            self.client.log_text(trial_run, text, "traceback.txt")
            key = "fail_reason" if isinstance(err, Exception) else "interrupted"
            trial.set_user_attr(key, reason)
            tracking.finish_run(self.client, trial_run, "fail",
                                tags={layout.FAIL_REASON: reason})
        finally:
            study.tell(trial, state=TrialState.FAIL)

    def _run_seed(self, trial, plan, methods, params, tags, trial_run, k, seed,
                  experiment_id) -> float:
        sweep = self.sweep
        spec = sweep.spec
        name = f"{plan.label} t{trial.number} s{seed}"
        seed_run = tracking.start_run(
            self.client, experiment_id, name,
            tags={**tags, layout.KIND: layout.SEED, layout.SEED_TAG: seed},
            params={**params, "seed": seed}, parent=trial_run)
        objective = ObjectiveTracker(sweep.metric, sweep.direction, spec.objective.at)
        marks = report_steps(spec.budget.steps, spec.pruner.report_points)
        points = spec.pruner.report_points

        def log(step: int, metrics) -> None:
            self.sink.log(seed_run, step, dict(metrics))
            if sweep.metric not in metrics:  # e.g. validation metrics every few steps
                return
            value = float(metrics[sweep.metric])
            objective.add(value)
            bound = spec.objective.diverge_past
            if bound is not None and (value > bound if sweep.direction == "minimize"
                                      else value < bound):
                raise StopRun("diverged", f"{sweep.metric}={value:.4g} past the bound "
                                          f"{bound:g} at seed {seed}, step {step}")
            if step in marks and math.isfinite(objective.value()):
                trial.report(objective.value(), k * points + marks[step])
                if trial.should_prune():
                    raise StopRun("pruned", f"{spec.pruner.name} pruner at seed {seed}, "
                                            f"step {step}")

        # the fallback for a library draw from torch's global RNG (testbeds use named streams)
        torch.manual_seed(seeds.int_seed(seed, "global"))
        try:
            fresh = {slot: type(m)(**m.params) for slot, m in methods.items()}  # no state leaks
            try:
                result = sweep.task().run(sweep.task_params, fresh, seed=seed,
                                          device=self.device, budget=spec.budget, log=log)
            finally:
                if k == 0:
                    self._unused_knobs(plan, fresh, trial_run)
            value = objective.value()
            if result.get("diverged") or not math.isfinite(value):
                raise StopRun("diverged", f"{sweep.metric} not finite at seed {seed}, step "
                                          f"{result.get('steps')}")
        except StopRun as stop:
            self.sink.flush()
            tracking.finish_run(self.client, seed_run, "pruned",
                                tags={layout.PRUNE_REASON: stop.reason,
                                      layout.PRUNE_DETAIL: stop.detail})
            raise
        except BaseException as err:
            self.sink.flush()
            tracking.finish_run(self.client, seed_run, "fail",
                                tags={layout.FAIL_REASON: f"{type(err).__name__}: {err}"})
            raise
        self.sink.flush()
        tracking.finish_run(self.client, seed_run, "complete", metrics={"objective": value},
                            name=f"{name} | {_short(sweep.metric)}={value:.4g}")
        return value


def unused_knobs(plan: StudyPlan, methods: dict) -> list[str]:
    """Searched hyperparameters (``slot.name``) that the methods never read in a run."""
    return [name for name in plan.search_space()
            if name.split(".", 1)[1] not in methods[name.split(".", 1)[0]].read]


def _raised(trials) -> int:
    """Trials failed because their method raised (not because their worker died)."""
    return sum(t.state == TrialState.FAIL and "fail_reason" in t.user_attrs for t in trials)


def _worker_died(trial) -> bool:
    """A failed trial that did not fail itself: its worker was killed or it was found dead."""
    return (trial.state == TrialState.FAIL
            and not {"fail_reason", "interrupted"} & trial.user_attrs.keys())


def failure_stop(trials, limit: int) -> str | None:
    """Why a study claims no more trials: its method raised ``max_failed_trials`` times."""
    raised = _raised(trials)
    if raised < limit:
        return None
    return f"stopped after {raised} failed trials (max_failed_trials: {limit})"


def _may_be_running(owner: dict | None) -> bool:
    """Whether a RUNNING trial's worker may still run it, seen under the claim lock.

    No owner: its claimer died inside the claim (which records the owner under the lock held
    now), so nobody runs it. An owner on this host runs it while its process lives. Another
    host's owner is trusted until Optuna finds its heartbeat stale."""
    if owner is None:
        return False
    return owner["host"] != platform.node() or process_alive(owner["pid"])


def _short(metric: str) -> str:
    return metric.rsplit("/", 1)[-1]


# -------------------------------------------------------------------------- whole sweeps


@dataclass
class StudyStatus:
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
    """Trials per state and the best value of every study (missing studies count as empty)."""
    summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    existing = {s.study_name for s in summaries}
    out = []
    for plan in sweep.studies:
        counts = dict.fromkeys(TrialState, 0)
        best_value, best_params, reasons, stop = None, {}, [], None
        if plan.name in existing:
            study = optuna.load_study(study_name=plan.name, storage=storage)
            trials = study.get_trials(deepcopy=False)
            for t in trials:
                counts[t.state] += 1
                if t.state == TrialState.FAIL:
                    reasons.append(t.user_attrs.get("fail_reason")
                                   or t.user_attrs.get("interrupted", "worker died"))
            if counts[TrialState.COMPLETE]:
                best = study.best_trial
                best_value, best_params = best.value, best.params
            if counts[TrialState.COMPLETE] + counts[TrialState.PRUNED] < plan.n_trials:
                stop = failure_stop(trials, sweep.spec.max_failed_trials)
        out.append(StudyStatus(plan.name, plan.label, plan.n_trials, counts[TrialState.COMPLETE],
                               counts[TrialState.PRUNED], counts[TrialState.FAIL],
                               counts[TrialState.RUNNING], best_value, best_params, reasons,
                               stop))
    return out


def terminate_gracefully() -> None:
    """Turn SIGTERM into SystemExit, so runs are flushed and marked before the process ends."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def quiet_libraries() -> None:
    """Optuna's per-trial INFO lines off: set by the entry points (the CLI, a worker process),
    never at import, so a program that imports the engine keeps its own logging settings."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _worker_main(source: str, storage: str, device: str, index: int, threads: int) -> None:
    quiet_libraries()
    terminate_gracefully()
    torch.set_num_threads(threads)
    sweep = load(source, storage=storage)
    Worker(sweep, Store.from_url(sweep.storage), torch.device(device), index).run()


def run_sweep(sweep: Sweep, *, workers: int = 1, device: str | None = None,
              progress: Callable[[list[StudyStatus]], None] | None = None) -> list[StudyStatus]:
    """Run (or continue) every study of ``sweep`` until each has its number of trials."""
    resolved = resolve_device(device or sweep.spec.device)
    store = Store.from_url(sweep.storage)
    setup(sweep, store)
    storage = store.optuna_storage()

    def refresh() -> None:
        if progress:
            progress(study_status(sweep, storage))

    refresh()
    threads = max(1, (os.cpu_count() or 1) // workers)
    if workers == 1:
        torch.set_num_threads(threads)
        Worker(sweep, store, resolved, 0, on_trial_end=refresh).run()
    else:
        context = multiprocessing.get_context("spawn")
        procs = [context.Process(target=_worker_main,
                                 args=(sweep.source, sweep.storage, str(resolved), i, threads))
                 for i in range(workers)]
        for proc in procs:
            proc.start()
        try:
            while any(p.is_alive() for p in procs):
                time.sleep(1.0)
                refresh()
        finally:
            for proc in procs:
                proc.join()
        bad = [p.exitcode for p in procs if p.exitcode]
        if bad:
            raise RuntimeError(f"{len(bad)} worker(s) exited with codes {bad}")
    final = study_status(sweep, storage)
    if progress:
        progress(final)
    return final
