"""Each step-size scheme against its formula, and `constant` against torch.optim.SGD."""

import math

import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget
from workbench.testbeds.optimisation.quadratic import QuadraticParams, make_problem


def quadratic_closure(dim=10, kappa=50.0, seed=0):
    a, b, f_star = make_problem(QuadraticParams(dim=dim, condition_number=kappa), seed)
    x = torch.ones(dim, dtype=torch.float64, requires_grad=True)
    calls = {"grad": 0, "loss": 0}

    def closure(backward=True):
        if not backward:
            calls["loss"] += 1
            with torch.no_grad():
                return 0.5 * x @ (a @ x) - b @ x
        calls["grad"] += 1
        x.grad = None
        loss = 0.5 * x @ (a @ x) - b @ x
        loss.backward()
        return loss.detach()

    return x, closure, f_star, calls


def test_constant_matches_torch_sgd_number_for_number():
    x, closure, _, _ = quadratic_closure()
    y = x.detach().clone().requires_grad_(True)
    ours = registry.get("step_size", "constant")(lr=0.3, momentum=0.9).build([x], {})
    reference = torch.optim.SGD([y], lr=0.3, momentum=0.9)
    a, b, _ = make_problem(QuadraticParams(dim=10, condition_number=50.0), 0)
    for _ in range(25):
        ours.step(closure)
        reference.zero_grad()
        (0.5 * y @ (a @ y) - b @ y).backward()
        reference.step()
        assert torch.equal(x.detach(), y.detach())
    assert ours.last_step_size == 0.3


def test_polyak_step_is_the_formula_with_exact_f_star():
    x, closure, f_star, _ = quadratic_closure()
    opt = registry.get("step_size", "polyak")(
        f_star="exact", c=1.0, gamma_max=math.inf, adapt="constant", eps=0.0,
    ).build([x], {"f_star": f_star})
    loss = closure()
    grad = x.grad.clone()
    expected = (float(loss) - f_star) / float(grad @ grad)
    x0 = x.detach().clone()
    opt.step(closure)
    assert opt.last_step_size == pytest.approx(expected, rel=1e-12)
    assert torch.allclose(x.detach(), x0 - expected * grad)


def test_polyak_respects_its_cap_and_converges():
    x, closure, f_star, _ = quadratic_closure(kappa=10.0)
    opt = registry.get("step_size", "polyak")(f_star="exact", c=1.0, gamma_max=0.5).build(
        [x], {"f_star": f_star})
    first = float(closure())
    for _ in range(300):
        opt.step(closure)
        assert 0 <= opt.last_step_size <= 0.5
    assert float(closure()) - f_star < 1e-3 * (first - f_star)


def test_polyak_estimate_tracks_best_loss_minus_delta():
    x, closure, _, _ = quadratic_closure()
    opt = registry.get("step_size", "polyak")(f_star="estimate", delta=0.5, c=1.0).build([x], {})
    closure()  # first step: f_best is the current loss, so the gap is exactly delta
    grad_sq = float(x.grad @ x.grad)
    opt.step(closure)
    assert opt.last_step_size == pytest.approx(min(0.5 / grad_sq, 10.0))


def test_armijo_accepts_only_steps_that_satisfy_the_condition():
    x, closure, _, calls = quadratic_closure()
    opt = registry.get("step_size", "armijo")(c=0.1, beta=0.5, eta_max=10.0).build(
        [x], {"batches_per_epoch": 1})
    for _ in range(30):
        x0 = x.detach().clone()
        f0 = float(closure())
        grad = x.grad.clone()
        opt.step(closure)
        eta = opt.last_step_size
        assert torch.allclose(x.detach(), x0 - eta * grad)
        f1 = float(closure(backward=False))
        assert f1 <= f0 - 0.1 * eta * float(grad @ grad) + 1e-9
        assert eta <= 10.0
    assert calls["loss"] > 30  # trial points were evaluated without gradients


def test_armijo_state_survives_state_dict():
    x, closure, _, _ = quadratic_closure()
    opt = registry.get("step_size", "armijo")().build([x], {"batches_per_epoch": 1})
    for _ in range(5):
        opt.step(closure)
    state = opt.state_dict()
    fresh = registry.get("step_size", "armijo")().build([x], {"batches_per_epoch": 1})
    fresh.load_state_dict(state)
    assert fresh.param_groups[0]["eta"] == opt.param_groups[0]["eta"]


def test_every_method_runs_on_every_task_it_fits():
    """Every step-size method on every optimisation testbed it fits, on CartPole's
    policy-gradient loop (PPO, the other slots at the task's defaults), on DQN's TD
    updates and along ARS's direction (lqr-ars)."""
    from workbench.testbeds import TASKS

    small_rl = {"cartpole": ({"num_envs": 4, "rollout_len": 16}, "train/value_loss"),
                "dqn-cartpole": ({"learning_starts": 32, "train_frequency": 1,
                                  "batch_size": 16, "hidden": [16]}, "train/td_loss"),
                "lqr-ars": ({"horizon": 20}, "train/relative_cost_gap")}
    for task_cls in TASKS.values():
        rl = task_cls.name in small_rl
        if "train/loss" not in task_cls.metrics and not rl:
            continue
        params, loss = small_rl.get(task_cls.name, ({}, "train/loss"))
        for name in registry.available("step_size"):
            cls = registry.get("step_size", name)
            method = cls()
            needs = cls.requirements(method.params)
            if not needs <= task_cls.provides:
                continue
            if not task_cls.slot_requires.get("step_size", frozenset()) <= needs:
                continue
            methods = {slot: registry.get(slot, default)()
                       for slot, default in task_cls.default_methods.items()}
            methods["step_size"] = method
            out = task_cls().run(task_cls.Params(**params), methods, seed=0,
                                 device=torch.device("cpu"), budget=Budget(steps=5),
                                 log=lambda step, metrics: None)
            assert out["steps"] == 5 and math.isfinite(out[loss]), (task_cls.name, name)
