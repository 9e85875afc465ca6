"""AICN against its step size computed by hand, and the tasks' Hessian-vector products."""

import math

import pytest
import torch

from workbench import registry
from workbench.testbeds.optimisation import logreg, quadratic

H = torch.tensor([1.0, 10.0, 100.0], dtype=torch.float64)


def stepper(f, hvp, x0, **params):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    optimizer = registry.get("step_size", "aicn")(**params).build([x], {"hvp": hvp})
    counts = {"loss": 0}

    def closure(backward=True):
        if not backward:
            counts["loss"] += 1
            with torch.no_grad():
                return f(x)
        optimizer.zero_grad()
        loss = f(x)
        loss.backward()
        return loss.detach()
    return x, optimizer, closure, counts


def alpha(L, decrement):
    return (-1.0 + math.sqrt(1.0 + 2.0 * L * decrement)) / (L * decrement)


def test_on_a_diagonal_quadratic_each_step_shrinks_x_by_one_minus_alpha():
    """f = 1/2 x^T diag(1, 10, 100) x: d = x, G^2 = x^T H x, so x_{k+1} = (1 - alpha_k) x_k."""
    x, optimizer, closure, _ = stepper(lambda x: 0.5 * (H * x * x).sum(), lambda v: [H * v[0]],
                                       [1.0, 1.0, 1.0], L=1.0)
    want = [1.0, 1.0, 1.0]
    for _ in range(6):
        decrement = math.sqrt(sum(h * w * w for h, w in zip(H.tolist(), want, strict=True)))
        a = alpha(1.0, decrement)
        want = [(1.0 - a) * w for w in want]
        optimizer.step(closure)
        assert x.detach().tolist() == pytest.approx(want, rel=1e-12)
        assert optimizer.last_step_size == pytest.approx(a, rel=1e-12)
        assert 0.0 < optimizer.last_step_size <= 1.0
    assert a > 0.9  # tends to the Newton step as the decrement falls


def softplus_1d(w):
    return torch.nn.functional.softplus(-w).sum()


def hvp_1d(x):
    def hvp(vectors):
        s = torch.sigmoid(x.detach())
        return [s * (1 - s) * vectors[0]]
    return hvp


def test_one_point_logistic_regression_by_hand():
    """f(w) = log(1 + e^-w): g = -sigma(-w), H = sigma(w) sigma(-w), d = -1/sigma(w) and
    G = e^{-w/2}. From w = 0 with L = 4: G = 1, alpha = 1/2, w_1 = 0 + 1/2 * 2 = 1."""
    x = torch.tensor([0.0], dtype=torch.float64, requires_grad=True)
    optimizer = registry.get("step_size", "aicn")(L=4.0).build([x], {"hvp": hvp_1d(x)})

    def closure():
        optimizer.zero_grad()
        loss = softplus_1d(x)
        loss.backward()
        return loss.detach()

    optimizer.step(closure)
    assert x.item() == pytest.approx(1.0, rel=1e-13)
    assert optimizer.last_step_size == pytest.approx(0.5, rel=1e-13)
    w = 1.0
    for _ in range(4):
        a = alpha(4.0, math.exp(-w / 2))
        w = w + a * (1 + math.exp(-w))
        optimizer.step(closure)
        assert x.item() == pytest.approx(w, rel=1e-12)
        assert optimizer.last_step_size == pytest.approx(a, rel=1e-12)


def test_backtracking_doubles_L_until_the_cubic_bound_holds_and_halves_it_after():
    """From w = -3 with L = 1e-3 the near-Newton step overshoots the cubic bound; the search
    doubles L until f(w - alpha d) <= f(w) - alpha G^2 + alpha^2 G^2 / 2 + L alpha^3 G^3 / 6,
    re-derived here in floats."""
    x = torch.tensor([-3.0], dtype=torch.float64, requires_grad=True)
    optimizer = registry.get("step_size", "aicn")(L=1e-3, backtrack=True).build(
        [x], {"hvp": hvp_1d(x)})
    loss_evals = [0]

    def closure(backward=True):
        if not backward:
            loss_evals[0] += 1
            with torch.no_grad():
                return softplus_1d(x)
        optimizer.zero_grad()
        loss = softplus_1d(x)
        loss.backward()
        return loss.detach()

    def f(w):
        return math.log1p(math.exp(-w))

    w, L, doublings = -3.0, 1e-3, []
    for step in range(5):
        L = L if step == 0 else L / 2
        sig = 1 / (1 + math.exp(-w))
        d, decrement = -1 / sig, math.exp(-w / 2)
        trials = 0
        while True:
            a = alpha(L, decrement)
            trials += 1
            bound = f(w) + decrement ** 2 * (-a + a * a / 2 + L * a ** 3 * decrement / 6)
            if f(w - a * d) <= bound:
                break
            L *= 2
        doublings.append(trials - 1)
        w = w - a * d
        loss_evals[0] = 0
        optimizer.step(closure)
        assert x.item() == pytest.approx(w, rel=1e-12)
        assert optimizer.last_step_size == pytest.approx(a, rel=1e-12)
        assert optimizer.param_groups[0]["L"] == pytest.approx(L, rel=1e-12)
        assert loss_evals[0] == trials
    assert doublings[0] > 5  # the first step did search


def test_conjugate_gradients_give_the_dense_newton_step_on_logistic_regression():
    """Five features, twelve points, l2 = 0.1: one step equals x - alpha H^{-1} g with H from
    torch.autograd.functional.hessian and a dense solve."""
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(12, 5, generator=gen, dtype=torch.float64)
    y = torch.sign(torch.randn(12, generator=gen, dtype=torch.float64))

    def f(x):
        return torch.nn.functional.softplus(-y * (a @ x)).mean() + 0.05 * (x @ x)

    x0 = torch.randn(5, generator=gen, dtype=torch.float64)
    x = x0.clone().requires_grad_(True)

    def hvp(vectors):
        return [torch.autograd.functional.hvp(f, x.detach(), vectors[0])[1]]

    optimizer = registry.get("step_size", "aicn")(L=2.0).build([x], {"hvp": hvp})

    def closure():
        optimizer.zero_grad()
        loss = f(x)
        loss.backward()
        return loss.detach()

    g = torch.func.grad(f)(x0)
    d = torch.linalg.solve(torch.autograd.functional.hessian(f, x0), g)
    a_k = alpha(2.0, math.sqrt(float(g @ d)))
    optimizer.step(closure)
    assert x.detach().tolist() == pytest.approx((x0 - a_k * d).tolist(), rel=1e-10)
    assert optimizer.last_step_size == pytest.approx(a_k, rel=1e-10)


def explicit_hessian_product(problem, v):
    """The dense Hessian of the task's full-data loss (its formula, one seed) times v."""
    data = tuple(t.unsqueeze(0) for t in problem.pure.data)
    hess = torch.autograd.functional.hessian(
        lambda x: problem.pure.loss([x.unsqueeze(0)], data, None)[0],
        problem.variables[0].detach().clone())
    return hess @ v


@pytest.mark.parametrize("task", ["quadratic", "logreg"])
def test_the_tasks_hvp_is_the_hessian_of_the_steps_loss(task):
    if task == "quadratic":
        params = quadratic.QuadraticParams(dim=6, condition_number=50.0)
        problem = quadratic.build_problem(params, 0, torch.device("cpu"), 10)
    else:
        params = logreg.LogRegParams(n_samples=40, dim=6, l2=0.01)
        problem = logreg.build_problem(params, 0, torch.device("cpu"), 10)
    v = torch.randn(6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (got,) = problem.info["hvp"]([v])
    assert got.tolist() == pytest.approx(explicit_hessian_product(problem, v).tolist(),
                                         rel=1e-10, abs=1e-13)
    if task == "logreg":  # a minibatch: the Hessian of those rows' loss only
        idx = torch.tensor([0, 3, 5, 7])
        problem.current["batch"] = idx
        (got,) = problem.info["hvp"]([v])
        x0 = problem.variables[0].detach()
        xs, ys = (t[idx] for t in problem.pure.data)
        hess = torch.autograd.functional.hessian(
            lambda w: torch.nn.functional.softplus(-ys * (xs @ w)).mean() + 0.005 * (w @ w), x0)
        assert got.tolist() == pytest.approx((hess @ v).tolist(), rel=1e-10, abs=1e-13)


def test_it_declares_what_it_reads_and_its_cap():
    cls = registry.get("step_size", "aicn")
    assert cls.requirements(cls().params) == {"hvp"}
    assert cls.requirements(cls(backtrack=True).params) == {"hvp", "closure"}
    assert cls().step_size_cap() == 1.0
    assert cls.fidelity == "reconstructed" and cls.vectorised
