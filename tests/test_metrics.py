"""The metric vocabulary (workbench/common/metrics.py): one meaning per name across testbeds."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import ROOT
from workbench import registry
from workbench.common import metrics
from workbench.testbeds import TASKS, Budget

TINY_RLVR = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "warmup_steps": 30,
             "warmup_batch": 16, "n_train": 200, "n_eval": 16, "eval_k_prompts": 4,
             "eval_k": 2, "prompts": 4, "group_size": 4, "eval_every": 2, "digits_min": 1,
             "digits_max": 2, "format_reward": 0.5, "warmup_target": None}
SMALL_CONTROL = {"num_envs": 2, "rollout_len": 16, "minibatches": 2, "epochs": 1}

# (task, task parameters, methods other than the task's defaults): every loop and every kind
# of logged name (batch-size diagnostics, an entropy hook's metrics, a value head)
TINY_AGENT = {"train_instances": 4, "eval_instances": 2, "instances_per_update": 2,
              "group_size": 2, "max_steps": 8, "hidden": 8}
TINY_AGENT_LM = {"train_instances": 4, "eval_instances": 2, "instances_per_update": 2,
                 "group_size": 2, "max_steps": 4, "hidden": 32, "layers": 1, "heads": 2,
                 "intermediate": 64, "warmup_steps": 5, "warmup_target": None,
                 "warmup_batch": 8}
RUNS = [
    ("logreg", {}, {"batch_size": ("noise_scale", {})}),
    ("logreg", {"target_metric": "train/accuracy"}, {"batch_size": ("norm_test", {})}),
    ("quadratic", {}, {}),
    ("least_squares", {}, {}),
    ("simplex", {}, {"step_size": ("fw_short_step", {})}),
    ("mlp", {}, {}),
    ("cartpole", SMALL_CONTROL, {"entropy": ("clip_cov", {})}),
    ("cartpole", {**SMALL_CONTROL, "algorithm": "reinforce"}, {}),
    ("pendulum", SMALL_CONTROL, {}),
    ("dqn-cartpole", {"num_envs": 2, "learning_starts": 80, "train_frequency": 1,
                      "batch_size": 8, "hidden": [8]}, {"batch_size": ("linear_ramp", {})}),
    ("lqr-ars", {"horizon": 20}, {}),
    ("lqr-ars", {"horizon": 20, "policy": "oscillator", "top_b": 4}, {}),
    ("rlvr-arith", TINY_RLVR, {"entropy": ("clip_cov", {})}),
    ("rlvr-arith", TINY_RLVR, {"advantage": ("gae", {})}),
    ("keydoor", TINY_AGENT, {"advantage": ("gigpo", {}), "entropy": ("clip_cov", {})}),
    ("keydoor", TINY_AGENT, {"advantage": ("gae", {})}),
    ("toolcalc", TINY_AGENT, {"advantage": ("hgpo", {})}),
    ("keydoor-lm", TINY_AGENT_LM, {"advantage": ("turn_gae", {})}),
]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def logged_names(task_name, params, methods, values: dict | None = None) -> set[str]:
    task = TASKS[task_name]
    chosen = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    for slot, (name, hyperparameters) in methods.items():
        chosen[slot] = registry.get(slot, name)(**hyperparameters)
    for slot in set(task.slots) - set(chosen):  # the step-size slot of the optimisation tasks
        chosen[slot] = registry.get(slot, "constant")()
    names: set[str] = set()

    def log(step, logged):
        names.update(logged)
        for name, value in logged.items():
            (values if values is not None else {}).setdefault(name, []).append(float(value))

    task().run(task.Params(**params), chosen, seed=0, device=torch.device("cpu"),
               budget=Budget(steps=3), log=log)
    return names


@pytest.mark.parametrize("task_name, params, methods", RUNS,
                         ids=[f"{t}-{'-'.join(n for n, _ in m.values()) or 'defaults'}"
                              for t, _, m in RUNS])
def test_every_logged_name_is_in_the_vocabulary(task_name, params, methods):
    values: dict[str, list[float]] = {}
    names = logged_names(task_name, params, methods, values)
    assert len(names) > 5
    unknown = sorted(n for n in names if not metrics.is_known(n))
    assert not unknown, f"{task_name} logs names that workbench/common/metrics.py does not " \
                        f"define: {unknown}"
    task = TASKS[task_name]
    declared = task.metric_bounds(task.Params(**params))
    for name, logged in values.items():  # every declared range holds on what is logged
        low, high = metrics.bounds(name, declared.get(name))
        finite = [v for v in logged if math.isfinite(v)]
        assert all(low <= v <= high for v in finite), (name, low, high, finite)


def test_every_objective_a_task_offers_is_in_the_vocabulary():
    for name, task in TASKS.items():
        unknown = sorted(m for m in task.metrics if not metrics.is_known(m))
        assert not unknown, (name, unknown)


def test_open_families_and_unknown_names():
    assert metrics.is_known("method/cov_clipped_frac") and metrics.is_known("eval/pass@8")
    assert not metrics.is_known("train/approx_kl_k1")
    assert not metrics.is_known("eval/pass@0") and not metrics.is_known("method/")
    assert metrics.unit("train/approx_kl") == "nats"


def test_metric_bounds_come_from_the_vocabulary_narrowed_by_the_task():
    assert metrics.bounds("train/accuracy") == (0.0, 1.0) == metrics.bounds("eval/pass@8")
    assert metrics.bounds("train/policy_loss") == (-math.inf, math.inf)  # may be negative
    assert metrics.bounds("method/step_size") == (-math.inf, math.inf)
    assert metrics.bounds("train/return") == (-math.inf, math.inf)  # Pendulum's are < 0
    assert metrics.bounds("train/return", (0.0, None)) == (0.0, math.inf)  # CartPole's
    assert metrics.bounds("train/accuracy", (None, 0.5)) == (0.0, 0.5)
    cartpole, pendulum = TASKS["cartpole"], TASKS["pendulum"]
    # CartPole-v1: +1 per step survived, at most 500 steps; Pendulum: every reward <= 0
    assert cartpole.metric_bounds(cartpole.Params())["train/return"] == (0.0, 500.0)
    assert pendulum.metric_bounds(pendulum.Params())["train/return"] == (None, 0.0)
    assert metrics.bounds("train/return", (0.0, 500.0)) == (0.0, 500.0)
    dqn = TASKS["dqn-cartpole"]  # the same environment under the DQN loop
    assert dqn.metric_bounds(dqn.Params())["train/return_recent"] == (0.0, 500.0)
    for name, task in TASKS.items():  # a task bounds only names the vocabulary defines
        assert all(metrics.is_known(m) for m in task.bounds), name


def test_readme_metrics_table_is_the_vocabulary():
    readme = (ROOT / "README.md").read_text()
    assert metrics.markdown_table() in readme, \
        "README's metrics table differs from workbench.common.metrics.markdown_table(); paste it in"
