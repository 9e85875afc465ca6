"""``task.vary``: one sweep compares values of a task parameter, each value (times each method
combination) its own study, labelled with the value, keyed by it, run with it, reported."""

import json

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.conftest import tiny_spec
from workbench.cli import main as cli
from workbench.engine.sweep_run import run_sweep
from workbench.spec import sweep as spec
from workbench.store import runs

STEPS = 6


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vary")
    document = tiny_spec(
        task={"name": "logreg", "params": {"n_samples": 64, "dim": 5},
              "vary": {"batch_size": [8, 32]}},
        methods={"step_size": ["constant"]}, trials=2, seeds=2, budget={"steps": STEPS},
        evaluation={"seeds": 1}, storage=f"sqlite:///{folder / 'store.db'}")
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    run_sweep(spec.load(path), device="cpu")
    client = MlflowClient(f"sqlite:///{folder / 'store.mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny").experiment_id
    return folder, path, client, experiment


def test_each_value_is_a_study_labelled_and_keyed_by_it():
    sweep = spec.check(tiny_spec(
        task={"name": "logreg", "params": {"n_samples": 64},
              "vary": {"batch_size": [8, 32], "l2": [0.0, 0.01]}},
        methods={"step_size": ["constant", "polyak"]}), "spec.yaml")
    assert [sweep.title(p) for p in sweep.studies[:4]] == [
        "tiny.step_size=constant, batch_size=8, l2=0.0",
        "tiny.step_size=constant, batch_size=8, l2=0.01",
        "tiny.step_size=constant, batch_size=32, l2=0.0",
        "tiny.step_size=constant, batch_size=32, l2=0.01"]
    assert len(sweep.studies) == 8 and sweep.studies[-1].label == "polyak, batch_size=32, l2=0.01"
    assert len({p.fingerprint for p in sweep.studies}) == 8
    assert [p.document["task"]["params"]["batch_size"] for p in sweep.studies[:4]] == [8, 8, 32, 32]
    assert sweep.task_params.batch_size is None  # the spec's params, without vary
    unvaried = spec.check(tiny_spec(task={"name": "logreg", "params": {"n_samples": 64,
                                                                       "batch_size": 8}},
                                    methods={"step_size": ["constant"]}), "spec.yaml")
    assert unvaried.studies[0].label == "constant"  # the same study: labels are not in it
    assert unvaried.studies[0].fingerprint == sweep.studies[0].fingerprint


def test_the_study_runs_carry_the_value_and_the_runs_use_it(swept):
    folder, path, client, experiment = swept
    studies = client.search_runs([experiment], "tags.`workbench.kind` = 'study'")
    by_label = {r.data.tags[runs.METHOD]: r for r in studies}
    assert set(by_label) == {"constant, batch_size=8", "constant, batch_size=32"}
    for size in (8, 32):
        study = by_label[f"constant, batch_size={size}"]
        assert study.data.tags[runs.STUDY_STATE] == runs.CURRENT
        assert study.data.tags[runs.STUDY_TITLE] == f"tiny.step_size=constant, batch_size={size}"
        assert json.loads(study.data.tags[runs.VARIED]) == {"batch_size": size}
        assert study.data.params["task.batch_size"] == str(size)
        document = json.loads(runs.joined_tag(study.data.tags, runs.FINGERPRINT_DOC))
        assert document["task"]["params"]["batch_size"] == size
        seeds = [r for r in client.search_runs(
            [experiment], f"tags.`{runs.FINGERPRINT}` = '{study.data.tags[runs.FINGERPRINT]}'")
            if r.data.tags[runs.KIND] in (runs.SEED, runs.EVALUATION)]
        assert len(seeds) == 2 * 2 + 1  # 2 trials of 2 seeds, the best on 1 held-out seed
        for seed in seeds:
            assert seed.data.params["task.batch_size"] == str(size)
            assert json.loads(seed.data.tags[runs.VARIED]) == {"batch_size": size}
            samples = client.get_metric_history(seed.info.run_id, "cost/samples")
            assert max(m.value for m in samples) == STEPS * size  # ran with its own batch


def test_status_and_report_show_each_value(swept, capsys):
    folder, path, client, experiment = swept
    assert cli.main(["status", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "constant, batch_size=8 " in shown and "constant, batch_size=32 " in shown
    out = folder / "out"
    assert cli.main(["report", str(path), "--out", str(out)]) == 0
    table = (out / "table_tiny.md").read_text()
    assert "| constant, batch_size=8 " in table and "| constant, batch_size=32 " in table
    for figure in ("final.png", "curves_train-loss_step.png"):
        assert (out / figure).exists()
    curves = (out / "curves_train-loss_step.json").read_text()
    assert "constant, batch_size=8" in curves and "constant, batch_size=32" in curves
