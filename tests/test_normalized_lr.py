"""step_size/normalized_lr, Normalized LR+GD of Tyurin (2024, arXiv 2412.08424, Section 6):
theta <- theta - lr * beta * grad f(theta), beta = 1 / mean_i sigma(-y_i <a_i, theta>).

The update against numpy by hand on a tiny problem; the first block of the paper's Table 1
(the worst-case data set of its Theorem 5.1 with n = 1000, theta_0 = 0, full batch, steps until
every margin is positive) against an independent numpy run, once driving the optimizer
directly and once through `workbench run` as a user would."""

import json
import math

import numpy as np
import pytest
import torch

from workbench import registry
from workbench.cli import main as cli
from workbench.testbeds import Budget
from workbench.testbeds.optimisation import datasets
from workbench.testbeds.optimisation.logreg import LogReg

A = np.array([[1.0, 2.0], [-1.5, 0.5], [0.3, -2.0]])
Y = np.array([1.0, -1.0, 1.0])
THETA0 = np.array([0.2, -0.1])


def method(**hp):
    return registry.get("step_size", "normalized_lr")(**hp)


def logistic(a: np.ndarray, y: np.ndarray):
    """The optimizer's inputs on (a, y): the parameter, the closure and the margins."""
    a_t, y_t = torch.tensor(a), torch.tensor(y)
    theta = torch.zeros(a.shape[1], dtype=torch.float64, requires_grad=True)

    def closure(backward=True):
        theta.grad = None
        loss = torch.nn.functional.softplus(-y_t * (a_t @ theta)).mean()
        if backward:
            loss.backward()
        return loss.detach()

    def margins():
        return y_t * (a_t @ theta.detach())

    return theta, closure, margins


def numpy_step(theta, a, y, lr):
    """One Normalized LR+GD step by hand: (new theta, lr * beta)."""
    m = y * (a @ theta)
    w = 1.0 / (1.0 + np.exp(m))  # sigma(-m)
    grad = -(w * y) @ a / len(y)
    step = lr / w.mean()
    return theta - step * grad, step


def test_update_matches_the_formula_by_hand():
    theta, closure, margins = logistic(A, Y)
    with torch.no_grad():
        theta.copy_(torch.tensor(THETA0))
    opt = method(lr=0.7).build([theta], {"margins": margins})
    expected = THETA0.copy()
    for _ in range(4):
        expected, step = numpy_step(expected, A, Y, 0.7)
        opt.step(closure)
        assert opt.last_step_size == pytest.approx(step, rel=1e-13)
        np.testing.assert_allclose(theta.detach().numpy(), expected, rtol=1e-13, atol=1e-15)


def test_first_step_from_zero_is_twice_lr_times_the_gradient():
    theta, closure, margins = logistic(A, Y)  # all weights 1/2 at theta = 0, so beta = 2
    opt = method(lr=3.0).build([theta], {"margins": margins})
    opt.step(closure)
    assert opt.last_step_size == pytest.approx(6.0, rel=1e-15)
    np.testing.assert_allclose(theta.detach().numpy(), 6.0 * 0.5 * (Y @ A) / 3, rtol=1e-14)


def test_the_floor_keeps_the_step_finite_and_within_the_cap():
    theta, closure, margins = logistic(A, Y)
    m = method(lr=0.5, epsilon=1e-3)
    opt = m.build([theta], {"margins": lambda: torch.full((3,), 800.0, dtype=torch.float64)})
    opt.step(closure)  # sigma(-800) underflows to 0: the floor takes over
    assert opt.last_step_size == pytest.approx(0.5 / 1e-3) == m.step_size_cap()


def test_it_declares_what_it_reads():
    cls = registry.get("step_size", "normalized_lr")
    assert cls.requirements(method().params) == frozenset({"margins"})
    assert cls.fidelity == "reconstructed"
    assert set(cls.hyperparameters) == {"lr", "epsilon"}


# ---- Table 1, first block: the worst-case data set of Theorem 5.1, n = 1000 ---------------

N = 1000
NORMALIZED_LRS = (100.0, 10.0, 1.0, 0.1)


def numpy_steps_to_separate(n, lr, normalized, cap=2000):
    """Steps from theta_0 = 0 until every margin y_i <a_i, theta> is positive (numpy)."""
    a = np.tile([-0.5, -1.0], (n, 1))
    a[0, 0] = 0.5
    y = -np.ones(n)
    y[0] = 1.0
    theta = np.zeros(2)
    for t in range(cap + 1):
        m = y * (a @ theta)
        if (m > 0).all():
            return t
        w = 1.0 / (1.0 + np.exp(m))
        grad = -(w * y) @ a / n
        theta = theta - lr * (1.0 / w.mean() if normalized else 1.0) * grad
    raise AssertionError(f"no separation in {cap} steps")


@pytest.fixture(scope="module")
def table():
    """numpy's counts: Normalized LR+GD at lr = 100, 10, 1, 0.1 and LR+GD at lr = 100."""
    return ([numpy_steps_to_separate(N, lr, True) for lr in NORMALIZED_LRS],
            numpy_steps_to_separate(N, 100.0, False))


def test_the_numpy_reference_shows_the_papers_claims(table):
    normalized, gd = table
    assert normalized == [2, 2, 16, 157] and gd == 308  # as computed; see the module docstring
    assert normalized == sorted(normalized)  # larger steps separate sooner
    assert gd > 15 * normalized[0]  # LR+GD with the same large step needs Omega(n) steps


def test_the_optimizer_reproduces_table_1_directly(table):
    x, y = datasets.tyurin_worst_case(N)
    counts = []
    for lr in NORMALIZED_LRS:
        theta, closure, margins = logistic(x.numpy(), y.numpy())
        opt = method(lr=lr).build([theta], {"margins": margins})
        t = 0
        while not bool((margins() > 0).all()):
            opt.step(closure)
            t += 1
            assert t <= 1000
        counts.append(t)
    assert counts == table[0]


def workbench_steps(capsys, step_size: str, steps: int) -> float:
    """`workbench run logreg ... --json` (the CLI's entry point, in this process)."""
    args = ["run", "logreg", *step_size.split(), "dataset=tyurin_worst_case", f"n_samples={N}",
            "init_scale=0", "target_metric=train/accuracy", "--steps", str(steps), "--json",
            "--device", "cpu"]
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["train/accuracy"] == 1.0
    return out["train/steps_to_target"]


def test_workbench_run_reproduces_table_1(capsys, table):
    normalized = [workbench_steps(capsys, f"step_size=normalized_lr step_size.lr={lr}", 200)
                  for lr in NORMALIZED_LRS]
    gd = workbench_steps(capsys, "step_size=constant step_size.lr=100", 400)
    assert normalized == table[0]
    assert gd == table[1]


def test_minibatch_steps_through_the_logreg_loop():
    """With a minibatch the margins are the minibatch's: at theta = 0 every weight is 1/2."""
    logged = []
    out = LogReg().run(
        LogReg.Params(n_samples=64, dim=5, batch_size=16, init_scale=0.0),
        {"step_size": method(lr=0.5), "batch_size": registry.get("batch_size", "constant")()},
        seed=0, device=torch.device("cpu"), budget=Budget(steps=20),
        log=lambda step, metrics: logged.append(metrics),
    )
    assert out["steps"] == 20 and math.isfinite(out["train/loss"])
    assert logged[1]["method/step_size"] == pytest.approx(1.0, rel=1e-14)
    assert all(m["method/step_size"] >= 0.5 for m in logged[1:])  # mean weight <= 1
