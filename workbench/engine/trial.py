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
"""

from __future__ import annotations

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
from workbench.engine.monitor import Monitor, SeedsMonitor, StopRun
from workbench.engine.studies import plan_tags, short_metric
from workbench.spec.plan import StudyPlan, Sweep
from workbench.stats import aggregates as stats
from workbench.store import runs
from workbench.store.run_writer import NewRun, RunEnd, RunWriter
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
                if plan.vectorised:
                    values = self._run_seeds_together(opened)
                for index, seed in enumerate([] if plan.vectorised else sweep.seeds):
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
                self._fail(opened, err)
                if not isinstance(err, Exception):
                    raise
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
                if plan.vectorised:
                    found = self._run_seeds_together(opened, missing)
                else:
                    found = [self._run_seed(opened, sweep.seeds.index(s), s) for s in missing]
        except StopRun as stop:
            return Extended("diverged", reason=stop.detail)
        except Exception as err:
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

    def _run_seeds_together(self, opened: OpenTrial,
                            seed_list: list[int] | None = None) -> list[float]:
        """Run ``seed_list`` (default: every seed of the sweep) on one seed axis, each in its
        own seed run; their objectives in seed order. A stop or failure of the computation
        ends every seed run with it; afterwards, the first seed whose result diverged raises
        ``StopRun`` once all seed runs are closed (the others complete)."""
        sweep, plan = self.sweep, opened.plan
        seed_list = list(sweep.seeds if seed_list is None else seed_list)
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
        (``fail_reason``, or ``interrupted`` for an interrupt), then tell Optuna."""
        text = "".join(traceback.format_exception(err))
        reason = f"{type(err).__name__}: {err}"[:500]
        try:
            self.client.log_text(opened.run_id, text, "traceback.txt")
            tags = {runs.FAIL_REASON: reason}
            if isinstance(err, Exception):
                opened.trial.set_user_attr("fail_reason", reason)
            else:
                opened.trial.set_user_attr("interrupted", reason)
                tags[runs.INTERRUPTED] = "true"
            self.writer.finish([RunEnd(opened.run_id, "fail", tags=tags)])
        finally:
            opened.study.tell(opened.trial, state=TrialState.FAIL)
