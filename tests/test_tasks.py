"""The testbeds: seeded data, exact f*, counted costs and budgets."""

import math

import pytest
import torch

from workbench import registry
from workbench.common import seeds
from workbench.testbeds import Budget
from workbench.testbeds.optimisation.logreg import LogReg, LogRegParams, make_data
from workbench.testbeds.optimisation.quadratic import Quadratic, QuadraticParams, make_problem

CPU = torch.device("cpu")


def run(task, params, method, steps=20, **budget):
    history = []
    out = task().run(params, {"step_size": method}, seed=3, device=CPU,
                     budget=Budget(steps=steps, **budget),
                     log=lambda step, metrics: history.append((step, dict(metrics))))
    return out, history


def test_logreg_data_is_seeded():
    x1, y1 = make_data(LogRegParams(), 7)
    x2, y2 = make_data(LogRegParams(), 7)
    x3, _ = make_data(LogRegParams(), 8)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, x3)
    assert set(y1.unique().tolist()) == {-1.0, 1.0}


def test_logreg_margin_separates_the_classes():
    params = LogRegParams(margin=0.5, label_noise=0.0)
    x, y = make_data(params, 0)
    gen = seeds.torch_generator(0, "data")  # the data set's own stream
    w_star = torch.randn(params.dim, generator=gen, dtype=torch.float64)
    w_star /= w_star.norm()
    assert float((y * (x @ w_star)).min()) >= 0.5 - 1e-12


def test_quadratic_f_star_is_exact():
    params = QuadraticParams(dim=30, condition_number=1e3)
    a, b, f_star = make_problem(params, 0)
    x_star = torch.linalg.solve(a, b)
    assert math.isclose(float(0.5 * x_star @ a @ x_star - b @ x_star), f_star, rel_tol=1e-10)
    eigenvalues = torch.linalg.eigvalsh(a)
    assert math.isclose(float(eigenvalues.max() / eigenvalues.min()), 1e3, rel_tol=1e-6)


def test_every_step_logs_the_fair_comparison_axes():
    out, history = run(LogReg, LogRegParams(n_samples=100, batch_size=25),
                       registry.get("step_size", "armijo")())
    steps = [s for s, _ in history]
    assert steps == list(range(21))
    for key in ("train/loss", "train/accuracy", "train/grad_norm", "method/step_size",
                "cost/samples", "cost/grad_evals", "cost/loss_evals", "time/wall_seconds"):
        assert key in history[-1][1], key
    last = history[-1][1]
    assert last["cost/samples"] == 20 * 25
    assert last["cost/grad_evals"] == 20
    assert last["cost/loss_evals"] >= 20  # at least one trial point per line search
    times = [m["time/wall_seconds"] for _, m in history]
    assert times == sorted(times)


def test_samples_budget_stops_early():
    out, history = run(LogReg, LogRegParams(n_samples=100, batch_size=10),
                       registry.get("step_size", "constant")(), steps=1000, samples=55)
    assert out["steps"] == 6 and history[-1][1]["cost/samples"] == 60


def test_quadratic_suboptimality_goes_to_zero_with_the_right_step():
    out, _ = run(Quadratic, QuadraticParams(dim=10, condition_number=10.0),
                 registry.get("step_size", "constant")(lr=1.0), steps=400)
    assert abs(out["train/suboptimality"]) < 1e-8


def test_a_diverging_run_stops_and_says_so():
    out, history = run(Quadratic, QuadraticParams(dim=10, condition_number=10.0),
                       registry.get("step_size", "constant")(lr=5.0), steps=5000)
    assert out["diverged"] and out["steps"] < 5000
    assert not math.isfinite(history[-1][1]["train/loss"])


def test_the_lazy_registry_names_each_task_by_its_own_name():
    from workbench.testbeds import TASKS

    assert {name: cls.name for name, cls in TASKS.items()} == {name: name for name in TASKS}


def test_a_logreg_spec_never_imports_the_rlvr_testbed(tmp_path):
    import subprocess
    import sys

    spec = tmp_path / "spec.yaml"
    spec.write_text("task: {name: logreg}\nmethods: {step_size: [constant]}\n")
    code = ("import sys; from workbench.spec import sweep as spec; spec.load(sys.argv[1]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers' "
            "or m.startswith('workbench.testbeds.rlvr.task')))")
    out = subprocess.run([sys.executable, "-c", code, str(spec)], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_name_a_task_provides_is_one_a_method_may_require():
    from workbench.families import REQUIRABLE
    from workbench.testbeds import TASKS

    for name, task in TASKS.items():
        assert task.provides <= REQUIRABLE, (name, sorted(task.provides - REQUIRABLE))


def test_a_task_providing_a_name_no_family_defines_is_refused():
    from workbench.testbeds.base import Task

    with pytest.raises(TypeError, match="closur, which no family"):
        type("Typo", (Task,), {"provides": frozenset({"closure", "closur"})})
