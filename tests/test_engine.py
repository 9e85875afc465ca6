"""The engine: exact trial counts with several workers, failing and diverging methods."""

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from tests.conftest import run_cli, study_name, tiny_spec
from workbench.engine.sweep_run import run_sweep
from workbench.families import StepSizeMethod
from workbench.registry import _REGISTRY, Reference, register
from workbench.spec import sweep as spec


@pytest.fixture
def raising_method():
    @register
    class RaisesDemo(StepSizeMethod):
        name = "raises_demo"
        reference = Reference("a deliberately broken method", 2026)
        fidelity = "reconstructed"

        def build(self, params, info):
            raise RuntimeError("boom: this method always fails")

    yield RaisesDemo
    del _REGISTRY[("step_size", "raises_demo")]


def load_tiny(write_spec, tmp_path, **overrides):
    path = write_spec(tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}", **overrides))
    return spec.load(path)


def test_several_workers_run_each_trial_once(write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=4, storage=f"sqlite:///{tmp_path / 'store.db'}"))
    result = run_cli("sweep", path, "--workers", "3", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "database is locked" not in result.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id],
                              max_results=1000)
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    for title in ("tiny.step_size=constant", "tiny.step_size=polyak"):
        name = study_name(storage, title)
        trials = optuna.load_study(study_name=name, storage=storage).get_trials()
        assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials)
        numbers = [r.data.tags["optuna.trial_number"] for r in runs
                   if r.data.tags.get("workbench.kind") == "trial"
                   and r.data.tags["workbench.study"] == name]
        assert sorted(numbers) == ["0", "1", "2", "3"]
    assert sum(r.data.tags.get("workbench.kind") == "seed" for r in runs) == 2 * 4 * 2
    assert all(r.info.status == "FINISHED" for r in runs)


def test_a_raising_method_fails_its_trials_and_the_sweep_goes_on(raising_method, write_spec,
                                                                 tmp_path):
    sweep = load_tiny(write_spec, tmp_path,
                      methods={"step_size": ["raises_demo", "constant"]}, max_failed_trials=2)
    statuses = {s.label: s for s in run_sweep(sweep, device="cpu")}
    assert statuses["constant"].complete == 3
    broken = statuses["raises_demo"]
    assert broken.failed == 2 and broken.complete == 0
    assert all("boom: this method always fails" in r for r in broken.fail_reasons)
    study = optuna.load_study(study_name=study_name(sweep.storage, "tiny.step_size=raises_demo"),
                              storage=sweep.storage)
    client = MlflowClient(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
    for trial in study.get_trials():
        run = client.get_run(trial.user_attrs["mlflow_run_id"])
        assert run.info.status == "FAILED"
        text = open(client.download_artifacts(run.info.run_id, "traceback.txt")).read()
        assert "RuntimeError: boom" in text and "Traceback" in text
    # again: the study has spent its failure allowance, so nothing more runs
    again = {s.label: s for s in run_sweep(sweep, device="cpu")}
    assert again["raises_demo"].failed == 2


def test_a_diverging_run_is_pruned_with_a_reason(write_spec, tmp_path):
    sweep = load_tiny(
        write_spec, tmp_path,
        task={"name": "quadratic", "params": {"dim": 5, "condition_number": 10}},
        methods={"step_size": [{"name": "constant", "fixed": {"lr": 50.0}}]},
        budget={"steps": 2000})
    assert sweep.notes == ["tiny.step_size=constant: nothing to tune; running 1 trial"]
    (status,) = run_sweep(sweep, device="cpu")
    assert status.pruned == 1 and status.complete == 0
    trial = optuna.load_study(study_name=status.name, storage=sweep.storage).get_trials()[0]
    assert trial.user_attrs["prune_reason"] == "diverged"
    client = MlflowClient(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
    run = client.get_run(trial.user_attrs["mlflow_run_id"])
    assert run.info.status == "KILLED"
    assert run.data.tags["workbench.prune_reason"] == "diverged"
    # explosive growth, not a NaN, stopped it: the default rule for a minimised objective
    detail = run.data.tags["workbench.prune_detail"]
    assert "grew past 1e+06 times its first value" in detail, detail
    seed_run = client.search_runs([run.info.experiment_id],
                                  "tags.`workbench.kind` = 'seed'")[0]
    steps = client.get_metric_history(seed_run.info.run_id, "train/suboptimality")
    assert len(steps) < 20  # stopped at once, not after 2,000 steps of growth


def test_the_divergence_rule():
    from workbench.stats.objective import Divergence

    loss = Divergence("train/loss", "minimize")
    assert [loss.check(v) for v in (0.69, 3.0, 6.9e5)] == [None, None, None]
    assert "grew past 1e+06 times its first value 0.69" in loss.check(5e240)
    assert Divergence("train/loss", "minimize").check(float("nan")) is None  # the loop's
    ret = Divergence("train/return", "maximize")
    assert [ret.check(v) for v in (1.0, 1e300, -1e300)] == [None, None, None]
    bound = Divergence("train/loss", "minimize", bound=10.0)
    assert bound.check(1e-3) is None and bound.check(9.0) is None
    assert "past the bound 10" in bound.check(11.0)
    assert "past the bound 0" in Divergence("r", "maximize", bound=0.0).check(-1.0)


def test_median_pruner_reports_per_seed_and_prunes(write_spec, tmp_path):
    sweep = load_tiny(
        write_spec, tmp_path, trials=12, seeds=2,
        methods={"step_size": [{"name": "constant",
                                "search_space": {"lr": {"low": 1e-4, "high": 3.0,
                                                        "log": True}}}]},
        pruner={"name": "median", "startup_trials": 2, "report_points": 5})
    (status,) = run_sweep(sweep, device="cpu")
    study = optuna.load_study(study_name=status.name, storage=sweep.storage)
    assert status.finished == 12 and status.pruned >= 1
    complete = [t for t in study.get_trials() if t.state == TrialState.COMPLETE]
    assert max(complete[0].intermediate_values) == 2 * 5 - 1  # seed 1, last report point


def test_samplers_are_seeded(write_spec, tmp_path):
    params = []
    for run in range(2):
        folder = tmp_path / f"run{run}"
        folder.mkdir()
        path = folder / "spec.yaml"
        import yaml

        path.write_text(yaml.safe_dump(tiny_spec(storage=f"sqlite:///{folder / 's.db'}",
                                                 sampler={"name": "tpe", "seed": 7,
                                                          "startup_trials": 2},
                                                 methods={"step_size": ["constant"]})))
        sweep = spec.load(path)
        run_sweep(sweep, device="cpu")
        study = optuna.load_study(study_name=study_name(sweep.storage, "tiny.step_size=constant"),
                                  storage=sweep.storage)
        params.append([t.params for t in study.get_trials()])
    assert params[0] == params[1]
    assert len({t["step_size.lr"] for t in params[0]}) == 3


def test_a_searched_hyperparameter_the_code_never_reads_is_flagged(write_spec, tmp_path,
                                                                   capsys):
    # with f_star=lower_bound, Polyak never reads delta: tuning it would burn the budget
    sweep = load_tiny(write_spec, tmp_path, trials=2, seeds=1, methods={"step_size": [
        {"name": "polyak", "search_space": {"delta": {"low": 1e-3, "high": 0.1, "log": True}}},
        {"name": "armijo", "search_space": {"beta": {"low": 0.3, "high": 0.9}}}]})
    run_sweep(sweep, device="cpu")
    err = capsys.readouterr().err
    assert "tiny.step_size=polyak: step_size.delta searched but never read" in err
    assert err.count("searched but never read") == 1  # once per study; armijo reads its knobs
    client = MlflowClient(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
    trials = client.search_runs([client.get_experiment_by_name("tiny").experiment_id],
                                "tags.`workbench.kind` = 'trial'")
    flagged = {r.data.tags["workbench.method"]: r.data.tags.get("workbench.unused_knobs")
               for r in trials}
    assert flagged == {"polyak": "step_size.delta", "armijo": None}
