"""Control tasks through the real CLI: a sweep with every slot, labelled entries, a report."""

from __future__ import annotations

import sqlite3

import pytest
import yaml

from tests.conftest import run_cli
from workbench.spec import sweep as spec_module


def control_spec(**overrides) -> dict:
    spec = {
        "name": "ctl",
        "task": {"name": "cartpole", "params": {"rollout_len": 16, "batch_axis": "num_envs"}},
        "methods": {
            "batch_size": [{"name": "constant", "label": "N4", "fixed": {"size": 64}},
                           {"name": "constant", "label": "N16", "fixed": {"size": 256}}],
            "entropy": ["constant"],
            "advantage": [{"name": "gae", "fixed": {"lam": 0.9}}],
        },
        "seeds": 2, "trials": 2,
        "sampler": {"name": "random", "seed": 0}, "pruner": "none",
        "objective": {"metric": "train/return_recent", "at": "final"},
        "budget": {"steps": 50, "samples": 2048},
        "report": {"x_axes": ["cost/env_steps"], "metrics": ["train/return_recent"]},
    }
    spec.update(overrides)
    return spec


def test_one_method_twice_with_labels_makes_two_studies(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(control_spec()))
    sweep = spec_module.load(path)
    assert sorted(plan.label for plan in sweep.studies) == ["gae+N16+constant",
                                                            "gae+N4+constant"]
    assert len({plan.name for plan in sweep.studies}) == 2


def test_duplicate_labels_are_refused_naming_the_key(tmp_path):
    spec = control_spec()
    spec["methods"]["batch_size"][1]["label"] = "N4"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = run_cli("sweep", path, cwd=tmp_path)
    assert out.returncode == 2
    assert "methods.batch_size[1].label" in out.stderr and "listed twice" in out.stderr
    assert not list(tmp_path.glob("*.db"))


@pytest.mark.slow
def test_control_sweep_and_report(tmp_path):
    path = tmp_path / "ctl.yaml"
    path.write_text(yaml.safe_dump(control_spec()))
    store = f"sqlite:///{tmp_path / 'ctl.db'}"
    out = run_cli("sweep", path, "--storage", store, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    out = run_cli("report", path, "--storage", store, "--out", tmp_path / "report", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    with sqlite3.connect(tmp_path / "ctl.mlflow.db") as db:
        rows = db.execute(
            "SELECT r.name, m.value FROM runs r JOIN latest_metrics m ON m.run_uuid = r.run_uuid "
            "WHERE m.key = 'batch/num_envs' AND r.name LIKE '% s%'").fetchall()
    envs = {name.split(" ")[0].split("+")[1]: value for name, value in rows}
    assert envs == {"N4": 4.0, "N16": 16.0}
    assert (tmp_path / "report" / "index.html").is_file()
    curves = list((tmp_path / "report").glob("*env_steps*.png"))
    assert curves, sorted(p.name for p in (tmp_path / "report").iterdir())
