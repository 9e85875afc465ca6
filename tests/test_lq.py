"""The linear-quadratic testbed (``lqr-ars``): the Riccati references and the exact costs on a
scalar system worked by hand, ARS's direction on fixed directions, the oscillator's output,
sampled rollouts against the exact cost, a learning run, and the command line."""

import json
import math

import numpy as np
import pytest
import torch

from tests.conftest import run_cli
from workbench import registry
from workbench.testbeds import TASKS, Budget
from workbench.testbeds.lq.ars import ars_direction, as_policies, oscillator_signal
from workbench.testbeds.lq.system import (
    LQSystem,
    dean,
    expected_cost,
    finite_horizon_optimum,
    rollout_costs,
    stationary_cost,
    stationary_optimum,
)

TASK = TASKS["lqr-ars"]
GOLDEN = (1 + math.sqrt(5)) / 2


def scalar(a=1.0, b=1.0, q=1.0, r=1.0, noise_std=1.0, x0_mean=0.0, x0_std=1.0) -> LQSystem:
    return LQSystem(np.array([[a]]), np.array([[b]]), np.array([[q]]), np.array([[r]]),
                    noise_std, np.array([x0_mean]), x0_std)


def test_the_riccati_optimum_of_a_scalar_system():
    # a = b = q = r = 1: the DARE p = 1 + p - p^2 / (1 + p) gives p^2 - p - 1 = 0, p = golden
    # ratio; J* = p w = p (w = 1); K* = -p / (1 + p) = -(golden - 1) = -0.618...
    j_star, k_star = stationary_optimum(scalar())
    assert j_star == pytest.approx(GOLDEN, rel=1e-10)
    assert k_star[0, 0] == pytest.approx(-GOLDEN / (1 + GOLDEN), rel=1e-10)
    # and the Lyapunov cost of K* is J* itself
    assert stationary_cost(scalar(), k_star) == pytest.approx(GOLDEN, rel=1e-9)


def test_the_stationary_cost_of_a_scalar_gain():
    # k = -0.5: closed loop c = 0.5, P = (q + k^2 r) / (1 - c^2) = 1.25 / 0.75 = 5/3, J = P w
    assert stationary_cost(scalar(), np.array([[-0.5]])) == pytest.approx(5 / 3, rel=1e-10)
    assert stationary_cost(scalar(), np.array([[0.5]])) == math.inf  # c = 1.5: unstable


def test_the_finite_horizon_optimum_and_exact_costs_by_hand():
    # H = 2, P_2 = 0: P_1 = q = 1, P_0 = q + a^2 P_1 - (a P_1 b)^2 / (r + b^2 P_1) = 1.5;
    # total = tr(P_0 Sigma_0) + tr(P_1 W) + tr(P_2 W) = 1.5 + 1 + 0 = 2.5, per step 1.25
    assert finite_horizon_optimum(scalar(), 2) == pytest.approx(1.25, rel=1e-12)
    # with x_0 = 2 surely: + mu_0 P_0 mu_0 = 6, and Sigma_0 = 0: (6 + 1) / 2
    assert finite_horizon_optimum(scalar(x0_mean=2.0, x0_std=0.0), 2) == pytest.approx(3.5)
    # u = -0.5 x for H = 2: t=0 var 1, cost (1 + 0.25) 1 = 1.25; t=1 var 0.25 + 1 = 1.25,
    # cost 1.25 x 1.25 = 1.5625; mean 1.40625 (>= the optimum 1.25, whose t=1 gain is 0)
    assert expected_cost(scalar(), 2, np.array([[-0.5]])) == pytest.approx(1.40625, rel=1e-12)
    # open loop from x_0 = 1 surely, no noise, v = (-1, 0): t=0 x=1, u=-1: cost 2; x_1 = 0,
    # cost 0; mean 1
    deterministic = scalar(noise_std=0.0, x0_mean=1.0, x0_std=0.0)
    assert expected_cost(deterministic, 2, None, np.array([[-1.0], [0.0]])) == pytest.approx(1.0)


def test_sampled_rollouts_agree_with_the_exact_cost():
    system, horizon = dean(x0_mean=0.5), 20
    _, k_star = stationary_optimum(system)
    gains = torch.as_tensor(k_star).expand(4000, 3, 3)
    signals = torch.zeros(4000, horizon, 3, dtype=torch.float64)
    sampled = rollout_costs(system, horizon, gains, signals, torch.Generator().manual_seed(0))
    exact = expected_cost(system, horizon, k_star)
    assert float(sampled.mean()) == pytest.approx(exact, rel=0.03)
    # without noise (x_0 fixed) one rollout is the exact cost
    quiet = dean(noise_std=0.0, x0_mean=1.0, x0_std=0.0)
    one = rollout_costs(quiet, horizon, gains[:1], signals[:1], torch.Generator())
    assert float(one[0]) == pytest.approx(expected_cost(quiet, horizon, k_star), rel=1e-12)


def test_ars_direction_on_fixed_directions():
    deltas = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    plus = torch.tensor([3.0, 1.0, 0.0], dtype=torch.float64)
    minus = torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64)
    # V1 (b = N = 3): differences (2, -1, 0), sum 2 (1,0) - (0,1) = (2, -1); the six returns
    # 3,1,0,1,2,0: mean 7/6, mean square 15/6, variance 15/6 - 49/36 = 41/36, sigma = sqrt(41)/6
    g, sigma = ars_direction(deltas, plus, minus)
    assert sigma == pytest.approx(math.sqrt(41) / 6, rel=1e-12)
    assert g.tolist() == pytest.approx([2 / (3 * sigma), -1 / (3 * sigma)], rel=1e-12)
    # basic random search (no sigma_R): (2, -1) / 3
    g, sigma = ars_direction(deltas, plus, minus, normalise=False)
    assert sigma == 1.0 and g.tolist() == pytest.approx([2 / 3, -1 / 3], rel=1e-12)
    # V1-t, b = 2: max(r+, r-) = 3, 2, 0 keeps directions 0 and 1; returns 3,1,1,2: mean 7/4,
    # variance 15/4 - 49/16 = 11/16, sigma = sqrt(11)/4; g = (2, -1) / (2 sigma)
    g, sigma = ars_direction(deltas, plus, minus, top_b=2)
    assert sigma == pytest.approx(math.sqrt(11) / 4, rel=1e-12)
    assert g.tolist() == pytest.approx([1 / sigma, -0.5 / sigma], rel=1e-12)
    # b = 1: direction 0 alone, returns 3 and 1: sigma 1, g = 2 (1, 0)
    g, sigma = ars_direction(deltas, plus, minus, top_b=1)
    assert sigma == pytest.approx(1.0) and g.tolist() == pytest.approx([2.0, 0.0])


def test_one_ars_update_with_the_constant_step_size_is_the_papers():
    """theta_1 = theta_0 + alpha g, g from the rollouts of theta_0 +- nu delta (the constant
    method handed -g as the gradient): checked by replaying the run's draws."""
    from workbench.common import seeds

    params = TASK.Params(horizon=5, directions=3, nu=0.1, noise_std=0.0, x0_mean=1.0,
                         x0_std=0.0)
    logged = []
    TASK().run(params, {"step_size": registry.get("step_size", "constant")(lr=0.05),
                        "batch_size": registry.get("batch_size", "constant")()},
               seed=3, device=torch.device("cpu"), budget=Budget(steps=1),
               log=lambda step, metrics: logged.append(dict(metrics)))
    system = dean(noise_std=0.0, x0_mean=1.0, x0_std=0.0)
    deltas = torch.randn(3, 9, generator=seeds.torch_generator(3, "actions"),
                         dtype=torch.float64)
    thetas = torch.cat([0.1 * deltas, -0.1 * deltas])
    gains = thetas.reshape(6, 3, 3)
    # no noise: each rollout's cost is the exact one
    returns = torch.tensor([-5 * expected_cost(system, 5, k.numpy()) for k in gains],
                           dtype=torch.float64)
    g, _ = ars_direction(deltas, returns[:3], returns[3:])
    theta_1 = (0.05 * g).reshape(3, 3).numpy()
    assert logged[1]["train/expected_cost"] == pytest.approx(
        expected_cost(system, 5, theta_1), rel=1e-10)
    assert logged[1]["train/grad_norm"] == pytest.approx(float(g.norm()), rel=1e-10)
    assert logged[1]["method/step_size"] == 0.05


def test_the_oscillator_output_by_hand():
    # m = 2: a = (1, 2), phi = (0, pi/2), b = (0.5, -1), omega = pi/2
    theta = torch.tensor([[1.0, 2.0, 0.0, math.pi / 2, 0.5, -1.0, math.pi / 2]],
                         dtype=torch.float64)
    u = oscillator_signal(theta, 2, 3)[0]
    # t=0: sin 0 + 0.5 = 0.5, 2 sin(pi/2) - 1 = 1; t=1: sin(pi/2) + 0.5 = 1.5,
    # 2 sin(pi) - 1 = -1; t=2: sin(pi) + 0.5 = 0.5, 2 sin(3pi/2) - 1 = -3
    assert u.reshape(-1).tolist() == pytest.approx([0.5, 1.0, 1.5, -1.0, 0.5, -3.0], abs=1e-12)
    gains, signals = as_policies("oscillator", theta, 3, 2, 3)
    assert gains.abs().sum() == 0 and torch.equal(signals[0], u)


def ars(params, *, steps, seed, method="constant", **hyperparameters):
    logged = []
    out = TASK().run(TASK.Params(**params),
                     {"step_size": registry.get("step_size", method)(**hyperparameters),
                      "batch_size": registry.get("batch_size", "constant")()},
                     seed=seed, device=torch.device("cpu"), budget=Budget(steps=steps),
                     log=lambda step, metrics: logged.append(dict(metrics)))
    return out, logged


def test_ars_reaches_a_near_riccati_linear_policy():
    """Measured (README: lq): 300 updates of V1 (N = 16, nu = 0.005, a cosine schedule from
    alpha 0.01, H = 300) end at gaps of 0.0066, 0.019, 0.015 to the Riccati controller on
    seeds 0-2, from 1.8e4 at K = 0. Bound with a wide margin: under 0.1."""
    out, logged = ars({"directions": 16, "nu": 0.005}, steps=300, seed=0, method="schedule",
                      lr=0.01, shape="cosine")
    assert logged[0]["train/relative_cost_gap"] > 1e4  # K = 0: the unstable open loop
    assert not out["diverged"] and out["train/relative_cost_gap"] < 0.1
    assert out["train/stationary_cost_gap"] < 0.1
    assert out["cost/env_steps"] == 300 * 16 * 2 * 300


def test_the_open_loop_oscillator_stays_near_its_start():
    """Measured (README: lq): alpha 0.02, N = 8, nu = 0.03, 300 updates: gaps 1.85e4-1.93e4 on
    seeds 0-2 (1.84e4 at the start; with a zero-mean x_0, u = 0 is the best open-loop input).
    Bound: above 1,000 after 100 updates, with no stationary gap logged."""
    out, _ = ars({"policy": "oscillator", "nu": 0.03}, steps=100, seed=0, lr=0.02)
    assert not out["diverged"] and out["train/relative_cost_gap"] > 1000
    assert "train/stationary_cost_gap" not in out


def test_workbench_run_lqr_ars(tmp_path):
    out = run_cli("run", "lqr-ars", "horizon=20", "directions=4", "top_b=2", "step_size=schedule",
                  "step_size.lr=0.01", "--steps", "5", "--json", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["steps"] == 5 and result["env_steps"] == 5 * 4 * 2 * 20
    assert math.isfinite(result["train/relative_cost_gap"]) and result["batch/size"] == 4
    assert list(tmp_path.iterdir()) == []


def test_the_batch_size_slot_sets_the_directions_of_each_update():
    # a geometric ramp 2, 4, 8 (doubling every update, in updates): 2 N H environment steps each
    ramp = registry.get("batch_size", "geometric_ramp")(start_size=2, factor=2.0,
                                                        trigger="steps", every_steps=1)
    logged = []
    out = TASK().run(TASK.Params(horizon=10), {
        "step_size": registry.get("step_size", "constant")(lr=0.01), "batch_size": ramp},
        seed=0, device=torch.device("cpu"), budget=Budget(steps=3),
        log=lambda step, metrics: logged.append(dict(metrics)))
    assert [m["batch/size"] for m in logged[1:]] == [2.0, 4.0, 8.0]
    assert out["env_steps"] == (2 + 4 + 8) * 2 * 10
    # a budget in environment steps stops the run once they are spent
    out = TASK().run(TASK.Params(horizon=10, directions=4), {
        "step_size": registry.get("step_size", "constant")(lr=0.01),
        "batch_size": registry.get("batch_size", "constant")()},
        seed=0, device=torch.device("cpu"), budget=Budget(samples=200), log=lambda *a: None)
    assert (out["steps"], out["env_steps"]) == (3, 240)
