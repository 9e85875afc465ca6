"""The studies of a sweep: creating them with their study runs (``setup``), the tags and params
every run of a study carries, and the sampler and pruner a study runs with."""

from __future__ import annotations

import zlib

import optuna

from workbench import runs
from workbench.cache import cache_root
from workbench.spec import StudyPlan, Sweep
from workbench.store import Store


def setup(sweep: Sweep, store: Store) -> None:
    """Create the store, the experiment, every study and its parent run (idempotent)."""
    with store.lock("store"):  # several processes, maybe of other sweeps, may create it at once
        store.prepare(cache_root())
    with store.lock(f"setup:{sweep.name}"):
        storage = store.optuna_storage()
        client = store.mlflow_client()
        experiment_id = runs.ensure_experiment(client, sweep.name, store.artifact_root)
        for plan in sweep.studies:
            study = optuna.create_study(study_name=plan.name, storage=storage,
                                        direction=sweep.direction, load_if_exists=True)
            record = sweep.record_tags(plan)  # what the report reads instead of the spec
            if "mlflow_run_id" in study.user_attrs:
                _record_if_missing(client, study.user_attrs["mlflow_run_id"], record)
                continue
            tags = {**runs.provenance(), **plan_tags(sweep, plan), **record,
                    runs.KIND: runs.STUDY, "optuna.study_name": plan.name,
                    "optuna.study_id": study._study_id}
            run_id = runs.start_run(client, experiment_id, plan.label, tags=tags,
                                    params=study_params(sweep, plan))
            study.set_user_attr("mlflow_run_id", run_id)
            study.set_user_attr("mlflow_experiment_id", experiment_id)
            study.set_user_attr("sweep", sweep.name)
            study.set_user_attr("combination", plan.combination)
            study.set_user_attr("n_trials", plan.n_trials)


def _record_if_missing(client, run_id: str, record: dict[str, str]) -> None:
    """Give a study run written by an older workbench its record; never rewrite one, since the
    trials it holds ran under the spec it records."""
    if runs.STUDY_RECORD not in client.get_run(run_id).data.tags:
        for key, value in record.items():
            client.set_tag(run_id, key, value)


def plan_tags(sweep: Sweep, plan: StudyPlan) -> dict[str, str]:
    """The tags every run of the study carries: sweep, study, method per slot, fidelity."""
    tags = {runs.SWEEP: sweep.name, runs.STUDY_NAME: plan.name,
            runs.METHOD: plan.label, runs.TASK: sweep.task.name}
    for m in plan.methods:
        tags[runs.slot_tag(runs.METHOD, m.slot)] = m.cls.name
        tags[runs.slot_tag(runs.FIDELITY, m.slot)] = m.cls.fidelity
    fidelities = {m.cls.fidelity for m in plan.methods if not m.implicit}
    tags[runs.FIDELITY] = fidelities.pop() if len(fidelities) == 1 else "mixed"
    return tags


def study_params(sweep: Sweep, plan: StudyPlan) -> dict[str, object]:
    """The study run's params: task, objective, seeds, sampler, pruner, budget, search space."""
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
    """The spec's pruner; Hyperband's resource is the trial's report points over all seeds."""
    spec = sweep.spec.pruner
    if spec.name == "none":
        return optuna.pruners.NopPruner()
    if spec.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=len(sweep.seeds) * spec.report_points,
            reduction_factor=spec.reduction_factor)
    return optuna.pruners.MedianPruner(n_startup_trials=spec.startup_trials,
                                       n_warmup_steps=spec.warmup_steps)


def short_metric(metric: str) -> str:
    """The metric's last path part, for run names: ``train/loss`` -> ``loss``."""
    return metric.rsplit("/", 1)[-1]
