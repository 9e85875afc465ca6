"""The notebook API: load_runs and load_metrics against what Optuna and MLflow's client say,
on SQLite and PostgreSQL."""

import optuna
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import tiny_spec
from workbench.engine.sweep_run import run_sweep
from workbench.spec import sweep as spec
from workbench.store.database import Store


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_load_runs_and_load_metrics_agree_with_the_store(backend, write_spec, tmp_path,
                                                         request, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a PostgreSQL store's artifacts go to ./DB-artifacts
    storage = (f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite"
               else request.getfixturevalue("postgres").new_database())
    sweep = spec.load(write_spec(tiny_spec(storage=storage, evaluation={"seeds": 2})))
    run_sweep(sweep, device="cpu", say=lambda line: None)
    from workbench import load_metrics, load_runs  # as a notebook would

    frame = load_runs("tiny", storage)
    client = Store.from_url(sweep.storage).mlflow_client()
    seeds = [r for r in client.search_runs(
        [client.get_experiment_by_name("tiny").experiment_id], max_results=1000)
        if r.data.tags["workbench.kind"] in ("seed", "evaluation")]
    assert sorted(frame["run_id"]) == sorted(r.info.run_id for r in seeds)
    assert set(frame["method"]) == {"constant", "polyak"}
    by_id = {r.info.run_id: r for r in seeds}
    for _, row in frame.iterrows():
        run = by_id[row["run_id"]]
        assert row["seed"] == int(run.data.tags["workbench.seed"])
        assert row["metrics.train/loss"] == pytest.approx(run.data.metrics["train/loss"])
        assert row["params.task.n_samples"] == run.data.params["task.n_samples"]
        assert row["tags.workbench.fidelity"] == run.data.tags["workbench.fidelity"]
    for plan in sweep.studies:
        best = optuna.load_study(study_name=plan.name, storage=sweep.storage).best_trial
        mine = frame[(frame["study"] == plan.name) & frame["best"]]
        assert set(mine["trial"]) == {best.number}
        assert sorted(mine[mine["kind"] == "seed"]["seed"]) == [0, 1]
        assert sorted(mine[mine["kind"] == "evaluation"]["seed"]) == [1000, 1001]

    curves = load_metrics("tiny", ["train/loss", "cost/samples"], storage)
    one = frame["run_id"].iloc[0]
    history = MlflowClient(Store.from_url(sweep.storage).mlflow_url).get_metric_history(
        one, "train/loss")
    got = curves[(curves["run_id"] == one) & (curves["key"] == "train/loss")]
    assert list(got["step"]) == [m.step for m in history]
    assert list(got["value"]) == pytest.approx([m.value for m in history])
    assert set(curves.columns) >= {"method", "trial", "seed", "best", "key", "step", "value"}


def test_load_runs_names_what_is_missing(tmp_path):
    from workbench import load_runs

    with pytest.raises(LookupError, match="no store at"):
        load_runs("tiny", f"sqlite:///{tmp_path / 'none.db'}")
