"""Frank-Wolfe step sizes: feasibility, the FW gap, Jaggi's rate, and copt's trajectories."""

import math

import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget
from workbench.testbeds.optimisation.simplex import Simplex, SimplexParams, make_problem

CPU = torch.device("cpu")
SMALL = {"dim": 20, "n_samples": 100}


def method(name, **params):
    return registry.get("step_size", name)(**params)


def run(params, step_size, steps=100, seed=0):
    history = []
    Simplex().run(params, {"step_size": step_size}, seed=seed, device=CPU,
                  budget=Budget(steps=steps),
                  log=lambda step, metrics: history.append(dict(metrics)))
    return history


def closure_on(objective, x):
    """A task-like closure over one leaf tensor x; counts nothing."""

    def closure(backward=True):
        if not backward:
            with torch.no_grad():
                return objective.value(x)
        x.grad = None
        loss = objective.value(x)
        loss.backward()
        return loss.detach()

    return closure


@pytest.mark.parametrize("problem", ["portfolio", "l1_least_squares"])
@pytest.mark.parametrize("config", [("fw_open_loop", {}), ("fw_short_step", {}),
                                    ("fw_short_step", {"l_estimate": "backtracking"})])
def test_iterates_stay_feasible_and_the_gap_goes_down(problem, config):
    history = run(SimplexParams(problem=problem, **SMALL), method(config[0], **config[1]))
    assert max(m["train/infeasibility"] for m in history) <= 1e-12
    gaps = [m["train/fw_gap"] for m in history]
    assert min(gaps) >= -1e-12
    assert max(gaps[-10:]) < gaps[0] / 10
    assert all(0.0 <= m["method/step_size"] <= 1.0 for m in history[1:])


def test_open_loop_meets_jaggis_rate_on_l1_least_squares():
    params = SimplexParams(problem="l1_least_squares", radius=2.0, **SMALL)
    _, smoothness = make_problem(params, 0)
    diameter = 2 * params.radius
    history = run(params, method("fw_open_loop"), steps=200)
    for t, metrics in enumerate(history[1:], start=1):
        assert metrics["train/suboptimality"] <= 2 * smoothness * diameter**2 / (t + 2), t
    assert history[-1]["train/suboptimality"] < history[1]["train/suboptimality"] / 10


@pytest.mark.parametrize("shape", [{"radius": 100.0}, {"radius": 1.0, "condition_number": 1.0}])
def test_short_step_is_at_least_as_good_as_open_loop_on_the_quadratic(shape):
    """Optimum inside the ball (short step converges linearly, Guelat & Marcotte 1986), or
    an isotropic quadratic (the short step is the exact line search). With the optimum on a
    face of an ill-conditioned problem the open-loop step can win (Wirth et al. 2023)."""
    params = SimplexParams(problem="l1_least_squares", **shape, **SMALL)
    for seed in range(3):
        short = run(params, method("fw_short_step"), seed=seed)[-1]["train/suboptimality"]
        open_loop = run(params, method("fw_open_loop"), seed=seed)[-1]["train/suboptimality"]
        assert short <= open_loop, seed


def test_open_loop_step_sizes_are_ell_over_t_plus_ell():
    objective, _ = make_problem(SimplexParams(**SMALL), 0)
    for ell in (2, 5):
        x = torch.full((20,), 1 / 20, dtype=torch.float64, requires_grad=True)
        opt = method("fw_open_loop", ell=ell).build([x], {"lmo": lambda g: [objective.lmo(g[0])]})
        closure = closure_on(objective, x)
        for t in range(6):
            opt.step(closure)
            assert opt.last_step_size == pytest.approx(ell / (t + ell), rel=1e-15)


def test_short_step_is_the_demyanov_rubinov_formula():
    objective, smoothness = make_problem(SimplexParams(problem="l1_least_squares", **SMALL), 0)
    x = torch.zeros(20, dtype=torch.float64, requires_grad=True)
    lmo = {"lmo": lambda g: [objective.lmo(g[0])], "smoothness": smoothness}
    opt = method("fw_short_step").build([x], lmo)
    closure = closure_on(objective, x)
    for _ in range(5):
        x0 = x.detach().clone()
        g = objective.grad(x0)
        d = objective.lmo(g) - x0
        expected = min(float(-g @ d) / (smoothness * float(d @ d)), 1.0)
        opt.step(closure)
        assert opt.last_step_size == pytest.approx(expected, rel=1e-10)
        assert torch.allclose(x.detach(), x0 + expected * d, rtol=0, atol=1e-14)


def test_backtracking_meets_its_sufficient_decrease_condition():
    objective, _ = make_problem(SimplexParams(**SMALL), 1)
    x = torch.full((20,), 1 / 20, dtype=torch.float64, requires_grad=True)
    fw = method("fw_short_step", l_estimate="backtracking")
    opt = fw.build([x], {"lmo": lambda g: [objective.lmo(g[0])]})
    closure = closure_on(objective, x)
    for _ in range(30):
        x0 = x.detach().clone()
        f0, g = float(objective.value(x0)), objective.grad(x0)
        d = objective.lmo(g) - x0
        opt.step(closure)
        gamma, estimate = opt.last_step_size, opt.param_groups[0]["smoothness"]
        bound = -gamma * float(-g @ d) + 0.5 * gamma**2 * estimate * float(d @ d)
        assert float(objective.value(x.detach())) - f0 <= bound + fw.hp.slack + 1e-15


def test_state_survives_state_dict():
    objective, _ = make_problem(SimplexParams(**SMALL), 0)
    x = torch.full((20,), 1 / 20, dtype=torch.float64, requires_grad=True)
    info = {"lmo": lambda g: [objective.lmo(g[0])]}
    opt = method("fw_short_step", l_estimate="backtracking").build([x], info)
    closure = closure_on(objective, x)
    for _ in range(4):
        opt.step(closure)
    fresh = method("fw_short_step", l_estimate="backtracking").build([x], info)
    fresh.load_state_dict(opt.state_dict())
    for key in ("t", "smoothness", "previous_loss"):
        assert fresh.param_groups[0][key] == opt.param_groups[0][key]
    assert fresh.param_groups[0]["t"] == 4


def test_requirements_follow_the_l_estimate():
    short = registry.get("step_size", "fw_short_step")
    assert short.requirements(short.resolve({})) == {"lmo", "smoothness"}
    assert short.requirements(short.resolve({"l_estimate": "backtracking"})) == {"lmo",
                                                                                   "closure"}
    assert registry.get("step_size", "fw_open_loop").requires == {"lmo"}


# --- copt's minimize_frank_wolfe, re-derived (openopt/copt, copt/frank_wolfe.py) -----------

def copt_trajectory(objective, x0, step, lipschitz=None, iterations=30):
    """copt's vanilla FW loop: d = s - x, certificate = <d, -grad>; "sublinear": 2/(k+2);
    "DR": min(cert / (||d||^2 L), 1); "backtracking": L from a 1e-3 gradient difference at
    the first iteration, then max(min(cert^2 / (2 (f_prev - f) ||d||^2), L), 0.9 L), doubled
    until f(x + g d) - f(x) <= rhs + float32 eps (rhs = -g cert / 2 below the cap of 1, else
    -cert + L ||d||^2 / 2)."""
    eps32 = float(torch.finfo(torch.float32).eps)

    def f_grad(z):
        z = z.clone().requires_grad_(True)
        value = objective.value(z)
        value.backward()
        return float(value.detach()), z.grad

    x = x0.clone()
    f_t, grad = f_grad(x)
    old_f, estimate, path = None, lipschitz, []
    for it in range(iterations):
        d = objective.lmo(grad) - x
        norm_d = float(d @ d)
        cert = float(d @ -grad)
        if estimate is None:
            probe = f_grad(x + 1e-3 * d)[1]
            estimate = float(torch.linalg.norm(grad - probe)) / (1e-3 * math.sqrt(norm_d))
        if cert <= 1e-12:
            break
        if step == "sublinear":
            gamma = 2.0 / (it + 2)
        elif step == "DR":
            gamma = min(cert / (norm_d * estimate), 1.0)
        else:
            if old_f is not None:
                # copt's values are NumPy floats: x / 0.0 is inf there (the step made no
                # decrease), so the estimate stays
                decrease = old_f - f_t
                guess = cert**2 / (2 * decrease * norm_d) if decrease != 0 else math.inf
                estimate = max(min(guess, estimate), estimate * 0.9)
            for _ in range(100):
                gamma = cert / (norm_d * estimate)
                if gamma < 1:
                    rhs = -0.5 * gamma * cert
                else:
                    gamma = 1.0
                    rhs = -gamma * cert + 0.5 * gamma**2 * estimate * norm_d
                if f_grad(x + gamma * d)[0] - f_t <= rhs + eps32:
                    break
                estimate *= 2.0
        x = x + gamma * d
        old_f = f_t
        f_t, grad = f_grad(x)
        path.append(x.clone())
    return path


@pytest.mark.parametrize("problem", ["portfolio", "l1_least_squares"])
@pytest.mark.parametrize("step", ["sublinear", "DR", "backtracking"])
def test_trajectory_matches_copt(problem, step):
    params = SimplexParams(problem=problem, dim=10, n_samples=50)
    # a data seed whose six trajectories all run 30 steps (most seeds' instances put the
    # optimum at a vertex, which FW reaches in a few steps)
    objective, smoothness = make_problem(params, 4)
    x0 = torch.zeros(10, dtype=torch.float64)
    x0[0] = 1.0
    expected = copt_trajectory(objective, x0, step, smoothness if step == "DR" else None)
    assert len(expected) == 30
    fw = {"sublinear": method("fw_open_loop"), "DR": method("fw_short_step"),
          "backtracking": method("fw_short_step", l_estimate="backtracking")}[step]
    x = x0.clone().requires_grad_(True)
    opt = fw.build([x], {"lmo": lambda g: [objective.lmo(g[0])], "smoothness": smoothness})
    closure = closure_on(objective, x)
    for want in expected:
        opt.step(closure)
        assert torch.allclose(x.detach(), want, rtol=0, atol=1e-10)
