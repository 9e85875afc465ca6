"""The baseline step-size schemes (schedule, adagrad_norm, adam, sgd_momentum; normalized_lr in
tests/test_normalized_lr.py):
each against its formula computed by hand, the torch-backed ones against torch number for
number, and each through the real training loop."""

import math

import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget
from workbench.testbeds.optimisation.logreg import LogReg

S = torch.optim.lr_scheduler

# f(x) = 1/2 x^T A x - b^T x + c, positive everywhere (min f = c - 1/2 b^T A^-1 b ~ 1.857).
A = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
B = torch.tensor([1.0, -1.0], dtype=torch.float64)
C = 3.0
X0 = torch.tensor([1.0, 2.0], dtype=torch.float64)


def f(x):
    return 0.5 * x @ (A @ x) - B @ x + C


def grad(x):
    return A @ x - B


def problem():
    """A fresh iterate at X0 and a closure in the task's convention."""
    x = X0.clone().requires_grad_(True)

    def closure(backward=True):
        if not backward:
            with torch.no_grad():
                return f(x)
        x.grad = None
        loss = f(x)
        loss.backward()
        return loss.detach()

    return x, closure


def method(name, **params):
    return registry.get("step_size", name)(**params)


def run(optimizer, closure, x, steps):
    """Iterates and reported step sizes of ``steps`` optimizer steps."""
    iterates, sizes = [], []
    for _ in range(steps):
        optimizer.step(closure)
        iterates.append(x.detach().clone())
        sizes.append(optimizer.last_step_size)
    return iterates, sizes


def torch_trajectory(optimizer_cls, steps, scheduler=None, **kwargs):
    """Iterates of a plain torch optimizer (and scheduler) on the same problem."""
    y = X0.clone().requires_grad_(True)
    opt = optimizer_cls([y], **kwargs)
    sched = scheduler(opt) if scheduler else None
    iterates, lrs = [], []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.zero_grad()
        f(y).backward()
        opt.step()
        if sched:
            sched.step()
        iterates.append(y.detach().clone())
    return iterates, lrs


# ---- schedule -----------------------------------------------------------------------------


@pytest.mark.parametrize("params, expected", [
    ({"shape": "constant", "warmup_fraction": 0.3}, [1 / 3, 2 / 3, 1, 1, 1, 1, 1, 1, 1, 1]),
    ({"shape": "step_decay"}, [1, 1, 1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.001]),
    ({"shape": "step_decay", "warmup_fraction": 0.2, "decay_factor": 0.5,
      "decay_every_fraction": 0.2}, [0.5, 1, 1, 1, 0.5, 0.5, 0.25, 0.25, 0.125, 0.125]),
    ({"shape": "cosine", "warmup_fraction": 0.2, "final_fraction": 0.2},
     [0.5, 1] + [0.2 + 0.4 * (1 + math.cos(math.pi * t / 8)) for t in range(8)]),
    ({"shape": "wsd", "warmup_fraction": 0.2, "decay_fraction": 0.4},
     [0.5, 1, 1, 1, 1, 1, 1, 0.75, 0.5, 0.25]),
    ({"shape": "wsd", "decay_fraction": 0.4, "wsd_decay": "sqrt", "final_fraction": 0.5},
     [1] * 7 + [0.5 + 0.5 * (1 - math.sqrt(p)) for p in (0.25, 0.5, 0.75)]),
    ({"shape": "wsd", "decay_fraction": 0.4, "wsd_decay": "cosine"},
     [1] * 7 + [(1 + math.cos(math.pi * p)) / 2 for p in (0.25, 0.5, 0.75)]),
])
def test_schedule_multipliers_by_hand(params, expected):
    m = method("schedule", lr=2.0, **params)
    got = [m.multiplier(k, 10) for k in range(10)]
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert max(got) <= 1.0


def test_schedule_steps_are_sgd_with_the_scheduled_lr_by_hand():
    x, closure = problem()
    opt = method("schedule", lr=0.4, momentum=0.5, shape="cosine", warmup_fraction=0.25).build(
        [x], {"total_steps": 8})
    # warm-up W = 2: lr 0.2, 0.4; then cosine over D = 6 steps: 0.4, 0.4 * (1 + cos(pi/6)) / 2
    lrs = [0.2, 0.4, 0.4, 0.2 * (1 + math.cos(math.pi / 6))]
    xk, buf = X0.clone(), torch.zeros(2, dtype=torch.float64)
    for k, lr in enumerate(lrs):
        g = grad(xk)
        buf = g if k == 0 else 0.5 * buf + g
        xk = xk - lr * buf
        opt.step(closure)
        assert opt.last_step_size == pytest.approx(lr, rel=1e-15)
        assert torch.allclose(x.detach(), xk, rtol=1e-14, atol=1e-15)


def _warmup(w):
    return lambda opt: S.LinearLR(opt, start_factor=1 / w, end_factor=1.0, total_iters=w - 1)


def _then(w, *later, at=()):
    """Torch's warm-up for w steps, then ``later`` schedulers at milestones w, *at."""
    return lambda opt: S.SequentialLR(
        opt, [_warmup(w)(opt)] + [make(opt) for make in later], milestones=[w, *at])


# T = 40 steps, lr = 0.3, warm-up fraction 0.1 -> W = 4.
TORCH_SCHEDULES = [
    ({"shape": "constant", "warmup_fraction": 0.1}, _warmup(4)),
    ({"shape": "step_decay"}, lambda opt: S.StepLR(opt, step_size=12, gamma=0.1)),
    ({"shape": "step_decay", "warmup_fraction": 0.1, "decay_factor": 0.5,
      "decay_every_fraction": 0.25}, _then(4, lambda opt: S.StepLR(opt, 10, gamma=0.5))),
    ({"shape": "cosine"}, lambda opt: S.CosineAnnealingLR(opt, T_max=40)),
    ({"shape": "cosine", "warmup_fraction": 0.1, "final_fraction": 0.1},
     _then(4, lambda opt: S.CosineAnnealingLR(opt, T_max=36, eta_min=0.03))),
    ({"shape": "wsd", "warmup_fraction": 0.1, "decay_fraction": 0.25, "final_fraction": 0.1},
     _then(4, lambda opt: S.ConstantLR(opt, factor=1.0, total_iters=0),
           lambda opt: S.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=10),
           at=(30,))),
    ({"shape": "wsd", "warmup_fraction": 0.1, "decay_fraction": 0.25, "wsd_decay": "cosine"},
     _then(4, lambda opt: S.ConstantLR(opt, factor=1.0, total_iters=0),
           lambda opt: S.CosineAnnealingLR(opt, T_max=10, eta_min=0.0), at=(30,))),
]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("params, scheduler", TORCH_SCHEDULES)
def test_schedule_matches_torch_lr_scheduler_number_for_number(params, scheduler, momentum):
    x, closure = problem()
    opt = method("schedule", lr=0.3, momentum=momentum, **params).build(
        [x], {"total_steps": 40})
    ours, sizes = run(opt, closure, x, 40)
    theirs, lrs = torch_trajectory(torch.optim.SGD, 40, scheduler, lr=0.3, momentum=momentum)
    assert sizes == pytest.approx(lrs, rel=1e-12, abs=1e-15)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert len({round(s, 12) for s in sizes}) > 1 or params["shape"] == "constant"


def test_schedule_counter_survives_state_dict():
    x, closure = problem()
    m = method("schedule", lr=0.3, shape="cosine")
    opt = m.build([x], {"total_steps": 10})
    run(opt, closure, x, 4)
    fresh = m.build([x], {"total_steps": 10})
    fresh.load_state_dict(opt.state_dict())
    fresh.step(closure)
    assert fresh.last_step_size == pytest.approx(0.3 * m.multiplier(4, 10), rel=1e-15)


# ---- adagrad_norm -------------------------------------------------------------------------


def test_adagrad_norm_steps_by_hand():
    x, closure = problem()
    opt = method("adagrad_norm", eta=0.7, b0=0.5).build([x], {"total_steps": 3})
    xk, b_sq = X0.clone(), 0.25
    for _ in range(3):
        g = grad(xk)
        b_sq += float(g @ g)
        xk = xk - 0.7 / math.sqrt(b_sq) * g
        opt.step(closure)
        assert opt.last_step_size == pytest.approx(0.7 / math.sqrt(b_sq), rel=1e-14)
        assert torch.allclose(x.detach(), xk, rtol=1e-14, atol=1e-15)
    assert method("adagrad_norm", eta=0.7, b0=0.5).step_size_cap() == 0.7 / 0.5
    assert opt.last_step_size < 0.7 / 0.5


# ---- adam ---------------------------------------------------------------------------------


def adam_by_hand(steps, lr, beta1, beta2, eps, weight_decay):
    xk = X0.clone()
    m = v = torch.zeros(2, dtype=torch.float64)
    iterates = []
    for k in range(1, steps + 1):
        g = grad(xk) + weight_decay * xk
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, v_hat = m / (1 - beta1**k), v / (1 - beta2**k)
        xk = xk - lr * m_hat / (v_hat.sqrt() + eps)
        iterates.append(xk)
    return iterates


def test_adam_steps_by_hand():
    x, closure = problem()
    hp = {"lr": 0.05, "beta1": 0.8, "beta2": 0.95, "eps": 1e-3, "weight_decay": 0.1}
    ours, sizes = run(method("adam", **hp).build([x], {}), closure, x, 3)
    for a, b in zip(ours, adam_by_hand(3, **hp), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    assert sizes == [0.05] * 3


def test_adam_matches_torch_adam_number_for_number():
    x, closure = problem()
    ours, _ = run(method("adam", lr=0.05).build([x], {}), closure, x, 40)
    theirs, _ = torch_trajectory(torch.optim.Adam, 40, lr=0.05)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    assert not torch.equal(ours[-1], ours[-2])


# ---- sgd_momentum -------------------------------------------------------------------------


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_steps_by_hand(nesterov):
    x, closure = problem()
    opt = method("sgd_momentum", lr=0.1, nesterov=nesterov).build([x], {})
    xk, buf = X0.clone(), None
    for _ in range(3):
        g = grad(xk)
        buf = g if buf is None else 0.9 * buf + g
        xk = xk - 0.1 * (g + 0.9 * buf if nesterov else buf)
        opt.step(closure)
        assert torch.allclose(x.detach(), xk, rtol=1e-14, atol=1e-15)
        assert opt.last_step_size == 0.1


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_matches_torch_sgd_number_for_number(nesterov):
    x, closure = problem()
    ours, _ = run(method("sgd_momentum", lr=0.1, nesterov=nesterov).build([x], {}),
                  closure, x, 40)
    theirs, _ = torch_trajectory(torch.optim.SGD, 40, lr=0.1, momentum=0.9, nesterov=nesterov)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


def test_sgd_momentum_without_momentum_is_plain_sgd_even_with_nesterov():
    x, closure = problem()
    ours, _ = run(method("sgd_momentum", lr=0.1, momentum=0.0, nesterov=True).build([x], {}),
                  closure, x, 5)
    theirs, _ = torch_trajectory(torch.optim.SGD, 5, lr=0.1)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


# ---- the real loop ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["schedule", "adagrad_norm", "adam", "sgd_momentum"])
def test_each_baseline_runs_through_the_logreg_loop(name):
    logged = []
    out = LogReg().run(
        LogReg.Params(n_samples=64, dim=5),
        {"step_size": method(name), "batch_size": registry.get("batch_size", "constant")()},
        seed=0, device=torch.device("cpu"), budget=Budget(steps=20),
        log=lambda step, metrics: logged.append(metrics),
    )
    assert out["steps"] == 20 and math.isfinite(out["train/loss"])
    assert out["train/loss"] < logged[0]["train/loss"]
    sizes = [m["method/step_size"] for m in logged[1:]]
    assert all(math.isfinite(s) and s > 0 for s in sizes)
