"""The softmax-radius controller against its radius computed by hand."""

import cmath
import math

import pytest
import torch

from tests.test_aegd import A, Y
from workbench import registry
from workbench.common.budget import Budget
from workbench.testbeds.optimisation import logreg


def logistic(x):
    return torch.nn.functional.softplus(-Y * (A @ x)).mean()


def stepper(x0, **params):
    x = torch.tensor(x0, dtype=torch.float64, requires_grad=True)

    def logit_jvp(vectors):  # the two class logits (0, <a_i, x>)
        slope = A @ vectors[0]
        return torch.stack([torch.zeros_like(slope), slope], dim=-1)

    def margins():
        return Y * (A @ x.detach())

    optimizer = registry.get("step_size", "softmax_radius")(**params).build(
        [x], {"logit_jvp": logit_jvp, "margins": margins})

    def closure():
        optimizer.zero_grad()
        loss = logistic(x)
        loss.backward()
        return loss.detach()
    return x, optimizer, closure


def by_hand(x, radius, kappa, lr):
    """(eta, x - eta g) in plain floats: rho_i from the spread |<a_i, g>| of the logits."""
    rows, labels = A.tolist(), Y.tolist()
    m = [y * sum(a * w for a, w in zip(row, x, strict=True)) for row, y in zip(rows, labels,
                                                                                 strict=True)]
    weights = [-y / (1 + math.exp(mi)) / len(rows) for y, mi in zip(labels, m, strict=True)]
    g = [sum(w * row[j] for w, row in zip(weights, rows, strict=True)) for j in range(len(x))]
    spreads = [abs(sum(a * gj for a, gj in zip(row, g, strict=True))) for row in rows]
    if radius == "lower_bound":
        rho = min(math.pi / s for s in spreads)
    else:
        rho = min(math.sqrt(mi * mi + math.pi ** 2) / s for mi, s in zip(m, spreads,
                                                                          strict=True))
    eta = min(lr, kappa * rho)
    return eta, [w - eta * gj for w, gj in zip(x, g, strict=True)]


@pytest.mark.parametrize("radius", ["lower_bound", "binary_exact"])
@pytest.mark.parametrize(("kappa", "lr"), [(1.0, 1e4), (0.5, 1e4), (1.0, 0.3)])
def test_six_steps_follow_the_radius_by_hand(radius, kappa, lr):
    x, optimizer, closure = stepper([0.1, -0.2, 0.3], lr=lr, kappa=kappa, radius=radius)
    want = [0.1, -0.2, 0.3]
    capped = 0
    for _ in range(6):
        eta, want = by_hand(want, radius, kappa, lr)
        optimizer.step(closure)
        assert x.detach().tolist() == pytest.approx(want, rel=1e-12)
        assert optimizer.last_step_size == pytest.approx(eta, rel=1e-12)
        capped += eta < lr
    assert capped == (6 if lr == 1e4 else 0)  # a spike is capped; a small step is not


def test_the_binary_radius_is_the_distance_to_the_nearest_zero_of_the_partition_function():
    """log(1 + e^{-m}) along m(t) = m0 + a t is singular where 1 + e^{-m(t)} = 0, nearest at
    t* = (-m0 + i pi) / a; the method's radius for one sample is |t*|."""
    a_row = torch.tensor([[0.8, -0.5, 0.3]], dtype=torch.float64)
    w = torch.tensor([0.4, 0.1, -0.2], dtype=torch.float64, requires_grad=True)
    g = [torch.tensor([1.5, 2.0, -1.0], dtype=torch.float64)]
    slope = float(a_row @ g[0])
    m0 = float(a_row @ w.detach())

    def logit_jvp(vectors):
        s = a_row @ vectors[0]
        return torch.stack([torch.zeros_like(s), s], dim=-1)

    method = registry.get("step_size", "softmax_radius")
    exact = method(radius="binary_exact").build(
        [w], {"logit_jvp": logit_jvp, "margins": lambda: a_row @ w.detach()})
    bound = method().build([w], {"logit_jvp": logit_jvp})
    t_star = (-m0 + 1j * math.pi) / slope
    assert abs(1 + cmath.exp(-(m0 + slope * t_star))) < 1e-12
    assert float(exact.radius(g)) == pytest.approx(abs(t_star), rel=1e-14)
    assert float(bound.radius(g)) == pytest.approx(math.pi / abs(slope), rel=1e-14)
    assert float(bound.radius(g)) <= float(exact.radius(g))


def test_the_multiclass_bound_takes_the_largest_logit_spread_over_samples():
    x = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    slopes = torch.tensor([[0.0, 1.0, -1.0], [0.5, 0.5, 0.5], [3.0, -1.0, 0.0]],
                          dtype=torch.float64)
    optimizer = registry.get("step_size", "softmax_radius")().build(
        [x], {"logit_jvp": lambda vectors: slopes})
    assert float(optimizer.radius([torch.ones(2)])) == pytest.approx(math.pi / 4.0, rel=1e-15)
    still = registry.get("step_size", "softmax_radius")(lr=0.7).build(
        [x], {"logit_jvp": lambda vectors: torch.zeros(3, 3, dtype=torch.float64)})
    assert float(still.radius([torch.ones(2)])) == math.inf

    def closure():
        still.zero_grad()
        loss = (x - 1.0).pow(2).sum()
        loss.backward()
        return loss.detach()
    still.step(closure)  # no logit moves: the plain step lr
    assert still.last_step_size == 0.7


def test_the_logreg_tasks_logit_jvp_is_the_directional_derivative_of_its_logits():
    params = logreg.LogRegParams(n_samples=30, dim=4)
    problem = logreg.build_problem(params, 0, torch.device("cpu"), 10)
    xs = problem.pure.data[0]
    v = torch.randn(4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    got = problem.info["logit_jvp"]([v])
    assert got.shape == (30, 2)
    assert got[:, 0].abs().max() == 0.0
    assert got[:, 1].tolist() == pytest.approx((xs @ v).tolist(), rel=1e-12)
    problem.current["batch"] = idx = torch.tensor([2, 9, 11])
    assert problem.info["logit_jvp"]([v])[:, 1].tolist() == pytest.approx(
        (xs[idx] @ v).tolist(), rel=1e-12)


def test_a_learning_rate_spike_stays_safe_on_logistic_regression():
    """lr = 1e4 on the logreg task: plain gradient descent throws the loss up, the controller
    keeps it falling."""
    task = logreg.LogReg()
    params = logreg.LogRegParams(n_samples=64, dim=5, label_noise=0.1)
    finals = {}
    for name in ("constant", "softmax_radius"):
        method = registry.get("step_size", name)(lr=1e4)
        losses = []
        task.run(params, {"step_size": method,
                          "batch_size": registry.get("batch_size", "constant")()},
                 seed=0, device=torch.device("cpu"), budget=Budget(steps=15),
                 log=lambda step, metrics: losses.append(metrics["train/loss"]))  # noqa: B023
        finals[name] = losses
    assert max(finals["constant"]) > 10 * finals["constant"][0]
    assert finals["softmax_radius"][-1] < finals["softmax_radius"][0]
    assert max(finals["softmax_radius"]) <= finals["softmax_radius"][0] * 1.5


def test_it_declares_what_it_reads_and_its_cap():
    cls = registry.get("step_size", "softmax_radius")
    assert cls.requirements(cls().params) == {"logit_jvp"}
    assert cls.requirements(cls(radius="binary_exact").params) == {"logit_jvp", "margins"}
    assert cls(lr=3.0).step_size_cap() == 3.0
    assert cls.fidelity == "reconstructed" and cls.vectorised
