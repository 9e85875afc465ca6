"""The agent testbed through the real CLI: the key-door sweep with every estimator it
compares (episode-level, step-level, Monte Carlo segment, tree on each one's tree samples,
PPO+GAE),
shrunk, a sweep on the tool-use puzzle, and their reports."""

from __future__ import annotations

import yaml

from tests.conftest import ROOT, run_cli


def test_agent_sweep_and_report(tmp_path):
    spec = yaml.safe_load((ROOT / "sweeps" / "agent-advantage-keydoor.yaml").read_text())
    spec["task"]["params"].update(train_instances=8, eval_instances=4, instances_per_update=4,
                                  group_size=4, max_steps=12, hidden=16, eval_every=2,
                                  segment_branching=[2, 2], segment_length=3)
    spec.update(seeds=2, trials=1, budget={"steps": 3},
                sampler={"name": "random", "seed": 0})
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec))
    store = f"sqlite:///{tmp_path / 'agent.db'}"
    out = run_cli("sweep", path, "--storage", store, "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    labels = [m if isinstance(m, str) else m.get("label", m["name"])
              for m in spec["methods"]["advantage"]]
    done = {row[0]: row[1] for row in rows if row and row[0].endswith("+adam")}
    assert done == {f"{label}+adam": "1/1" for label in labels}, out.stdout
    report = run_cli("report", path, "--storage", store, "--out", tmp_path / "report",
                     cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    table = (tmp_path / "report" / "table_agent-advantage-keydoor.md").read_text()
    assert all(f"| {label}+adam" in table for label in labels), table
    for figure in ("curves_train-success_step", "curves_eval-success_cost-env_steps"):
        assert (tmp_path / "report" / f"{figure}.png").exists(), figure


def test_toolcalc_sweep_and_report(tmp_path):
    """The tool-use puzzle through the same loop, sweep and report, with each estimator kind:
    episode-level (grpo), step-level (gigpo, hgpo), tree (tree_grpo and spo_tree, each on its
    own sampler's trees) and a value head (gae)."""
    spec = yaml.safe_load((ROOT / "sweeps" / "agent-advantage-toolcalc.yaml").read_text())
    spec["task"]["params"].update(train_instances=8, eval_instances=4, instances_per_update=4,
                                  group_size=4, max_steps=8, hidden=16, eval_every=2)
    spec["task"]["params"]["segment_branching"] = [2, 2]
    spec["methods"]["advantage"] = ["grpo", "gigpo", "hgpo", "tree_grpo", "spo_tree", "gae"]
    spec.update(seeds=1, trials=1, budget={"steps": 3}, sampler={"name": "random", "seed": 0})
    path = tmp_path / "toolcalc.yaml"
    path.write_text(yaml.safe_dump(spec))
    store = f"sqlite:///{tmp_path / 'toolcalc.db'}"
    out = run_cli("sweep", path, "--storage", store, "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    done = {row[0]: row[1] for row in rows if row and row[0].endswith("+adam")}
    names = ("grpo", "gigpo", "hgpo", "tree_grpo", "spo_tree", "gae")
    assert done == {f"{m}+adam": "1/1" for m in names}, out.stdout
    report = run_cli("report", path, "--storage", store, "--out", tmp_path / "report",
                     cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    table = (tmp_path / "report" / "table_agent-advantage-toolcalc.md").read_text()
    assert all(f"| {m}+adam" in table for m in names)
    assert (tmp_path / "report" / "curves_train-path_ratio_step.png").exists()


def test_language_model_sweep_and_report(tmp_path, monkeypatch):
    """The key-door sweep of the language-model turn loop through the real CLI, shrunk (a tiny
    model and warm-up, cached once for every run): an episode-level (grpo), a turn-level group
    (gigpo) and a turn-level value (turn_gae) estimator, and its report."""
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))  # the child processes' too
    spec = yaml.safe_load((ROOT / "sweeps" / "agent-lm-keydoor.yaml").read_text())
    spec["task"]["params"].update(train_instances=8, eval_instances=4, instances_per_update=2,
                                  group_size=2, max_steps=6, hidden=32, layers=1, heads=2,
                                  intermediate=64, warmup_steps=10, warmup_target=None,
                                  warmup_batch=16, eval_every=2)
    spec["methods"]["advantage"] = ["grpo", "gigpo", "turn_gae"]
    spec.update(seeds=1, trials=1, budget={"steps": 2}, sampler={"name": "random", "seed": 0})
    path = tmp_path / "lm.yaml"
    path.write_text(yaml.safe_dump(spec))
    store = f"sqlite:///{tmp_path / 'lm.db'}"
    out = run_cli("sweep", path, "--storage", store, "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines()]
    done = {row[0]: row[1] for row in rows if row and row[0].endswith("+adam")}
    names = ("grpo", "gigpo", "turn_gae")
    assert done == {f"{m}+adam": "1/1" for m in names}, out.stdout
    report = run_cli("report", path, "--storage", store, "--out", tmp_path / "report",
                     cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    table = (tmp_path / "report" / "table_agent-lm-keydoor.md").read_text()
    assert all(f"| {m}+adam" in table for m in names), table
    assert (tmp_path / "report" / "curves_train-malformed_fraction_step.png").exists()


def test_budget_shorter_than_eval_every_still_evaluates(tmp_path):
    """A run stopped by its samples budget before the first ``eval_every`` update is evaluated at
    its last update: the eval/success objective is finite, the trial not pruned as diverged."""
    spec = {
        "name": "short", "seeds": 1, "trials": 1, "pruner": "none",
        "task": {"name": "keydoor", "params": {
            "size": 6, "max_steps": 8, "instances_per_update": 2, "group_size": 2,
            "train_instances": 4, "eval_instances": 2, "hidden": 8, "eval_every": 10}},
        "methods": {"step_size": ["adam"], "advantage": ["grpo"]},
        "sampler": {"name": "random", "seed": 0},
        "objective": {"metric": "eval/success", "direction": "maximize", "at": "final"},
        "budget": {"steps": 3, "samples": 10},
    }
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(spec))
    store = f"sqlite:///{tmp_path / 'short.db'}"
    out = run_cli("sweep", path, "--storage", store, "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    row = next(line.split() for line in out.stdout.splitlines()
               if line.startswith("grpo+adam"))
    assert row[1:3] == ["1/1", "0"], out.stdout  # done, none pruned
    assert 0.0 <= float(row[5]) <= 1.0, out.stdout  # the best trial's objective, finite
