"""Seeds on a seed axis (``execution: {seeds: vectorised}``): each seed of a vectorised run has
the metrics of its own sequential run, step by step (CPU, float64, 1e-9 relative). A run of
one seed (``Task.run``) is the same loop on a seed axis of one, but with the step-size
method's one-run optimizer and the problem's own formulas; S seeds stack the variables, map
the formulas and step the seed-axis optimizer: these tests hold the two to each other, and
``tests/test_one_seed_loop.py`` holds ``Task.run`` to the numbers of the loop it replaced."""

from __future__ import annotations

import math
import sqlite3

import optuna
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from mlflow.tracking import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from tests.conftest import run_cli, study_name, tiny_spec
from workbench import registry
from workbench.common.budget import Budget
from workbench.engine.sweep_run import run_sweep
from workbench.families import ContractViolation, StepSizeMethod, check
from workbench.families.batch_size import check_configuration as check_batch_size
from workbench.families.step_size import check_configuration as check_step_size
from workbench.registry import _REGISTRY, Reference, register
from workbench.spec import sweep as spec
from workbench.testbeds import get_task

CPU = torch.device("cpu")
RELATIVE = 1e-9
ABSOLUTE = 1e-12  # for differences that cancel to near zero (suboptimality at the optimum)
UNTIMED = {"time/wall_seconds"}  # the one metric that is not a function of the seed

VECTORISED = [name for name in registry.available("step_size")
              if registry.get("step_size", name).vectorised]
TASKS = {  # a minibatch logistic regression, a full-batch quadratic, minibatch least squares
    "logreg": {"n_samples": 96, "dim": 6, "batch_size": 16},
    "quadratic": {"dim": 8, "condition_number": 50.0},
    "least_squares": {"n_samples": 80, "dim": 6, "batch_size": 20, "condition_number": 30.0},
}


def run_alone(task_name, params, methods, seeds, steps):
    """Each seed run by ``Task.run``: {seed: [(step, metrics)]} and {seed: final result}."""
    task = get_task(task_name)()
    params = task.Params(**params)
    logged, finals = {}, {}
    for seed in seeds:
        rows = logged.setdefault(seed, [])
        fresh = {slot: type(m)(**m.params) for slot, m in methods.items()}
        finals[seed] = task.run(params, fresh, seed=seed, device=CPU, budget=Budget(steps=steps),
                                log=lambda step, m, rows=rows: rows.append((step, dict(m))))
    return logged, finals


def run_together(task_name, params, methods, seeds, steps):
    """The same seeds by ``Task.run_seeds``, in the same shapes."""
    task = get_task(task_name)()
    params = task.Params(**params)
    logged = {seed: [] for seed in seeds}

    def log(step, per_seed):
        assert len(per_seed) == len(seeds)
        for seed, metrics in zip(seeds, per_seed, strict=True):
            if metrics is not None:
                logged[seed].append((step, dict(metrics)))

    fresh = {slot: type(m)(**m.params) for slot, m in methods.items()}
    results = task.run_seeds(params, fresh, seeds=list(seeds), device=CPU,
                             budget=Budget(steps=steps), log=log)
    return logged, dict(zip(seeds, results, strict=True))


def close(a: float, b: float, relative: float = RELATIVE) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= relative * max(abs(a), abs(b)) + ABSOLUTE


def assert_same_metrics(alone, together, relative: float = RELATIVE):
    for seed, rows in alone.items():
        other = together[seed]
        assert [s for s, _ in rows] == [s for s, _ in other], f"seed {seed}: logged steps"
        for (step, a), (_, b) in zip(rows, other, strict=True):
            assert a.keys() == b.keys(), f"seed {seed} step {step}: {a.keys() ^ b.keys()}"
            for key in a.keys() - UNTIMED:
                assert close(a[key], b[key], relative), (
                    f"seed {seed} step {step} {key}: {a[key]} {b[key]}")


def assert_same_finals(alone, together):
    for seed, result in alone.items():
        other = together[seed]
        assert (result["steps"], result["diverged"]) == (other["steps"], other["diverged"])
        for key in result.keys() - UNTIMED - {"steps", "diverged"}:
            assert close(result[key], other[key]), (seed, key)


def values_of(dist):
    """A hypothesis strategy over one hyperparameter's default search range."""
    if isinstance(dist, CategoricalDistribution):
        return st.sampled_from(dist.choices)
    if isinstance(dist, IntDistribution):
        return st.integers(dist.low, dist.high)
    assert isinstance(dist, FloatDistribution)
    if dist.log:
        return st.floats(math.log(dist.low), math.log(dist.high)).map(math.exp)
    return st.floats(dist.low, dist.high)


@st.composite
def configured_methods(draw):
    """A vectorised step-size method with values drawn from its searched hyperparameters."""
    cls = registry.get("step_size", draw(st.sampled_from(VECTORISED)))
    values = {}
    for name, hp in cls.hyperparameters.items():
        dist = hp.distribution()
        if dist is not None and draw(st.booleans()):
            values[name] = draw(values_of(dist))
    return cls(**values)


@settings(deadline=None, max_examples=60, derandomize=True, database=None)
@given(task_name=st.sampled_from(sorted(TASKS)), method=configured_methods(),
       seeds=st.lists(st.integers(0, 10_000), min_size=2, max_size=4, unique=True))
def test_every_seed_on_the_axis_has_the_metrics_of_its_own_run(task_name, method, seeds):
    # a method needing what the task does not give (an lmo, margins) is never paired with it
    assume(method.requirements(method.params) <= get_task(task_name).provides)
    methods = {"step_size": method}
    if "batch_size" in get_task(task_name).slots:
        methods["batch_size"] = registry.get("batch_size", "constant")()
    alone, alone_finals = run_alone(task_name, TASKS[task_name], methods, seeds, 25)
    together, together_finals = run_together(task_name, TASKS[task_name], methods, seeds, 25)
    assert_same_metrics(alone, together)
    assert_same_finals(alone_finals, together_finals)


FLOAT32 = 1e-4  # the networks train in float32: batched and single matmuls round differently


@pytest.mark.parametrize(("model", "method"), [("mlp", "sgd_momentum"), ("mlp", "polyak"),
                                               ("cnn", "adam"), ("cnn", "armijo"),
                                               ("mlp", "subset_norm")])
def test_an_ensemble_of_networks_matches_each_network_trained_alone(model, method):
    """The MLP/CNN on a seed axis: S networks, stacked and mapped with vmap, each with its own
    split, initialisation and minibatches; validation every third step as alone."""
    params = {"model": model, "width": 16, "batch_size": 32, "eval_every": 3}
    methods = {"step_size": registry.get("step_size", method)(),
               "batch_size": registry.get("batch_size", "constant")()}
    alone, _ = run_alone("mlp", params, methods, [3, 11, 40], 12)
    together, _ = run_together("mlp", params, methods, [3, 11, 40], 12)
    assert_same_metrics(alone, together, FLOAT32)
    assert [step for step, m in together[3] if "val/loss" in m] == [0, 3, 6, 9, 12]


def test_the_methods_that_declare_a_seed_axis_include_the_quickstarts():
    assert {"constant", "polyak", "armijo", "adam", "sgd_momentum"} <= set(VECTORISED)


def test_a_line_search_backtracks_on_its_own_per_seed():
    """Armijo's trial points differ by seed: each seed counts its own loss evaluations, and
    those counts are its sequential run's."""
    methods = {"step_size": registry.get("step_size", "armijo")(eta0=50.0, reset_option=2),
               "batch_size": registry.get("batch_size", "constant")()}
    seeds = [0, 1, 2, 3]
    alone, _ = run_alone("logreg", TASKS["logreg"], methods, seeds, 15)
    together, _ = run_together("logreg", TASKS["logreg"], methods, seeds, 15)
    assert_same_metrics(alone, together)
    counts = {seed: rows[-1][1]["cost/loss_evals"] for seed, rows in together.items()}
    assert len(set(counts.values())) > 1, counts  # the seeds did backtrack differently
    per_step = [[m["cost/loss_evals"] for _, m in rows] for rows in together.values()]
    assert any(a != b for a, b in zip(per_step[0], per_step[1], strict=True))


def test_a_diverging_seed_stops_while_the_others_go_on():
    """Gradient descent with step 3 on the quadratic x^2 / 2 - b x doubles |x - x*| every
    step: each seed overflows at a step set by its own start and b. The first to overflow
    stops there; the rest keep stepping, exactly as in their own runs."""
    params = {"dim": 1, "condition_number": 1.0, "init_scale": 1.0}
    methods = {"step_size": registry.get("step_size", "constant")(lr=3.0)}
    candidates = list(range(8))
    _, finals = run_alone("quadratic", params, methods, candidates, 2_000)
    assert all(finals[s]["diverged"] for s in candidates)
    steps = {s: finals[s]["steps"] for s in candidates}
    early, late = min(candidates, key=steps.get), max(candidates, key=steps.get)
    assert steps[late] - steps[early] >= 3, steps
    budget = steps[late] - 1  # the late seed never overflows within it
    seeds = [late, early, *[s for s in candidates if s not in (early, late)][:1]]
    alone, alone_finals = run_alone("quadratic", params, methods, seeds, budget)
    together, together_finals = run_together("quadratic", params, methods, seeds, budget)
    assert together_finals[early]["diverged"] and together_finals[early]["steps"] == steps[early]
    assert not together_finals[late]["diverged"] and together_finals[late]["steps"] == budget
    assert len(together[late]) == budget + 1 > len(together[early])
    assert_same_metrics(alone, together)
    assert_same_finals(alone_finals, together_finals)


# the contracts' seed-axis checks catch what breaks parity ---------------------------------------

def test_the_step_size_contract_refuses_a_scalar_reduced_across_seeds():
    """A Polyak step computed from the gradient norm over all seeds at once fails the
    contract's seed-axis check."""
    polyak = registry.get("step_size", "polyak")

    class AcrossSeeds(polyak):
        def build(self, params, info):
            optimizer = super().build(params, info)
            optimizer._sq_per_seed = lambda tensors: (
                sum(torch.sum(t * t) for t in tensors).double().expand(
                    optimizer.seeds or ()).clone())
            return optimizer

    method = AcrossSeeds()
    with pytest.raises(ContractViolation, match="on a seed axis, seed"):
        check_step_size(AcrossSeeds, {}, method)
    assert check(polyak) == []


def test_the_batch_size_contract_refuses_a_vectorised_method_that_reads_a_seed():
    noise_scale = registry.get("batch_size", "noise_scale")

    class Shared(noise_scale):
        vectorised = True

    with pytest.raises(ContractViolation, match="declares vectorised = True"):
        check_batch_size(Shared, {}, Shared())


# the spec: the mode of each study, auto's fallback, the fingerprint ---------------------------

def resolved(tmp_path, write, **overrides):
    return spec.load(write(tiny_spec(**overrides)), storage=f"sqlite:///{tmp_path}/s.db")


def test_auto_runs_a_study_vectorised_where_it_can_and_says_once_where_not(tmp_path, write_spec):
    sweep = resolved(tmp_path, write_spec, execution={"seeds": "auto"},
                     methods={"step_size": ["polyak"],
                              "batch_size": ["constant", "noise_scale"]})
    modes = {plan.display: plan.vectorised for plan in sweep.studies}
    assert modes == {"step_size=polyak+batch_size=constant": True,
                     "step_size=polyak+batch_size=noise_scale": False}
    falling_back = [n for n in sweep.notes if "seeds run sequentially" in n]
    assert len(falling_back) == 1
    assert "noise_scale" in falling_back[0] and "vectorised = False" in falling_back[0]
    assert {p.document["execution"]["seeds"] for p in sweep.studies} == {"vectorised",
                                                                          "sequential"}


def test_vectorised_refuses_a_study_that_cannot_with_exit_2(tmp_path, write_spec):
    path = write_spec(tiny_spec(execution={"seeds": "vectorised"},
                                methods={"step_size": ["polyak"],
                                         "batch_size": ["noise_scale"]}))
    done = run_cli("sweep", path, "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert done.returncode == 2
    assert "execution.seeds" in done.stderr and "noise_scale" in done.stderr
    assert str(path.name) in done.stderr
    assert not (tmp_path / "s.db").exists()


def test_the_mode_is_part_of_the_study_fingerprint(tmp_path, write_spec):
    sequential = resolved(tmp_path, write_spec)
    vectorised = resolved(tmp_path, write_spec, execution={"seeds": "vectorised"})
    assert all(plan.vectorised for plan in vectorised.studies)
    assert not any(plan.vectorised for plan in sequential.studies)
    assert ({p.fingerprint for p in sequential.studies}
            .isdisjoint({p.fingerprint for p in vectorised.studies}))


# a whole sweep in both modes ----------------------------------------------------------------

def metric_rows(mlflow_db):
    """(run name, key, step) -> value of every seed run's metrics."""
    with sqlite3.connect(mlflow_db) as db:
        rows = db.execute(
            "SELECT r.name, m.key, m.step, m.value FROM metrics m JOIN runs r "
            "ON m.run_uuid = r.run_uuid JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE t.key = 'workbench.kind' AND t.value = 'seed'").fetchall()
    return {(name.split(" | ")[0], key, step): value for name, key, step, value in rows}


@pytest.mark.slow
def test_a_sweep_gives_the_same_runs_and_trial_values_in_both_modes(tmp_path, write_spec):
    stores = {}
    for mode in ("sequential", "vectorised"):
        folder = tmp_path / mode
        folder.mkdir()
        path = write_spec(tiny_spec(execution={"seeds": mode}, seeds=3, trials=3,
                                    methods={"step_size": ["constant", "polyak", "armijo"]},
                                    task={"name": "logreg", "params": {
                                        "n_samples": 64, "dim": 5, "batch_size": 16}}),
                          f"{mode}.yaml")
        done = run_cli("sweep", path, "--storage", f"sqlite:///{folder}/store.db", "--quiet",
                       cwd=folder)
        assert done.returncode == 0, done.stderr
        stores[mode] = folder
    values = {}
    for mode, folder in stores.items():
        storage = f"sqlite:///{folder}/store.db"
        for label in ("constant", "polyak", "armijo"):
            name = study_name(storage, f"tiny.step_size={label}")
            trials = optuna.load_study(study_name=name, storage=storage).get_trials()
            values[mode, label] = [(t.number, t.state, t.value) for t in trials]
            assert len(trials) == 3
    for label in ("constant", "polyak", "armijo"):
        a, b = values["sequential", label], values["vectorised", label]
        assert [(n, s) for n, s, _ in a] == [(n, s) for n, s, _ in b]
        assert all(close(x, y) for (_, _, x), (_, _, y) in zip(a, b, strict=True)), (a, b)
    seq = metric_rows(stores["sequential"] / "store.mlflow.db")
    vec = metric_rows(stores["vectorised"] / "store.mlflow.db")
    assert seq.keys() == vec.keys() and len(seq) > 3 * 3 * 3 * 21 * 5
    timed = [k for k in seq if k[1] in UNTIMED]
    assert all(close(seq[k], vec[k]) for k in seq.keys() - set(timed))


# the engine around a seed axis: pruning, divergence, a raising method ------------------------

def load_spec(write, tmp_path, **overrides):
    path = write(tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}",
                           execution={"seeds": "vectorised"}, **overrides))
    return spec.load(path)


def seed_runs(client, trial_run_id):
    experiment = client.get_run(trial_run_id).info.experiment_id
    return client.search_runs([experiment],
                              f"tags.`mlflow.parentRunId` = '{trial_run_id}'")


def test_the_median_pruner_sees_one_value_per_report_point_over_the_seeds(write_spec,
                                                                          tmp_path):
    sweep = load_spec(
        write_spec, tmp_path, trials=12, seeds=3,
        methods={"step_size": [{"name": "constant",
                                "search_space": {"lr": {"low": 1e-4, "high": 3.0,
                                                        "log": True}}}]},
        pruner={"name": "median", "startup_trials": 2, "report_points": 5})
    (status,) = run_sweep(sweep, device="cpu")
    study = optuna.load_study(study_name=status.name, storage=sweep.storage)
    assert status.finished == 12 and status.pruned >= 1
    complete = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    assert sorted(complete[0].intermediate_values) == [0, 1, 2, 3, 4]  # not per seed
    client = MlflowClient(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
    for trial in study.get_trials():
        runs = seed_runs(client, trial.user_attrs["mlflow_run_id"])
        assert len(runs) == 3  # every seed its own run, pruned or not
        want = "FINISHED" if trial.state == TrialState.COMPLETE else "KILLED"
        assert {r.info.status for r in runs} == {want}


def test_a_diverging_seed_axis_prunes_its_trial_with_the_reason(write_spec, tmp_path):
    sweep = load_spec(
        write_spec, tmp_path,
        task={"name": "quadratic", "params": {"dim": 5, "condition_number": 10}},
        methods={"step_size": [{"name": "constant", "fixed": {"lr": 50.0}}]},
        budget={"steps": 2000})
    (status,) = run_sweep(sweep, device="cpu")
    assert status.pruned == 1 and status.complete == 0
    trial = optuna.load_study(study_name=status.name, storage=sweep.storage).get_trials()[0]
    assert trial.user_attrs["prune_reason"] == "diverged"
    client = MlflowClient(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
    runs = seed_runs(client, trial.user_attrs["mlflow_run_id"])
    assert len(runs) == 2 and {r.info.status for r in runs} == {"KILLED"}
    assert {r.data.tags["workbench.prune_reason"] for r in runs} == {"diverged"}
    for run in runs:
        assert len(client.get_metric_history(run.info.run_id, "train/suboptimality")) < 20


def test_a_raising_method_fails_the_trial_and_every_seed_run(write_spec, tmp_path):
    @register
    class RaisesOnTheAxis(StepSizeMethod):
        name = "raises_on_the_axis"
        reference = Reference("a deliberately broken method", 2026)
        fidelity = "reconstructed"
        vectorised = True

        def build(self, params, info):
            raise RuntimeError("boom on the seed axis")

    try:
        sweep = load_spec(write_spec, tmp_path, methods={"step_size": ["raises_on_the_axis"]},
                          max_failed_trials=1)
        (status,) = run_sweep(sweep, device="cpu")
        assert status.failed == 1
        trial = optuna.load_study(study_name=status.name, storage=sweep.storage).get_trials()[0]
        client = MlflowClient(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
        assert client.get_run(trial.user_attrs["mlflow_run_id"]).info.status == "FAILED"
        runs = seed_runs(client, trial.user_attrs["mlflow_run_id"])
        assert len(runs) == 2 and {r.info.status for r in runs} == {"FAILED"}
        assert all("boom on the seed axis" in r.data.tags["workbench.fail_reason"]
                   for r in runs)
    finally:
        del _REGISTRY[("step_size", "raises_on_the_axis")]
