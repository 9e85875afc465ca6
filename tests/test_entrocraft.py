"""entropy/entrocraft: the schedule and the rejected samples, against numbers derived by hand
from the rule in its docstring."""

from __future__ import annotations

import pytest
import torch

from workbench import registry

# four samples of one token (the control testbed's rows): l - l_bar = (0.8, 0.4, -0.1, -1.1)
LOG_PROBS = torch.tensor([[-0.1], [-0.5], [-1.0], [-2.0]], dtype=torch.float64)
ONES = torch.ones(4, 1, dtype=torch.float64)


def entrocraft(**params):
    method = registry.get("entropy", "entrocraft")(**params)
    method.start({"total_steps": 10})
    return method


def hook(method, advantages, log_probs=LOG_PROBS, mask=ONES):
    return method.policy_loss_hook(log_probs=log_probs, old_log_probs=log_probs,
                                   advantages=advantages, mask=mask, entropy=ONES * 0.7)


def test_schedule_is_linear_in_the_first_entropy():
    method = entrocraft(start_ratio=1.0, end_ratio=0.5)
    assert method.coefficient(0, 2.0) == 0.0
    assert method.coefficient(4, 1.7) == 0.0  # H_init stays the first entropy, 2.0
    assert method.target(0, 2.0) == 2.0
    assert method.target(4, 2.0) == pytest.approx(2.0 * (1 - 0.5 * 0.4))
    assert method.target(25, 2.0) == pytest.approx(1.0)  # held at the end after T


@pytest.mark.parametrize("max_reject, rejected, change", [
    (0.5, [0, 3], -0.125),         # cap floor(0.5 * 4) = 2: c = 0.275, then 0.2
    (0.9, [0, 1, 3], -0.025),      # the third, 0.1, reaches the gap -0.05
])
def test_entropy_below_schedule_rejects_the_entropy_lowering_samples(max_reject, rejected,
                                                                       change):
    """A = (1, 1, -1, -1): c = (0.8, 0.4, 0.1, 1.1) / 4 = (0.2, 0.1, 0.025, 0.275), all kept
    dH = -0.6; H_init = H_0 = 1, H*(1) = 1 - 0.5 * 0.1 = 0.95, gap = -0.05 > -0.6."""
    method = entrocraft(start_ratio=1.0, end_ratio=0.5, eta=1.0, max_reject=max_reject)
    method.coefficient(0, 1.0)
    out = hook(method, torch.tensor([[1.0], [1.0], [-1.0], [-1.0]], dtype=torch.float64))
    kept = [i for i in range(4) if i not in rejected]
    assert out["loss_mask"].squeeze(1).nonzero().squeeze(1).tolist() == kept
    assert out["metrics"]["entrocraft_reject_frac"] == len(rejected) / 4
    assert out["metrics"]["entrocraft_gap"] == pytest.approx(-0.05)
    assert out["metrics"]["entrocraft_predicted_change"] == pytest.approx(change)


def test_entropy_above_schedule_rejects_the_entropy_raising_samples():
    """A = (-1, 1, 1, -1): c = (-0.2, 0.1, -0.025, 0.275), all kept dH = -0.15; measured 2.0
    against H*(1) = 0.95: gap = -1.05 < -0.15, so rows 0 then 2 go and dH = -0.375."""
    method = entrocraft(start_ratio=1.0, end_ratio=0.5, eta=1.0, max_reject=0.9)
    method.coefficient(0, 1.0)
    method.coefficient(0, 2.0)
    out = hook(method, torch.tensor([[-1.0], [1.0], [1.0], [-1.0]], dtype=torch.float64))
    assert out["loss_mask"].squeeze(1).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert out["metrics"]["entrocraft_predicted_change"] == pytest.approx(-0.375)


def test_sequence_level_rejects_whole_responses_and_token_level_single_tokens():
    """Two responses of three tokens, the second with two: l - l_bar = (0.4, 0.2, -0.1, 0.3,
    -0.8) over the 5 valid tokens, A - A_bar = (0.6, 0.6, 0.6, -0.9, -0.9). Token scores
    c = (0.048, 0.024, -0.012, -0.054, 0.144); responses: 0.06 and 0.09; all kept dH = -0.15
    (eta 1). H_init = 1, H*(1) = 0.99 (T = 10, end 0.9): gap = -0.01."""
    log_probs = torch.tensor([[-0.6, -0.8, -1.1], [-0.7, -1.8, -5.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, 9.0]], dtype=torch.float64)
    sequence = entrocraft(eta=1.0, max_reject=0.5)
    sequence.coefficient(0, 1.0)
    out = sequence.policy_loss_hook(log_probs=log_probs, old_log_probs=log_probs,
                                    advantages=adv, mask=mask, entropy=mask)
    # cap floor(0.5 * 2) = 1: the response with 0.09 goes, dH = -0.06
    assert out["loss_mask"].tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    assert out["metrics"]["entrocraft_predicted_change"] == pytest.approx(-0.06)
    token = entrocraft(eta=1.0, max_reject=0.5, level="token")
    token.coefficient(0, 1.0)
    out = token.policy_loss_hook(log_probs=log_probs, old_log_probs=log_probs,
                                 advantages=adv, mask=mask, entropy=mask)
    # cap floor(0.5 * 5) = 2: 0.144 (-0.006, past the gap -0.01): one token goes (padding
    # keeps loss_mask 1; the loop multiplies it by the mask)
    assert out["loss_mask"].tolist() == [[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]]
    assert out["metrics"]["entrocraft_predicted_change"] == pytest.approx(-0.006)


def test_runs_in_the_control_loop_and_logs_its_rejections():
    from workbench.testbeds import Budget, get_task
    task = get_task("cartpole")
    methods = {"step_size": registry.get("step_size", "adam_schedule")(),
               "advantage": registry.get("advantage", "gae")(),
               "entropy": registry.get("entropy", "entrocraft")()}
    logged: list[dict] = []
    task().run(task.Params(num_envs=4, rollout_len=16), methods, seed=0,
               device=torch.device("cpu"), budget=Budget(steps=3),
               log=lambda step, m: logged.append(dict(m)))
    assert all(m["method/entropy_coef"] == 0.0 for m in logged)
    assert all(0.0 <= m["method/entrocraft_reject_frac"] <= 0.5 for m in logged)
    assert any(m["method/entrocraft_reject_frac"] > 0 for m in logged)


def test_on_a_seed_axis_each_seed_rejects_as_in_its_own_run():
    from tests.test_control_seed_axis import SMALL, both

    methods = {"step_size": registry.get("step_size", "adam")(),
               "batch_size": registry.get("batch_size", "constant")(),
               "entropy": registry.get("entropy", "entrocraft")(max_reject=0.9),
               "advantage": registry.get("advantage", "gae")()}
    _, together = both("cartpole", SMALL, methods, [3, 4], 3)
    rejected = [m["method/entrocraft_reject_frac"] for rows in together.values()
                for _, m in rows]
    assert any(r > 0 for r in rejected), rejected
