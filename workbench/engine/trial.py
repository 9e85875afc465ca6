"""Running one claimed trial: sample its hyperparameters, open its trial run, run the task once
per seed (a seed run each, watched by a ``Monitor``), or, for a study that runs its seeds on a
seed axis (``StudyPlan.vectorised``), once for all seeds (``Task.run_seeds``, a ``SeedsMonitor``
over the seeds' monitors), close the runs, tell Optuna. Runs are opened and closed through a
``RunWriter``: the trial's seed runs on a seed axis in one transaction each way.

The trial's objective is its per-seed objectives aggregated as the spec says; the per-seed
objectives go with it (``workbench.engine.trial_seeds``). A ``StopRun`` from a seed prunes the
trial; any other exception fails it (its traceback is logged to the trial run); an interrupt
(KeyboardInterrupt, SystemExit) fails it too, marked ``interrupted`` (its run tagged
``runs.INTERRUPTED``) so that it is queued again and counted as no failure
(``claims.requeue_interrupted``), and propagates.

``extend`` runs only the seeds a finished trial lacks, after the sweep asked for more seeds:
each in a new seed run below the trial's own run, on a seed axis over just those seeds where
the study runs its seeds together, without pruning (a finished trial takes no intermediate
values); the claims then recompute the trial's objective (``Claims.end_extension``).

A seed is never trained twice for one configuration. A (configuration, seed) run is determined
by the study's fingerprint, the hyperparameters and the seed (``trial_seeds``), so a seed run
that finished is *kept* where a kill or an interrupt stopped its trial before the end:

- the trial that runs a stopped trial's configuration again (user attribute ``retry_of`` after
  a kill, ``requeue_of`` after an interrupt; ``claims``) takes over the seed runs that finished
  under the stopped trial's run, the same fingerprint, hyperparameters and seed: in one write
  they move below its own trial run (``mlflow.parentRunId``, its Optuna ids, tag
  ``runs.KEPT_FROM``: the trial run they first ran under), their objectives count, the
  intermediate values they reported to the pruner are reported again (from their logged
  metric), and only the other seeds run. A kill at any point leaves each kept run FINISHED
  below the last trial of the chain that took it, which the next retry takes over in turn.
- an extension whose worker was killed left the seed runs it finished below the trial's own
  run: the extension taken again counts them and runs only the others.
"""

from __future__ import annotations

import math
import sys
import traceback
from dataclasses import dataclass, field

import optuna
import torch
import yaml
from optuna.trial import TrialState

from workbench.common import seeds
from workbench.common.gpu import GpuStats
from workbench.engine import trial_seeds
from workbench.engine.claims import Heartbeat
from workbench.engine.monitor import Monitor, SeedsMonitor, StopRun, replayed_reports
from workbench.engine.studies import plan_tags, short_metric
from workbench.spec.plan import StudyPlan, Sweep
from workbench.stats import aggregates as stats
from workbench.store import disk_space, runs
from workbench.store.run_writer import NewRun, Retag, RunEnd, RunWriter
from workbench.store.sink import MetricSink

# MLflow's log_dict layout (yaml.dump, indent 2, block style), with libyaml's emitter when built
YAML_DUMPER = getattr(yaml, "CDumper", yaml.Dumper)


def suggest(trial: optuna.Trial, name: str, dist) -> object:
    """Sample ``name`` from ``dist`` through the trial's suggest call for its kind."""
    if isinstance(dist, optuna.distributions.FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, log=dist.log)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, log=dist.log)
    return trial.suggest_categorical(name, dist.choices)


def unused_knobs(plan: StudyPlan, methods: dict) -> list[str]:
    """Searched hyperparameters (``slot.name``) that the methods never read in a run."""
    def read(name: str) -> bool:
        slot, knob = name.split(".", 1)
        return knob in methods[slot].hyperparameters_read()

    return [name for name in plan.search_space() if not read(name)]


def _ask_wilcoxon(trial: optuna.Trial, index: int, seed: int, value: float) -> None:
    """Optuna's WilcoxonPruner takes one value per instance, here per seed: the seed's
    objective as intermediate step ``index`` (seeds run in the spec's fixed order), then the
    pruner compares the trial with the best one on the seeds both have run."""
    trial.report(value, index)
    if trial.should_prune():
        raise StopRun("pruned", f"wilcoxon pruner after seed {seed}")


def build_methods(plan: StudyPlan, sampled: dict) -> tuple[dict, dict]:
    """The plan's methods with the fixed values and the sampled ``slot.name`` values: (slot ->
    method, slot -> {name, params} for the config)."""
    methods, config = {}, {}
    for m in plan.methods:
        values = dict(m.fixed)
        values.update({k.split(".", 1)[1]: v for k, v in sampled.items()
                       if k.split(".", 1)[0] == m.slot})
        methods[m.slot] = m.cls(**values)
        config[m.slot] = {"name": m.cls.name, "params": methods[m.slot].params}
    return methods, config


def run_params(sweep: Sweep, plan: StudyPlan, device: torch.device,
               config_methods: dict) -> dict:
    """The params of a trial, seed or evaluation run: task, device, every resolved task
    parameter (the study's: ``task.vary`` applied) and hyperparameter."""
    params = {"task": sweep.task.name, "device": str(device)}
    params.update({f"task.{k}": v for k, v in sweep.params_of(plan).model_dump().items()})
    for slot, entry in config_methods.items():
        params[f"method.{slot}"] = entry["name"]
        params.update({f"{slot}.{k}": v for k, v in entry["params"].items()})
    return params


def run_tags(sweep: Sweep, plan: StudyPlan, study: optuna.Study, device: torch.device) -> dict:
    """The tags every run below a study carries: provenance, the study's, the device and
    Optuna's study ids."""
    return {**runs.provenance(), **plan_tags(sweep, plan), "device": str(device),
            "optuna.study_name": plan.name, "optuna.study_id": study._study_id}


def execute(sweep: Sweep, plan: StudyPlan, methods: dict, seed: int, device: torch.device,
            log, keep: dict | None = None) -> dict:
    """Run the sweep's task once, with ``plan``'s task parameters, from ``seed`` with fresh
    copies of ``methods`` (no state leaks from one run to the next), ``log`` as its monitor;
    its final metrics. ``keep``, when given, receives the copies (their recorded
    hyperparameter reads)."""
    # the fallback for a library draw from torch's global RNG (testbeds use named streams)
    torch.manual_seed(seeds.int_seed(seed, "global"))
    fresh = {slot: type(m)(**m.params) for slot, m in methods.items()}
    if keep is not None:
        keep.update(fresh)
    return sweep.task().run(sweep.params_of(plan), fresh, seed=seed, device=device,
                            budget=sweep.spec.budget, log=with_gpu_metrics(log, device))


def execute_seeds(sweep: Sweep, plan: StudyPlan, methods: dict, seed_list: list[int],
                  device: torch.device, log, keep: dict | None = None) -> list[dict]:
    """``execute`` for all of ``seed_list`` on one seed axis (``Task.run_seeds``): each seed's
    final metrics."""
    torch.manual_seed(seeds.int_seed(seed_list[0], "global"))
    fresh = {slot: type(m)(**m.params) for slot, m in methods.items()}
    if keep is not None:
        keep.update(fresh)
    return sweep.task().run_seeds(sweep.params_of(plan), fresh, seeds=list(seed_list),
                                  device=device, budget=sweep.spec.budget,
                                  log=with_gpu_metrics(log, device, per_seed=True))


def with_gpu_metrics(log, device: torch.device, per_seed: bool = False):
    """``log`` with the ``gpu/*`` metrics (``workbench.common.gpu.GpuStats``, its peak reset here)
    added to every step's, each seed's alike on a seed axis; ``log`` itself off CUDA."""
    stats = GpuStats(device)
    if not stats.on_cuda:
        return log
    if per_seed:
        def log_seeds(step: int, metrics) -> None:
            extra = stats()
            log(step, [None if m is None else {**m, **extra} for m in metrics])
        return log_seeds

    def log_one(step: int, metrics) -> None:
        log(step, {**metrics, **stats()})
    return log_one


@dataclass
class OpenTrial:
    """A claimed trial with its sampled methods and its open trial run: what each of its seed
    runs needs (their params and tags start from the trial's)."""

    study: optuna.Study
    plan: StudyPlan
    trial: optuna.Trial
    methods: dict  # slot -> the method, built with the sampled hyperparameters
    params: dict
    tags: dict
    run_id: str
    experiment_id: str
    live: bool = True  # the trial is running: its seeds report to Optuna's pruner


@dataclass(frozen=True)
class Kept:
    """A seed run that finished under a trial stopped before its end, counted instead of
    training the seed again: its id and objective."""

    run_id: str
    objective: float


def configuration(params) -> dict[str, str]:
    """What determines a seed run besides its study and seed, from a run's params (as MLflow
    stores them, strings): every resolved task parameter and hyperparameter, not the device
    it ran on (no part of a study's fingerprint either) nor the seed."""
    return {k: runs.param_value(v) for k, v in params.items() if k not in ("device", "seed")}


@dataclass
class Extended:
    """How an extension ended: ``done`` with the new seeds' objectives, or ``diverged`` /
    ``failed`` with the reason."""

    state: str
    values: dict = field(default_factory=dict)
    reason: str = ""


@dataclass
class TrialRunner:
    """Runs the trials one worker claims, on ``device``, logging steps through ``sink`` and
    opening and closing runs through ``writer``."""

    sweep: Sweep
    client: object  # an MlflowClient
    writer: RunWriter
    storage: optuna.storages.BaseStorage
    sink: MetricSink
    device: torch.device
    warned: set  # studies already warned about unused knobs in this process

    def run(self, study: optuna.Study, plan: StudyPlan, trial: optuna.Trial) -> None:
        """Run ``trial`` over every seed and tell Optuna how it ended."""
        sweep = self.sweep
        opened = self._open(study, plan, trial)
        values: list[float] = []
        with Heartbeat(lambda: self.storage.record_heartbeat(trial._trial_id)):
            try:
                kept = self._take_over(opened)
                if plan.vectorised:
                    values = self._run_seeds_together(opened, kept=kept)
                for index, seed in enumerate([] if plan.vectorised else sweep.seeds):
                    if seed in kept:
                        values.append(self._report_kept(opened, index, kept[seed]))
                    else:
                        values.append(self._run_seed(opened, index, seed))
                    if sweep.spec.pruner.name == "wilcoxon":
                        _ask_wilcoxon(trial, index, seed, values[-1])
            except StopRun as stop:
                trial.set_user_attr("prune_reason", stop.reason)
                self.writer.finish([RunEnd(opened.run_id, "pruned",
                                           tags={runs.PRUNE_REASON: stop.reason,
                                                 runs.PRUNE_DETAIL: stop.detail})])
                study.tell(trial, state=TrialState.PRUNED)
                return
            except BaseException as err:
                if disk_space.is_disk_full(err):
                    raise  # no failure of its method: the sweep marks it (store.disk_space)
                self._fail(opened, err)
                stop = interrupt_in(err)
                if stop is err:
                    raise
                if stop is not None:  # the interrupt itself, not the wrapper, ends the worker
                    raise stop from None
                return
        objective = stats.aggregate(values, sweep.spec.objective.aggregate)
        trial.set_user_attr(trial_seeds.SEED_VALUES,
                            {str(s): v for s, v in zip(sweep.seeds, values, strict=True)})
        self.writer.finish([RunEnd(
            opened.run_id, "complete", metrics={"objective": objective},
            tags={runs.OBJECTIVE_SEEDS: ",".join(map(str, sweep.seeds))},
            name=f"{plan.label} t{trial.number} | {short_metric(sweep.metric)}={objective:.4g}")])
        study.tell(trial, objective)

    def extend(self, study: optuna.Study, plan: StudyPlan, trial, missing: list[int],
               beat) -> Extended:
        """Run the ``missing`` seeds of finished ``trial`` (a ``FrozenTrial``) below its trial
        run, ``beat`` called while they run; an interrupt ends their runs and propagates."""
        sweep = self.sweep
        methods, config_methods = build_methods(plan, trial.params)
        tags = {**run_tags(sweep, plan, study, self.device),
                "optuna.trial_number": trial.number, "optuna.trial_id": trial._trial_id}
        opened = OpenTrial(study, plan, trial, methods,
                           run_params(sweep, plan, self.device, config_methods), tags,
                           trial.user_attrs["mlflow_run_id"],
                           study.user_attrs["mlflow_experiment_id"], live=False)
        try:
            with Heartbeat(beat):
                # seeds a killed extension of this trial finished already
                kept = {s: k for s, (k, _) in
                        self._finished_seed_runs(opened, opened.run_id, missing).items()}
                if plan.vectorised:
                    found = self._run_seeds_together(opened, missing, kept)
                else:
                    found = [kept[s].objective if s in kept
                             else self._run_seed(opened, sweep.seeds.index(s), s)
                             for s in missing]
        except StopRun as stop:
            return Extended("diverged", reason=stop.detail)
        except Exception as err:
            if disk_space.is_disk_full(err):
                raise  # the extension is taken again on resume (store.disk_space)
            self.client.log_text(opened.run_id, "".join(traceback.format_exception(err)),
                                 f"extension_traceback_{'_'.join(map(str, missing))}.txt")
            return Extended("failed", reason=f"{type(err).__name__}: {err}"[:500])
        return Extended("done", dict(zip(missing, found, strict=True)))

    def _open(self, study: optuna.Study, plan: StudyPlan, trial: optuna.Trial) -> OpenTrial:
        """Sample the trial's hyperparameters, build its methods, open its trial run (with the
        resolved config as ``config.yaml``)."""
        sweep = self.sweep
        sampled = {name: suggest(trial, name, dist) for name, dist in plan.search_space().items()}
        methods, config_methods = build_methods(plan, sampled)
        config = {
            "sweep": sweep.name, "study": plan.name, "trial": trial.number,
            "fingerprint": plan.fingerprint,
            "task": {"name": sweep.task.name, "params": sweep.params_of(plan).model_dump()},
            "methods": config_methods, "seeds": sweep.seeds,
            "budget": sweep.spec.budget.model_dump(), "device": str(self.device),
            "objective": {"metric": sweep.metric, "direction": sweep.direction,
                          "at": sweep.spec.objective.at,
                          "aggregate": sweep.spec.objective.aggregate},
        }
        params = run_params(sweep, plan, self.device, config_methods)
        tags = {**run_tags(sweep, plan, study, self.device),
                "optuna.trial_number": trial.number, "optuna.trial_id": trial._trial_id}
        experiment_id = study.user_attrs["mlflow_experiment_id"]
        (run_id,) = self.writer.start(experiment_id, [NewRun(
            f"{plan.label} t{trial.number}", {**tags, runs.KIND: runs.TRIAL}, params,
            parent=study.user_attrs["mlflow_run_id"])])
        trial.set_user_attr("mlflow_run_id", run_id)
        self.writer.log_text(run_id, yaml.dump(config, Dumper=YAML_DUMPER, indent=2,
                                               default_flow_style=False), "config.yaml")
        return OpenTrial(study, plan, trial, methods, params, tags, run_id, experiment_id)

    def _take_over(self, opened: OpenTrial) -> dict[int, Kept]:
        """The seed runs that finished under the trial this one runs again (``retry_of``,
        ``requeue_of``), moved below this trial's run in one write: seed -> the kept run."""
        attrs = opened.trial.user_attrs
        number = attrs.get("retry_of", attrs.get("requeue_of"))
        if number is None:
            return {}
        stopped = self.storage.get_trial(self.storage.get_trial_id_from_study_id_trial_number(
            opened.study._study_id, int(number)))
        parent = stopped.user_attrs.get("mlflow_run_id")
        if stopped.state != TrialState.FAIL or not parent:
            return {}
        kept = self._finished_seed_runs(opened, parent, self.sweep.seeds)
        if not kept:
            return {}
        label, metric = opened.plan.label, short_metric(self.sweep.metric)
        self.writer.retag([Retag(
            run.run_id,
            {"mlflow.parentRunId": opened.run_id, "optuna.trial_number": opened.trial.number,
             "optuna.trial_id": opened.trial._trial_id, runs.KEPT_FROM: first},
            name=f"{label} t{opened.trial.number} s{seed} | {metric}={run.objective:.4g}")
            for seed, (run, first) in kept.items()])
        return {seed: run for seed, (run, _) in kept.items()}

    def _finished_seed_runs(self, opened: OpenTrial, parent: str,
                            seed_list: list[int]) -> dict:
        """The finished seed runs below trial run ``parent`` of the seeds of ``seed_list``
        that ``opened``'s configuration determines (its study's fingerprint and its
        hyperparameters): seed -> (``Kept``, the trial run it first ran under)."""
        found = self.client.search_runs(
            [opened.experiment_id], f"tags.`mlflow.parentRunId` = '{parent}' and "
            f"tags.`{runs.KIND}` = '{runs.SEED}' and attributes.status = '{runs.FINISHED}'",
            max_results=10_000, order_by=["attributes.start_time ASC"])
        wanted = configuration(opened.params)
        kept = {}
        for run in found:
            tags, objective = run.data.tags, run.data.metrics.get("objective")
            seed = int(tags.get(runs.SEED_TAG, -1))
            if (seed in seed_list and objective is not None and math.isfinite(objective)
                    and tags.get(runs.FINGERPRINT) == opened.tags[runs.FINGERPRINT]
                    and configuration(run.data.params) == wanted):
                kept[seed] = (Kept(run.info.run_id, float(objective)),
                              tags.get(runs.KEPT_FROM, parent))
        return kept

    def _report_kept(self, opened: OpenTrial, index: int, kept: Kept) -> float:
        """A kept seed run (the trial's ``index``-th seed) in place of running it: the
        intermediate values it reported to the pruner, reported again at the same points for
        this trial, and its objective. The pruner is not asked: the seed ran to its end."""
        if opened.live and self.sweep.spec.pruner.name != "wilcoxon":
            points = self.sweep.spec.pruner.report_points
            for i, value in self._kept_reports(kept).items():
                opened.trial.report(value, index * points + i)
        return kept.objective

    def _kept_reports(self, kept: Kept) -> dict[int, float]:
        history = self.client.get_metric_history(kept.run_id, self.sweep.metric)
        return replayed_reports(self.sweep, [(m.step, m.value) for m in history])

    def _start_seed_runs(self, opened: OpenTrial, seed_list: list[int]) -> list[tuple[str, str]]:
        """Open the seed runs of ``seed_list`` below the trial run, in one write: (id, name)
        of each."""
        names = [f"{opened.plan.label} t{opened.trial.number} s{seed}" for seed in seed_list]
        new = [NewRun(name, {**opened.tags, runs.KIND: runs.SEED, runs.SEED_TAG: seed},
                      {**opened.params, "seed": seed}, parent=opened.run_id)
               for name, seed in zip(names, seed_list, strict=True)]
        return list(zip(self.writer.start(opened.experiment_id, new), names, strict=True))

    def _seed_end(self, run_id: str, name: str, outcome: BaseException | float) -> RunEnd:
        """How a seed run ends: complete with its objective, pruned by a ``StopRun``, or
        failed."""
        if isinstance(outcome, StopRun):
            return RunEnd(run_id, "pruned", tags={runs.PRUNE_REASON: outcome.reason,
                                                  runs.PRUNE_DETAIL: outcome.detail})
        if isinstance(outcome, BaseException):
            return RunEnd(run_id, "fail",
                          tags={runs.FAIL_REASON: f"{type(outcome).__name__}: {outcome}"})
        return RunEnd(run_id, "complete", metrics={"objective": outcome},
                      name=f"{name} | {short_metric(self.sweep.metric)}={outcome:.4g}")

    def _run_seed(self, opened: OpenTrial, index: int, seed: int) -> float:
        """Run the task from ``seed`` (the trial's ``index``-th) in its own seed run; its
        objective. Raises ``StopRun`` when pruned or diverged, whatever the task raised else."""
        sweep, plan = self.sweep, opened.plan
        ((seed_run, name),) = self._start_seed_runs(opened, [seed])
        monitor = Monitor(sweep, self.sink, seed_run, opened.trial if opened.live else None,
                          seed, index)
        fresh: dict = {}
        try:
            try:
                result = execute(sweep, plan, opened.methods, seed, self.device, monitor, fresh)
            finally:
                if index == 0 and fresh:
                    self._warn_unused_knobs(plan, fresh, opened.run_id)
            value = monitor.final_value(result)
        except BaseException as err:
            self.sink.flush()
            self.writer.finish([self._seed_end(seed_run, name, err)])
            raise
        self.sink.flush()
        self.writer.finish([self._seed_end(seed_run, name, value)])
        return value

    def _run_seeds_together(self, opened: OpenTrial, seed_list: list[int] | None = None,
                            kept: dict[int, Kept] | None = None) -> list[float]:
        """Run ``seed_list`` (default: every seed of the sweep) on one seed axis, each in its
        own seed run; their objectives in seed order. The ``kept`` seed runs count instead of
        running (on an axis over the others; when every seed is kept, their intermediate
        values aggregated are reported again). A stop or failure of the computation
        ends every seed run with it; afterwards, the first seed whose result diverged raises
        ``StopRun`` once all seed runs are closed (the others complete)."""
        sweep, plan = self.sweep, opened.plan
        seed_list = list(sweep.seeds if seed_list is None else seed_list)
        kept = {s: k for s, k in (kept or {}).items() if s in seed_list}
        if len(kept) == len(seed_list):
            self._report_kept_together(opened, [kept[s] for s in seed_list])
            return [kept[s].objective for s in seed_list]
        if kept:
            found = self._run_seeds_together(opened, [s for s in seed_list if s not in kept])
            found = dict(zip([s for s in seed_list if s not in kept], found, strict=True))
            return [kept[s].objective if s in kept else found[s] for s in seed_list]
        opened_runs = self._start_seed_runs(opened, seed_list)
        monitors = [Monitor(sweep, self.sink, run_id, None, seed, sweep.seeds.index(seed))
                    for seed, (run_id, _) in zip(seed_list, opened_runs, strict=True)]
        fresh: dict = {}
        try:
            try:
                results = execute_seeds(sweep, plan, opened.methods, seed_list, self.device,
                                        SeedsMonitor(sweep, monitors,
                                                     opened.trial if opened.live else None),
                                        fresh)
            finally:
                if fresh:
                    self._warn_unused_knobs(plan, fresh, opened.run_id)
        except BaseException as err:
            self.sink.flush()
            self.writer.finish([self._seed_end(run_id, name, err) for run_id, name in opened_runs])
            raise
        self.sink.flush()
        values, stop, ends = [], None, []
        for (run_id, name), monitor, result in zip(opened_runs, monitors, results, strict=True):
            try:
                value = monitor.final_value(result)
            except StopRun as err:
                stop = stop or err
                ends.append(self._seed_end(run_id, name, err))
                continue
            ends.append(self._seed_end(run_id, name, value))
            values.append(value)
        self.writer.finish(ends)
        if stop is not None:
            raise stop
        return values

    def _report_kept_together(self, opened: OpenTrial, kept: list[Kept]) -> None:
        """On a seed axis, the intermediate values a trial whose every seed is kept reported:
        at each report point, the aggregate over the seeds that reached it (``SeedsMonitor``)."""
        if not opened.live or self.sweep.spec.pruner.name == "wilcoxon":
            return
        per_seed = [self._kept_reports(k) for k in kept]
        for i in sorted(set().union(*per_seed)):
            values = [reports[i] for reports in per_seed if i in reports]
            opened.trial.report(stats.aggregate(values, self.sweep.spec.objective.aggregate), i)

    def _warn_unused_knobs(self, plan: StudyPlan, methods: dict, trial_run: str) -> None:
        """Warn, once per study and process, about searched hyperparameters the run never
        read: tuning them spends budget on a dimension with no effect on the code path."""
        unused = unused_knobs(plan, methods)
        if not unused:
            return
        self.client.set_tag(trial_run, runs.UNUSED_KNOBS, ",".join(unused))
        if plan.name in self.warned:
            return
        self.warned.add(plan.name)
        shown = "; ".join(f"{slot}={m.params}" for slot, m in methods.items())
        print(f"warning: {self.sweep.title(plan)}: {', '.join(unused)} searched but never "
              f"read by the code in its first trial ({shown}): it has no effect there; fix it "
              "or drop it from the search space", file=sys.stderr, flush=True)

    def _fail(self, opened: OpenTrial, err: BaseException) -> None:
        """Fail the trial: its traceback as an artifact, the reason as a tag and user attr
        (``fail_reason``, or ``interrupted`` for an interrupt, even one a library wrapped in
        its own error: a SIGTERM inside a database call), then tell Optuna."""
        text = "".join(traceback.format_exception(err))
        reason = f"{type(err).__name__}: {err}"[:500]
        try:
            self.client.log_text(opened.run_id, text, "traceback.txt")
            tags = {runs.FAIL_REASON: reason}
            if interrupt_in(err) is None:
                opened.trial.set_user_attr("fail_reason", reason)
            else:
                opened.trial.set_user_attr("interrupted", reason)
                tags[runs.INTERRUPTED] = "true"
            self.writer.finish([RunEnd(opened.run_id, "fail", tags=tags)])
        finally:
            opened.study.tell(opened.trial, state=TrialState.FAIL)


def interrupt_in(err: BaseException) -> BaseException | None:
    """The interrupt (Ctrl-C, SIGTERM's ``SystemExit``) that is ``err`` or caused it, else
    None: a library that turns one into its own error must not make it a method's failure."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if not isinstance(err, Exception):
            return err
        err = err.__cause__ or err.__context__
    return None
