"""The studies of a sweep: creating them with their study runs and superseding the ones a
changed sweep no longer asks for (``setup``), the tags and params every run of a study carries,
and the sampler and pruner a study runs with."""

from __future__ import annotations

import json
import warnings
import zlib

import optuna

from workbench.common import fingerprint
from workbench.common.cache import cache_root
from workbench.engine import trial_seeds
from workbench.spec.plan import StudyPlan, Sweep
from workbench.store import runs
from workbench.store.database import Store


def setup(sweep: Sweep, store: Store) -> tuple[list[str], list[str]]:
    """Create the store, the sweep's experiment and every study with its study run in that
    experiment (idempotent), and mark the experiment's study runs that the sweep no longer asks
    for superseded. Returns one line per change worth telling the user (a new study where the
    spec or code changed, a study reused from another sweep, one no longer in the sweep), and
    the names of the studies superseded now (whose dead trials the caller repairs, under their
    own locks: ``Claims.repair``).

    A study is named by its fingerprint, so it may already exist, created by another sweep:
    its trials stay under that sweep's study run (its home); this sweep's experiment gets a
    study run of its own that points there (``runs.HOME_EXPERIMENT``)."""
    with store.lock("store"):  # several processes, maybe of other sweeps, may create it at once
        store.prepare(cache_root())
    with store.lock("setup"):  # of every sweep: two sweeps may share a study
        storage = store.optuna_storage()
        client = store.mlflow_client()
        experiment_id = runs.ensure_experiment(client, sweep.name, store,
                                               sweep.spec.description)
        before = study_runs(client, experiment_id)
        outcomes = {}
        for plan in sweep.studies:
            study = optuna.create_study(study_name=plan.name, storage=storage,
                                        direction=sweep.direction, load_if_exists=True)
            outcomes[plan.fingerprint] = _open_study_run(client, sweep, plan, study,
                                                         experiment_id, before)
        notes = _supersede(client, sweep, before, outcomes)
        notes += [line for plan in sweep.studies if (line := _seeds_note(sweep, plan, storage))]
    superseded = [run.data.tags[runs.STUDY_NAME] for run in before  # newly
                  if run.data.tags.get(runs.FINGERPRINT) not in outcomes
                  and run.data.tags.get(runs.STUDY_STATE) != runs.SUPERSEDED
                  and runs.STUDY_NAME in run.data.tags]
    return notes, superseded


def _seeds_note(sweep: Sweep, plan: StudyPlan, storage) -> str | None:
    """What the sweep's seeds ask of the study's complete trials run with other seeds: the
    seeds to run (only those), or a recomputation from the runs they have."""
    study = optuna.load_study(study_name=plan.name, storage=storage)
    attrs = study.user_attrs
    waiting = trial_seeds.pending(study.get_trials(deepcopy=False), attrs, sweep.seeds)
    if not waiting:
        return None
    lacking = sorted({s for t in waiting for s in trial_seeds.missing(
        trial_seeds.of(t.user_attrs, attrs, t.number), sweep.seeds)})
    if not lacking:
        return (f"{plan.label}: {len(waiting)} trials recomputed over seeds {sweep.seeds} "
                "from the seed runs they have (no run)")
    return (f"{plan.label}: {len(waiting)} trials lack seeds among {lacking}; running only "
            "those, the seeds they have are reused")


def study_runs(client, experiment_id: str) -> list:
    """The study runs of an experiment, oldest first."""
    found = client.search_runs([experiment_id], f"tags.`{runs.KIND}` = '{runs.STUDY}'",
                               max_results=50_000, order_by=["attributes.start_time ASC"])
    return list(found)


def run_key(experiment_id: str) -> str:
    """The study's user attribute that holds its study run in experiment ``experiment_id``."""
    return f"mlflow_run.{experiment_id}"


def _open_study_run(client, sweep: Sweep, plan: StudyPlan, study: optuna.Study,
                    experiment_id: str, before: list) -> tuple[str, str]:
    """The study's run in the sweep's experiment, created when missing, with this sweep's
    record; (run id, how: ``new`` study, ``linked`` to another sweep's, ``existing``,
    ``returned`` to after being superseded)."""
    attrs = study.user_attrs
    record = sweep.record_tags(plan)  # what the report reads instead of the spec
    if run_key(experiment_id) in attrs:
        run_id = attrs[run_key(experiment_id)]
        run = next((r for r in before if r.info.run_id == run_id), None) or client.get_run(
            run_id)
        _update_tags(client, run, {**record, runs.STUDY_STATE: runs.CURRENT,
                                   runs.STUDY_TITLE: sweep.title(plan)})
        if run.data.tags.get(runs.STUDY_STATE) == runs.SUPERSEDED:
            client.delete_tag(run_id, runs.SUPERSEDED_NOTE)
            if run.info.status != runs.RUNNING:
                client.update_run(run_id, status=runs.RUNNING)  # closed again once complete
            return run_id, "returned"
        return run_id, "existing"
    tags = {**runs.provenance(), **plan_tags(sweep, plan), **record,
            **runs.split_tag(runs.FINGERPRINT_DOC, json.dumps(plan.document, sort_keys=True)),
            runs.KIND: runs.STUDY, runs.STUDY_STATE: runs.CURRENT,
            runs.STUDY_TITLE: sweep.title(plan),
            "optuna.study_name": plan.name, "optuna.study_id": study._study_id}
    if "mlflow_run_id" in attrs:  # another sweep's study: its trials stay in its experiment
        tags[runs.HOME_EXPERIMENT] = attrs["mlflow_experiment_id"]
        tags[runs.HOME_RUN] = attrs["mlflow_run_id"]
        run_id = runs.start_run(client, experiment_id,
                                f"{plan.label} (trials in sweep {attrs.get('sweep')})",
                                tags=tags, params=study_params(sweep, plan))
        study.set_user_attr(run_key(experiment_id), run_id)
        return run_id, "linked"
    run_id = runs.start_run(client, experiment_id, plan.label, tags=tags,
                            params=study_params(sweep, plan))
    study.set_user_attr("mlflow_run_id", run_id)
    study.set_user_attr("mlflow_experiment_id", experiment_id)
    study.set_user_attr(run_key(experiment_id), run_id)
    study.set_user_attr("sweep", sweep.name)
    study.set_user_attr("combination", plan.combination)
    study.set_user_attr("fingerprint", plan.fingerprint)
    return run_id, "new"


def _update_tags(client, run, tags: dict[str, str]) -> None:
    """Set the tags whose value differs (the record is rewritten when the sweep's trial count,
    order or report options change: none of them changes a result)."""
    from mlflow.entities import RunTag

    changed = [RunTag(k, str(v)) for k, v in tags.items() if run.data.tags.get(k) != str(v)]
    if changed:
        client.log_batch(run.info.run_id, tags=changed)


def _supersede(client, sweep: Sweep, before: list, outcomes: dict) -> list[str]:
    """Mark the experiment's current study runs that the sweep no longer asks for superseded,
    with a line saying what changed; the lines for the user."""
    plans = {plan.label: plan for plan in sweep.studies}
    notes, explained = [], set()
    for run in before:
        tags = run.data.tags
        if tags.get(runs.STUDY_STATE) == runs.SUPERSEDED or tags.get(
                runs.FINGERPRINT) in outcomes:
            continue
        label = tags.get(runs.METHOD, "?")
        plan = plans.get(label)
        if plan is None:
            why, then = "no longer in the sweep", ""
        else:
            why = _what_changed(tags, plan)
            then = "; " + _next_step(outcomes[plan.fingerprint][1], plan)
            explained.add(label)
        _update_tags(client, run, {runs.STUDY_STATE: runs.SUPERSEDED,
                                   runs.SUPERSEDED_NOTE: why[:5000]})
        if run.info.status == runs.RUNNING:
            client.set_terminated(run.info.run_id, runs.KILLED)
        notes.append(f"{label}: {why}{then}")
    for label, plan in plans.items():
        how = outcomes[plan.fingerprint][1]
        if label not in explained and how in ("linked", "returned"):
            notes.append(f"{label}: {_next_step(how, plan)}")
    return notes


def _what_changed(tags: dict, plan: StudyPlan) -> str:
    text = runs.joined_tag(tags, runs.FINGERPRINT_DOC)
    if text is None:
        return "written by an earlier workbench, without a fingerprint"
    try:
        old, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return "its recorded fingerprint is unreadable"
    return fingerprint.changes(old, plan.document)


def _next_step(how: str, plan: StudyPlan) -> str:
    if how == "linked":
        return f"reusing study {plan.name}, run by another sweep"
    if how == "returned":
        return f"returning to its earlier study {plan.name}"
    return f"starting a new study {plan.name}"


def plan_tags(sweep: Sweep, plan: StudyPlan) -> dict[str, str]:
    """The tags every run of the study carries: sweep, study, method per slot, fidelity,
    and the values of the varied task parameters (``task.vary``) where the sweep has any."""
    tags = {runs.SWEEP: sweep.name, runs.STUDY_NAME: plan.name, runs.FINGERPRINT:
            plan.fingerprint, runs.METHOD: plan.label, runs.TASK: sweep.task.name}
    if plan.varied:
        tags[runs.VARIED] = json.dumps(dict(plan.varied), sort_keys=True)
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
              "seeds": ",".join(map(str, sweep.seeds)), "fingerprint": plan.fingerprint,
              "sampler": sweep.spec.sampler.name, "pruner": sweep.spec.pruner.name}
    for key, value in sweep.spec.budget.model_dump().items():
        params[f"budget.{key}"] = value
    for key, value in sweep.params_of(plan).model_dump().items():
        params[f"task.{key}"] = value
    for name, dist in plan.search_space().items():
        params[f"space.{name}"] = repr(dist)
    return params


def make_sampler(sweep: Sweep, plan: StudyPlan, salt: int) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded from the spec's seed, the task and the method of each slot,
    and ``salt`` (the number of trials so far), so a resumed or parallel worker does not replay
    earlier draws. Not from the fingerprint: an edit to the code draws the same
    hyperparameters, and the same study draws the same ones whichever sweep runs it."""
    spec = sweep.spec.sampler
    methods = ",".join(f"{slot}={name}" for slot, name in sorted(plan.combination.items()))
    seed = zlib.crc32(f"{spec.seed}:{sweep.task.name}:{methods}:{salt}".encode())
    if spec.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.name == "grid":
        return optuna.samplers.GridSampler(plan.grid(spec.grid_points), seed=seed)
    if spec.name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=spec.startup_trials,
                                            warn_independent_sampling=False)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.startup_trials,
                                      constant_liar=True)


def make_pruner(sweep: Sweep, plan: StudyPlan | None = None) -> optuna.pruners.BasePruner:
    """The spec's pruner; Hyperband's resource is the trial's report points over all seeds
    (over the seed axis's points when ``plan`` runs its seeds together); Wilcoxon's instances
    are the seeds (Optuna's documented use: per-instance evaluation)."""
    spec = sweep.spec.pruner
    if spec.name == "none":
        return optuna.pruners.NopPruner()
    if spec.name == "wilcoxon":  # one value per seed (``trial._ask_wilcoxon``)
        with warnings.catch_warnings():  # "experimental": its interface may change; ours won't
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.pruners.WilcoxonPruner(p_threshold=spec.p_threshold,
                                                 n_startup_steps=spec.startup_seeds)
    if spec.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=1,
            max_resource=(1 if plan is not None and plan.vectorised else len(sweep.seeds))
            * spec.report_points,
            reduction_factor=spec.reduction_factor)
    return optuna.pruners.MedianPruner(n_startup_trials=spec.startup_trials,
                                       n_warmup_steps=spec.warmup_steps)


def short_metric(metric: str) -> str:
    """The metric's last path part, for run names: ``train/loss`` -> ``loss``."""
    return metric.rsplit("/", 1)[-1]
