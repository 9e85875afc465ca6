"""Group size as the batch axis of the agent network loop, and its shipped sweep through the
real CLI, shrunk."""

from __future__ import annotations

import torch
import yaml

from tests.conftest import ROOT, run_cli
from workbench import registry
from workbench.testbeds import TASKS, Budget

SMALL = {"train_instances": 8, "eval_instances": 4, "instances_per_update": 4,
         "max_steps": 12, "hidden": 16, "eval_every": 2}


def test_the_batch_slot_sets_the_group_size_and_keeps_the_instances():
    task = TASKS["keydoor"]
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["batch_size"] = registry.get("batch_size", "constant")(size=12)
    logged: list[dict] = []
    task().run(task.Params(**SMALL, batch_axis="group_size"), methods, seed=0,
               device=torch.device("cpu"), budget=Budget(steps=2),
               log=lambda step, m: logged.append(dict(m)))
    assert [(m["batch/prompts"], m["batch/group_size"]) for m in logged] == [(4.0, 3.0)] * 2
    logged.clear()
    task().run(task.Params(**SMALL), methods, seed=0, device=torch.device("cpu"),
               budget=Budget(steps=1), log=lambda step, m: logged.append(dict(m)))
    assert (logged[0]["batch/prompts"], logged[0]["batch/group_size"]) == (1.0, 8.0)


def test_the_group_size_sweep_runs_and_reports(tmp_path):
    spec = yaml.safe_load((ROOT / "sweeps" / "agent-group-size-keydoor.yaml").read_text())
    spec["task"]["params"].update(SMALL)
    spec.update(seeds=1, budget={"steps": 2, "samples": 100000})
    spec["methods"]["batch_size"] = spec["methods"]["batch_size"][:2]
    path = tmp_path / "g.yaml"
    path.write_text(yaml.safe_dump(spec))
    store = f"sqlite:///{tmp_path / 'g.db'}"
    out = run_cli("sweep", path, "--storage", store, "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    report = run_cli("report", path, "--storage", store, "--out", tmp_path / "report",
                     cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    table = (tmp_path / "report" / "table_agent-group-size-keydoor.md").read_text()
    assert all(f"G{g}" in table for g in (2, 4)), table


def test_tree_sampling_with_group_size_as_the_batch_axis_is_refused(tmp_path):
    spec = yaml.safe_load((ROOT / "sweeps" / "agent-group-size-keydoor.yaml").read_text())
    spec["methods"]["advantage"] = ["tree_grpo"]
    spec["task"]["params"].update(sampling="auto", tree_expansions=3)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = run_cli("sweep", path, "--storage", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "task.params.batch_axis" in out.stderr and "tree_grpo" in out.stderr
    assert not (tmp_path / "x.db").exists()
