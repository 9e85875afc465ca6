"""DoG, D-Adaptation (SGD) and Prodigy against step-by-step re-derivations of their reference
implementations (github.com/formll/dog, facebookresearch/dadaptation, konstmish/prodigy).

Each ``reference_*`` function below restates the reference optimizer's update on one flat
float64 vector, in the reference's order of operations and with its defaults as keyword
defaults. The project's optimizers run on a list of tensors, so the two-tensor softmax problem
also checks that norms, inner products and sums are global (not per tensor), as the references
compute them.
"""

import io
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from workbench import registry
from workbench.testbeds import Budget
from workbench.testbeds.optimisation.logreg import LogReg
from workbench.testbeds.optimisation.quadratic import QuadraticParams, make_problem

STEPS = 40


class FlatProblem:
    """A loss over a list of tensors, with its gradient also available on one flat vector."""

    def __init__(self, loss, initial):
        self.loss, self.initial = loss, initial
        self.shapes = [t.shape for t in initial]

    def tensors(self):
        return [t.clone().requires_grad_(True) for t in self.initial]

    def x0(self):
        return np.concatenate([t.numpy().ravel() for t in self.initial])

    def grad(self, flat):
        sizes = [math.prod(s) for s in self.shapes]
        parts = torch.split(torch.from_numpy(flat.copy()), sizes)
        tensors = [part.reshape(shape).requires_grad_(True)
                   for part, shape in zip(parts, self.shapes, strict=True)]
        self.loss(tensors).backward()
        return np.concatenate([t.grad.numpy().ravel() for t in tensors])


def quadratic_problem():
    a, b, _ = make_problem(QuadraticParams(dim=5, condition_number=10.0), seed=3)
    start = torch.randn(5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    return FlatProblem(lambda ts: 0.5 * ts[0] @ (a @ ts[0]) - b @ ts[0], [start])


def softmax_problem():
    gen = torch.Generator().manual_seed(5)
    features = torch.randn(24, 4, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 3, (24,), generator=gen)
    weights = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    bias = torch.randn(3, generator=gen, dtype=torch.float64)
    return FlatProblem(lambda ts: F.cross_entropy(features @ ts[0] + ts[1], labels),
                       [weights, bias])


PROBLEMS = {"quadratic": quadratic_problem, "softmax": softmax_problem}


def reference_dog(problem, steps, reps_rel=1e-6, lr=1.0, eps=1e-8, init_eta=0.0):
    """formll/dog ``DoG``: one parameter group, all its tensors as one vector."""
    x0 = problem.x0()
    x = x0.copy()
    r = 0.0 if init_eta else reps_rel * (1 + np.linalg.norm(x0))  # init_eta zeroes reps_rel
    grad_sum = None
    path, etas = [], []
    for t in range(steps):
        g = problem.grad(x)
        if t == 0:
            grad_sum = g @ g + eps
        else:
            r = max(r, np.linalg.norm(x - x0))
            grad_sum += g @ g
        eta = init_eta if (t == 0 and init_eta) else lr * r / np.sqrt(grad_sum)
        x = x - eta * g
        path.append(x)
        etas.append(eta)
    return np.array(path), np.array(etas)


def reference_d_adaptation(problem, steps, lr=1.0, momentum=0.0, d0=1e-6,
                           growth_rate=math.inf):
    """facebookresearch/dadaptation ``DAdaptSGD`` (weight decay 0)."""
    x0 = problem.x0()
    x, s = x0.copy(), np.zeros_like(x0)
    d, numerator, g0_norm = d0, 0.0, None
    path, rates = [], []
    for _ in range(steps):
        g = problem.grad(x)
        if g0_norm is None:
            g0_norm = np.linalg.norm(g)
        dlr = d * lr / g0_norm
        numerator += dlr * (g @ s)  # the inner product uses s before this step's gradient
        s = s + dlr * g
        d_hat = 2 * numerator / np.linalg.norm(s)
        d = max(d, min(d_hat, d * growth_rate))  # the new d acts from the next step on
        x = momentum * x + (1 - momentum) * (x0 - s)
        path.append(x)
        rates.append(dlr)
    return np.array(path), np.array(rates)


def reference_prodigy(problem, steps, lr=1.0, beta1=0.9, beta2=0.999, beta3=None, eps=1e-8,
                      d0=1e-6, d_coef=1.0, growth_rate=math.inf, use_bias_correction=False,
                      safeguard_warmup=False):
    """konstmish/prodigy ``Prodigy`` (weight decay 0, slice_p 1)."""
    beta3 = math.sqrt(beta2) if beta3 is None else beta3
    x0 = problem.x0()
    x = x0.copy()
    m, v, s = np.zeros_like(x0), np.zeros_like(x0), np.zeros_like(x0)
    d, d_max, numerator = d0, d0, 0.0
    path, rates = [], []
    for k in range(steps):
        g = problem.grad(x)
        correction = 1.0
        if use_bias_correction:
            correction = math.sqrt(1 - beta2 ** (k + 1)) / (1 - beta1 ** (k + 1))
        dlr = d * lr * correction
        numerator = beta3 * numerator + (d / d0) * dlr * (g @ (x0 - x))
        m = beta1 * m + d * (1 - beta1) * g
        v = beta2 * v + d * d * (1 - beta2) * g * g
        s = beta3 * s + (d / d0) * (d if safeguard_warmup else dlr) * g
        d_hat = d_coef * numerator / np.abs(s).sum()
        if d == d0:
            d = max(d, d_hat)
        d_max = max(d_max, d_hat)
        d = min(d_max, d * growth_rate)
        denominator = np.sqrt(v) + d * eps  # with the updated d
        x = x - dlr * (m if beta1 > 0 else d * g) / denominator
        path.append(x)
        rates.append(dlr)
    return np.array(path), np.array(rates)


def ours_hyperparameters(name, options):
    """Our spelling of a reference option set (Prodigy's beta3=None is beta3 < 0 here)."""
    if name == "prodigy" and options.get("beta3", 0.0) is None:
        return {**options, "beta3": -1.0}
    return options


def make_closure(optimizer, problem, tensors, scale=1.0):
    def closure(backward=True):
        optimizer.zero_grad()
        loss = scale * problem.loss(tensors)
        loss.backward()
        return loss.detach()

    return closure


def run_ours(name, options, problem, steps):
    tensors = problem.tensors()
    optimizer = registry.get("step_size", name)(**ours_hyperparameters(name, options)).build(
        tensors, {})
    path, rates = [], []
    for _ in range(steps):
        optimizer.step(make_closure(optimizer, problem, tensors))
        path.append(torch.cat([t.detach().flatten() for t in tensors]).numpy())
        rates.append(optimizer.last_step_size)
    return np.array(path), np.array(rates)


REFERENCES = {"dog": reference_dog, "d_adaptation": reference_d_adaptation,
              "prodigy": reference_prodigy}

CASES = [
    ("dog", {}),
    ("dog", {"reps_rel": 1e-3, "lr": 0.7, "eps": 1e-6}),
    ("dog", {"init_eta": 1e-2}),
    ("d_adaptation", {}),
    ("d_adaptation", {"momentum": 0.9, "growth_rate": 1.5, "lr": 0.5, "d0": 1e-4}),
    ("prodigy", {}),
    ("prodigy", {"use_bias_correction": True, "safeguard_warmup": True, "growth_rate": 2.0,
                 "d_coef": 0.5, "beta2": 0.99}),
    ("prodigy", {"beta1": 0.0, "beta3": 0.9, "lr": 0.3, "eps": 1e-6}),
]


@pytest.mark.parametrize("problem_name", sorted(PROBLEMS))
@pytest.mark.parametrize("name, options", CASES)
def test_trajectory_matches_the_reference_update(name, options, problem_name):
    problem = PROBLEMS[problem_name]()
    path, rates = run_ours(name, options, problem, STEPS)
    expected_path, expected_rates = REFERENCES[name](problem, STEPS, **options)
    np.testing.assert_allclose(rates, expected_rates, rtol=1e-10, atol=0)
    scale = np.abs(expected_path).max()
    np.testing.assert_allclose(path, expected_path, rtol=1e-10, atol=1e-12 * scale)
    # The comparison is not vacuous: the step size adapts and the iterate moves.
    assert rates.max() > 10 * rates[0]
    assert np.linalg.norm(path[-1] - problem.x0()) > 1e-3


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_runs_twenty_steps_in_the_training_loop(name):
    cls = registry.get("step_size", name)
    method = cls()
    assert method.step_size_cap() == math.inf
    assert cls.requirements(method.params) <= LogReg.provides
    steps = []
    out = LogReg().run(LogReg.Params(n_samples=64, dim=5),
                       {"step_size": method,
                        "batch_size": registry.get("batch_size", "constant")()},
                       seed=0, device=torch.device("cpu"), budget=Budget(steps=20),
                       log=lambda step, metrics: steps.append(metrics["method/step_size"]))
    assert out["steps"] == 20 and not out["diverged"]
    assert math.isfinite(out["train/loss"])
    assert all(math.isfinite(rate) and rate > 0 for rate in steps[1:])


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_state_dict_round_trip_gives_the_same_next_step(name):
    problem = softmax_problem()
    method = registry.get("step_size", name)()
    tensors = problem.tensors()
    optimizer = method.build(tensors, {})
    for _ in range(6):
        optimizer.step(make_closure(optimizer, problem, tensors))
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    copies = [t.detach().clone().requires_grad_(True) for t in tensors]
    fresh = method.build(copies, {})
    fresh.load_state_dict(torch.load(buffer))

    optimizer.step(make_closure(optimizer, problem, tensors))
    fresh.step(make_closure(fresh, problem, copies))
    assert fresh.last_step_size == optimizer.last_step_size
    scalars = [{k: v for k, v in opt.param_groups[0].items() if k != "params"}
               for opt in (fresh, optimizer)]
    assert scalars[0] == scalars[1]
    for copy, original in zip(copies, tensors, strict=True):
        assert torch.equal(copy, original)


@pytest.mark.parametrize("name", ["d_adaptation", "prodigy"])
def test_a_zero_first_gradient_takes_no_step_and_changes_nothing(name):
    problem = softmax_problem()
    method = registry.get("step_size", name)()
    tensors, copies = problem.tensors(), problem.tensors()
    waited, fresh = method.build(tensors, {}), method.build(copies, {})
    waited.step(make_closure(waited, problem, tensors, scale=0.0))
    assert waited.last_step_size == 0.0
    assert all(torch.equal(t, c) for t, c in zip(tensors, copies, strict=True))
    waited.step(make_closure(waited, problem, tensors))
    fresh.step(make_closure(fresh, problem, copies))
    assert waited.last_step_size == fresh.last_step_size > 0
    assert all(torch.equal(t, c) for t, c in zip(tensors, copies, strict=True))
