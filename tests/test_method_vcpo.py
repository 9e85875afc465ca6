"""VCPO (methods/advantage/vcpo_baseline.py, methods/step_size/vcpo_lr.py) and the sequence
importance weights they share (workbench/families/importance.py): cases worked by hand, the
on-policy reductions, the family contracts and a run through ``workbench run`` with a lag."""

from __future__ import annotations

import math

import pytest
import torch

from workbench import registry
from workbench.families.importance import normalised_ess, sequence_log_weights

HALF = math.log(0.5)


def baseline(**params):
    return registry.get("advantage", "vcpo_baseline")(**params)


def rows(rewards, ratios, dones=None):
    """Inputs for rows of steps: behaviour log-probs log 0.5, the learner's times ``ratios``."""
    rewards = torch.tensor(rewards, dtype=torch.float64)
    old = torch.full_like(rewards, HALF)
    return {"rewards": rewards,
            "dones": (torch.zeros_like(rewards, dtype=torch.bool) if dones is None
                      else torch.tensor(dones)),
            "old_log_probs": old,
            "target_log_probs": old + torch.log(torch.tensor(ratios, dtype=torch.float64))}


def test_two_episodes_in_one_row_by_hand():
    # steps 0-1 are episode 0 (done at step 1), steps 2-3 episode 1 (cut by the rollout end).
    # R = (1 + 2, 3 + 1) = (3, 4); w = (2 * 1, 0.5 * 1) = (2, 0.5), w^2 = (4, 0.25).
    # b = (4 * 3 + 0.25 * 4) / 4.25 = 13 / 4.25 = 52/17.
    # weight: A = (2 (3 - 52/17), 0.5 (4 - 52/17)) = (-2/17, 8/17); none: (-1/17, 16/17).
    inputs = rows([[1.0, 2.0, 3.0, 1.0]], [[2.0, 1.0, 0.5, 1.0]],
                  dones=[[False, True, False, False]])
    adv, ret = baseline().compute(**inputs)
    want = torch.tensor([[-2 / 17, -2 / 17, 8 / 17, 8 / 17]], dtype=torch.float64)
    assert torch.allclose(adv, want, atol=1e-12) and torch.equal(adv, ret)
    adv, _ = baseline(correction="none").compute(**inputs)
    want = torch.tensor([[-1 / 17, -1 / 17, 16 / 17, 16 / 17]], dtype=torch.float64)
    assert torch.allclose(adv, want, atol=1e-12)


def test_groups_by_hand():
    # four rows, one sequence each: R = (1, 2, 3, 5), w = (1, 1, 3, 1), groups (0, 1, 0, 1).
    # group 0 (rows 0, 2): b = (1 * 1 + 9 * 3) / 10 = 2.8, A = (1 (1 - 2.8), 3 (3 - 2.8))
    # = (-1.8, 0.6); group 1 (rows 1, 3): w = 1, b = 3.5, A = (-1.5, 1.5).
    inputs = rows([[1.0, 0.0], [2.0, 0.0], [1.0, 2.0], [5.0, 0.0]],
                  [[1.0, 1.0], [1.0, 1.0], [3.0, 1.0], [2.0, 0.5]])
    inputs["group_ids"] = torch.tensor([0, 1, 0, 1])
    adv, _ = baseline(scope="group").compute(**inputs)
    want = torch.tensor([-1.8, -1.5, 0.6, 1.5], dtype=torch.float64)
    assert torch.allclose(adv, want[:, None].expand(4, 2), atol=1e-12)
    # over the batch instead: w^2 = (1, 1, 9, 1), b = (1 + 2 + 27 + 5) / 12 = 35/12
    adv, _ = baseline().compute(**inputs)
    w = torch.tensor([1.0, 1.0, 3.0, 1.0], dtype=torch.float64)
    r = torch.tensor([1.0, 2.0, 3.0, 5.0], dtype=torch.float64)
    assert torch.allclose(adv[:, 0], w * (r - 35 / 12), atol=1e-12)


def test_the_log_weight_clip():
    # w = (4, 1), R = (1, 0); clipped to |log w| <= log 2: w = (2, 1), b = 4 / 5 = 0.8,
    # A = (2 * 0.2, 1 * (0 - 0.8)) = (0.4, -0.8)
    inputs = rows([[1.0], [0.0]], [[4.0], [1.0]])
    adv, _ = baseline(log_weight_clip=math.log(2.0)).compute(**inputs)
    assert torch.allclose(adv[:, 0], torch.tensor([0.4, -0.8], dtype=torch.float64))
    # unclipped: b = 16 / 17, A = (4 / 17, -16 / 17)
    adv, _ = baseline().compute(**inputs)
    assert torch.allclose(adv[:, 0], torch.tensor([4 / 17, -16 / 17], dtype=torch.float64))


def test_huge_weights_stay_finite():
    inputs = rows([[1.0], [3.0]], [[1.0], [1.0]])
    inputs["target_log_probs"] = inputs["old_log_probs"] + torch.tensor([[400.0], [0.0]],
                                                                         dtype=torch.float64)
    adv, _ = baseline(log_weight_clip=400.0, correction="none").compute(**inputs)
    assert torch.isfinite(adv).all()
    assert torch.allclose(adv[:, 0], torch.tensor([0.0, 2.0], dtype=torch.float64))


def test_on_policy_it_is_the_mean_baseline():
    gen = torch.Generator().manual_seed(3)
    rewards = torch.randn(5, 9, generator=gen, dtype=torch.float64)
    dones = torch.rand(5, 9, generator=gen) < 0.3
    old = -torch.rand(5, 9, generator=gen, dtype=torch.float64)
    adv, _ = baseline().compute(rewards=rewards, dones=dones, old_log_probs=old,
                                target_log_probs=old.clone())
    # each episode segment's return minus the mean over all segments, at each of its steps
    segments = []
    for row in range(5):
        start = 0
        for t in range(9):
            if dones[row, t] or t == 8:
                segments.append((row, start, t + 1))
                start = t + 1
    returns = [float(rewards[r, a:b].sum()) for r, a, b in segments]
    mean = sum(returns) / len(returns)
    want = torch.zeros_like(rewards)
    for (r, a, b), ret in zip(segments, returns, strict=True):
        want[r, a:b] = ret - mean
    assert torch.allclose(adv, want, atol=1e-12)


def test_sequence_weights_and_the_ess_by_hand():
    inputs = rows([[0.0] * 4], [[2.0, 1.0, 0.5, 1.0]], dones=[[False, True, False, False]])
    log_w, ids = sequence_log_weights(inputs["old_log_probs"], inputs["target_log_probs"],
                                      inputs["dones"])
    assert ids.tolist() == [[0, 0, 1, 1]]
    assert torch.allclose(log_w, torch.tensor([math.log(2.0), math.log(0.5)],
                                              dtype=torch.float64))
    # w = (2, 0.5): (sum w)^2 / (N sum w^2) = 6.25 / (2 * 4.25) = 0.73529...
    assert normalised_ess(log_w) == pytest.approx(6.25 / 8.5, rel=1e-12)
    assert normalised_ess(torch.zeros(7)) == 1.0
    # one weight dominating: ESS_hat -> 1/N
    assert normalised_ess(torch.tensor([300.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)


def test_meets_the_advantage_contract():
    from workbench.families import check

    assert check(registry.get("advantage", "vcpo_baseline")) == []


@pytest.mark.parametrize("g", ["identity", "sqrt"])
def test_vcpo_lr_is_adam_at_the_ess_scaled_rate(g):
    ess_sequence = [1.0, 0.5, 0.04, float("nan"), 0.25, 1.0 + 1e-15]
    # g(ESS): identity (1, 0.5, 0.04, 1, 0.25, 1); sqrt (1, 0.7071, 0.2, 1, 0.5, 1)
    scales = {"identity": [1.0, 0.5, 0.04, 1.0, 0.25, 1.0],
              "sqrt": [1.0, math.sqrt(0.5), 0.2, 1.0, 0.5, 1.0]}[g]
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(4, generator=gen, dtype=torch.float64)
    target = torch.randn(4, generator=gen, dtype=torch.float64)
    x = start.clone().requires_grad_(True)
    y = start.clone().requires_grad_(True)
    step = [0]
    method = registry.get("step_size", "vcpo_lr")(lr=0.1, g=g)
    optimizer = method.build([x], {"importance_ess": lambda: ess_sequence[step[0]]})
    reference = torch.optim.Adam([y], lr=0.1)
    for k in range(len(ess_sequence)):
        step[0] = k
        for p, opt in ((x, optimizer), (y, reference)):
            def closure(p=p, opt=opt):
                opt.zero_grad()
                loss = ((p - target) ** 2).sum()
                loss.backward()
                return loss
            if opt is reference:
                for group in reference.param_groups:
                    group["lr"] = 0.1 * scales[k]
            opt.step(closure)
        assert optimizer.last_step_size == pytest.approx(0.1 * scales[k], rel=1e-12)
        assert torch.allclose(x, y, rtol=0, atol=1e-14)
    assert method.step_size_cap() == 0.1


def test_vcpo_lr_meets_the_step_size_contract():
    from workbench.families import check

    assert check(registry.get("step_size", "vcpo_lr")) == []


def _run(methods, **params):
    from tests.test_control_loop import run_task
    from workbench.testbeds import Budget

    chosen = {family: registry.get(family, name)(**hp) for family, (name, hp) in methods.items()}
    return run_task("cartpole", Budget(steps=4), methods=chosen, num_envs=4, rollout_len=16,
                    **params)


def test_the_control_loop_measures_the_ess_and_vcpo_lr_follows_it(monkeypatch):
    from workbench.testbeds.control import loop

    seen = []
    original = loop.rollout_ess
    monkeypatch.setattr(loop, "rollout_ess", lambda r: seen.append(original(r)) or seen[-1])
    result, logged = _run({"step_size": ("vcpo_lr", {"lr": 0.01}),
                           "advantage": ("vcpo_baseline", {})}, policy_lag=2)
    assert result["steps"] == 4 and not result["diverged"]
    ess = [m["train/ess"] for _, m in logged]
    assert ess == seen and all(0.0 < e <= 1.0 for e in ess)
    # update 1 acts with the learner itself (float32 evaluations of the same network on
    # differently shaped batches: equal to rounding); from update 2 the learner has moved
    assert ess[0] == pytest.approx(1.0, abs=1e-5) and min(ess[1:]) < 1.0 - 1e-4
    # PPO's steps within an update all use that rollout's ESS: the mean step is lr * ESS_hat
    for e, (_, m) in zip(ess, logged, strict=True):
        assert m["method/step_size"] == pytest.approx(0.01 * e, rel=1e-9)


def test_on_policy_the_ess_is_one_and_a_lag_no_method_reads_logs_none():
    _, logged = _run({"advantage": ("gae", {})})
    assert all(m["train/ess"] == 1.0 for _, m in logged)
    _, logged = _run({"advantage": ("gae", {})}, policy_lag=2)
    assert all("train/ess" not in m for _, m in logged)


def test_workbench_run_cartpole_with_vcpo_and_a_policy_lag(tmp_path):
    import json

    from tests.conftest import run_cli

    out = run_cli("run", "cartpole", "advantage=vcpo_baseline", "step_size=vcpo_lr",
                  "step_size.g=sqrt", "policy_lag=4", "num_envs=4", "rollout_len=32",
                  "--steps", "6", "--json", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["steps"] == 6 and not result["diverged"]
    assert 0.0 < result["train/ess"] < 1.0
    assert result["method/step_size"] == pytest.approx(3e-4 * math.sqrt(result["train/ess"]),
                                                       rel=1e-9)
