"""Family properties of every registered step-size method, with hyperparameters drawn from its
search space, on random small positive quadratics:

- every reported ``last_step_size`` is finite, >= 0 and <= ``step_size_cap()``;
- the optimizer's state survives ``state_dict()`` / ``load_state_dict()``: a fresh optimizer
  loaded with it takes the same next step as the original.

Methods registered later are covered too; a method is skipped only when no drawn configuration
needs nothing beyond what this problem provides.
"""

import copy
import math

import optuna.distributions as od
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench import registry
from workbench.hyperparams import Choice

STEPS = 15
PROVIDED = frozenset({"closure", "total_steps", "batches_per_epoch", "f_star",
                      "loss_lower_bound", "smoothness", "lmo", "margins", "hvp", "logit_jvp"})


def value(hp):
    """A hyperparameter's default search space; every option of a choice; else its default."""
    dist = hp.distribution()
    if isinstance(dist, od.FloatDistribution):
        if dist.log:
            return st.floats(math.log(dist.low), math.log(dist.high)).map(
                lambda v: min(max(math.exp(v), dist.low), dist.high))
        return st.floats(dist.low, dist.high)
    if isinstance(dist, od.IntDistribution):
        return st.integers(dist.low, dist.high)
    if isinstance(dist, od.CategoricalDistribution):
        return st.sampled_from(dist.choices)
    if isinstance(hp, Choice):
        return st.sampled_from(hp.choices)
    return st.just(hp.default)


def quadratic(seed, dim, f_star):
    """x, closure and info for f(x) = 1/2 (x - x*)^T A (x - x*) + f_star, float64; the ``lmo``
    is that of a Euclidean ball holding x_0 (argmin_{|s| <= r} <g, s> = -r g / |g|); the
    ``margins`` those of five fixed examples; ``hvp`` is A v and ``logit_jvp`` that of three
    fixed linear logits of five examples."""
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    eigenvalues = 0.05 + 0.95 * torch.rand(dim, generator=gen, dtype=torch.float64)
    a = q @ torch.diag(eigenvalues) @ q.T
    a = 0.5 * (a + a.T)
    x_star = torch.randn(dim, generator=gen, dtype=torch.float64)
    x = torch.randn(dim, generator=gen, dtype=torch.float64).requires_grad_(True)

    def loss():
        d = x - x_star
        return 0.5 * d @ (a @ d) + f_star

    def closure(backward=True):
        if not backward:
            with torch.no_grad():
                return loss()
        x.grad = None
        value = loss()
        value.backward()
        return value.detach()

    radius = 2.0 * float(x.detach().norm()) + 1.0

    def lmo(grads):
        norm = math.sqrt(sum(float(g @ g) for g in grads)) or 1.0
        return [-radius * g / norm for g in grads]

    rows = torch.randn(5, dim, generator=gen, dtype=torch.float64)

    def margins():  # signed margins of five fixed examples at x (normalized_lr's input)
        return rows @ x.detach()

    logit_rows = torch.randn(5, 3, dim, generator=gen, dtype=torch.float64)

    info = {"total_steps": STEPS, "batches_per_epoch": 1, "f_star": f_star,
            "loss_lower_bound": 0.0, "smoothness": float(eigenvalues.max()), "lmo": lmo,
            "margins": margins, "hvp": lambda vectors: [a @ vectors[0]],
            "logit_jvp": lambda vectors: logit_rows @ vectors[0]}
    return x, closure, info


@pytest.mark.parametrize("name", registry.available("step_size"))
def test_step_sizes_stay_in_bounds_and_state_survives_a_round_trip(name):
    cls = registry.get("step_size", name)
    fitted = []

    @settings(max_examples=25, deadline=None, derandomize=True)
    @given(
        params=st.fixed_dictionaries({k: value(hp) for k, hp in cls.hyperparameters.items()}),
        seed=st.integers(0, 2**31 - 1),
        dim=st.integers(1, 6),
        f_star=st.floats(0.01, 2.0),
        reload_at=st.integers(1, STEPS - 1),
    )
    def check(params, seed, dim, f_star, reload_at):
        method = cls(**params)
        if not cls.requirements(method.params) <= PROVIDED:
            return
        fitted.append(method)
        x, closure, info = quadratic(seed, dim, f_star)
        optimizer = method.build([x], info)
        cap = method.step_size_cap()
        for step in range(STEPS):
            if step == reload_at:
                start, state = x.detach().clone(), copy.deepcopy(optimizer.state_dict())
                optimizer.step(closure)
                after, size = x.detach().clone(), optimizer.last_step_size
                with torch.no_grad():
                    x.copy_(start)
                fresh = method.build([x], info)
                fresh.load_state_dict(state)
                fresh.step(closure)
                assert torch.equal(x.detach(), after), f"{method}: reloaded state steps elsewhere"
                assert fresh.last_step_size == size, method
            else:
                optimizer.step(closure)
            size = optimizer.last_step_size
            assert math.isfinite(size) and size >= 0, (method, step, size)
            assert size <= cap * (1 + 1e-12), (method, step, size, cap)

    check()
    if not fitted:
        pytest.skip(f"step_size/{name} needs more than {sorted(PROVIDED)}")
