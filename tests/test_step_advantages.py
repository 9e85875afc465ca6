"""Step-level advantage estimators against numbers derived from their reference code (GiGPO,
HGPO).

GiGPO: the expected advantages below come from running verl-agent's ``gigpo/core_gigpo.py``
functions (``episode_norm_reward``, ``build_step_group``, ``step_norm_reward``,
``compute_step_discounted_returns``) on the same episodes laid out as its batches are (one row
per step, each carrying its episode's reward), rounded to 6 decimals. The input has a state
seen once (anchors 5, 9, 4, 6, 2: no step credit), states shared across episodes (7, 3, 8),
a group of one episode of one step (group 2: its episode advantage is its score), and junk at
padded positions.
"""

from __future__ import annotations

import pytest
import torch

from workbench import registry

REWARDS = torch.tensor([[0, 0.5, 1, -3.0], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1],
                        [0, 0, 0, 0], [2, 5.0, 0, 0]], dtype=torch.float64)  # -3, 5: padding
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0],
                     [1, 0, 0, 0]], dtype=torch.float64)
GROUPS = torch.tensor([0, 0, 0, 1, 1, 2])
ANCHORS = torch.tensor([[7, 3, 5, 0], [7, 3, 3, 9], [7, 4, 0, 0], [7, 8, 8, 2], [7, 8, 6, 0],
                        [1, 0, 0, 0]])

# (mode, episode_stats, gamma, step_weight) -> advantages derived from verl-agent's code
FROM_VERL_AGENT = {
    ("mean_norm", "steps", 0.95, 1.0): [
        [1.379444, 1.744444, 0.777778, 0.000000],
        [-1.498056, -1.205556, -1.205556, -0.722222],
        [0.451944, 0.277778, 0.000000, 0.000000],
        [0.857259, 0.713571, 0.761071, 0.428571],
        [-1.000116, -1.188929, -0.571429, 0.000000],
        [2.000000, 0.000000, 0.000000, 0.000000]],
    ("mean_std_norm", "steps", 0.95, 1.0): [
        [1.945722, 2.247082, 1.092383, 0.000000],
        [-2.114713, -1.591705, -1.591705, -1.014355],
        [0.637156, 0.390137, 0.000000, 0.000000],
        [1.508888, 1.334195, 1.422930, 0.801782],
        [-1.776149, -2.222604, -1.069043, 0.000000],
        [1.999998, 0.000000, 0.000000, 0.000000]],
    ("mean_norm", "trajectories", 0.5, 0.7): [
        [0.783333, 1.133333, 0.666667, 0.000000],
        [-1.066667, -1.066667, -1.066667, -0.833333],
        [0.283333, 0.166667, 0.000000, 0.000000],
        [0.543750, 0.500000, 0.675000, 0.500000],
        [-0.543750, -0.675000, -0.500000, 0.000000],
        [2.000000, 0.000000, 0.000000, 0.000000]],
    ("mean_std_norm", "trajectories", 0.5, 0.7): [
        [1.277014, 1.681159, 0.872870, 0.000000],
        [-1.899376, -1.495233, -1.495233, -1.091088],
        [0.622361, 0.218218, 0.000000, 0.000000],
        [1.202075, 0.707106, 1.407103, 0.707106],
        [-1.202075, -1.407103, -0.707106, 0.000000],
        [1.999998, 0.000000, 0.000000, 0.000000]],
}


def _gigpo(**params):
    return registry.get("advantage", "gigpo")(**params)


@pytest.mark.parametrize("case", sorted(FROM_VERL_AGENT))
def test_gigpo_matches_verl_agent(case):
    mode, stats, gamma, weight = case
    method = _gigpo(mode=mode, episode_stats=stats, gamma=gamma, step_weight=weight)
    advantages, returns = method.compute(rewards=REWARDS, mask=MASK, group_ids=GROUPS,
                                         anchor_ids=ANCHORS)
    expected = torch.tensor(FROM_VERL_AGENT[case], dtype=torch.float64)
    assert torch.allclose(advantages, expected, atol=2e-6), advantages - expected
    assert torch.equal(returns, advantages)  # as the reference returns them


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_gigpo_gives_nothing_where_every_episode_of_a_group_returns_the_same(mode):
    rewards = torch.tensor([[0, 0, 1.0], [0, 1.0, 0], [1.0, 0, 0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.float64)
    anchors = torch.tensor([[0, 1, 2], [0, 3, 0], [0, 0, 0]])
    advantages, _ = _gigpo(mode=mode, gamma=1.0).compute(
        rewards=rewards, mask=mask, group_ids=torch.zeros(3, dtype=torch.long),
        anchor_ids=anchors)
    assert torch.allclose(advantages, torch.zeros_like(advantages), atol=1e-12)


def test_gigpo_step_weight_zero_is_the_episode_advantage_alone():
    base = _gigpo(step_weight=0.0).compute(rewards=REWARDS, mask=MASK, group_ids=GROUPS,
                                           anchor_ids=ANCHORS)[0]
    lone = _gigpo(step_weight=0.0).compute(rewards=REWARDS, mask=MASK, group_ids=GROUPS,
                                           anchor_ids=torch.arange(24).reshape(6, 4))[0]
    assert torch.equal(base, lone)  # anchors play no part
    # scores 1.5, 0, 1 over 3, 4 and 2 steps: mean 6.5 / 9 per step; 1, 0 over 4 and 3: 4 / 7
    expected = base.new_tensor([7 / 9, -13 / 18, 5 / 18, 3 / 7, -4 / 7, 2.0])
    assert torch.allclose(base[:, 0], expected, atol=1e-12)
    assert torch.equal(base, base[:, :1] * MASK)  # one number per episode


# (mode, base_group, history, gamma, alpha) -> advantages derived from verl-agent's recipe/hgpo
# (hgpo_advantage_estimate, run on the same episodes one row per step as its batches are)
FROM_HGPO_RECIPE = {
    ("mean_std_norm", False, 2, 0.5, 2.0): [
        [0.707104, 1.127448, 0.000000, 0.000000],
        [-1.414207, -0.909877, -0.707105, 0.000000],
        [0.707104, 0.000000, 0.000000, 0.000000],
        [0.999984, 0.999992, 1.224739, 0.000000],
        [-0.999984, -1.069145, 0.000000, 0.000000],
        [0.000000, 0.000000, 0.000000, 0.000000]],
    ("mean_std_norm", True, 1, 0.95, 1.0): [
        [1.060875, 1.153467, 1.092381, 0.000000],
        [-1.236557, -0.904760, -0.809522, -1.014354],
        [0.331736, 0.390136, 0.000000, 0.000000],
        [0.933926, 0.850986, 0.774426, 0.801781],
        [-1.023012, -1.149112, -1.069042, 0.000000],
        [1.999996, 0.000000, 0.000000, 0.000000]],
    ("mean_norm", False, 1, 0.95, 1.0): [
        [0.601666, 0.821667, 0.000000, 0.000000],
        [-0.775833, -0.628333, -0.483333, 0.000000],
        [0.174167, 0.000000, 0.000000, 0.000000],
        [0.428687, 0.384750, 0.332500, 0.000000],
        [-0.428687, -0.517750, 0.000000, 0.000000],
        [0.000000, 0.000000, 0.000000, 0.000000]],
    ("mean_norm", True, 2, 0.5, 2.0): [
        [0.288889, 0.567460, 0.777777, 0.000000],
        [-0.411111, -0.468254, -0.411111, -0.722221],
        [0.188889, 0.277778, 0.000000, 0.000000],
        [0.135714, 0.155357, 0.285714, 0.428571],
        [-0.164286, -0.192602, -0.571428, 0.000000],
        [1.999998, 0.000000, 0.000000, 0.000000]],
}


def _hgpo(**params):
    return registry.get("advantage", "hgpo")(**params)


@pytest.mark.parametrize("case", sorted(FROM_HGPO_RECIPE))
def test_hgpo_matches_its_reference_code(case):
    mode, base, history, gamma, alpha = case
    method = _hgpo(mode=mode, base_group=base, history=history, gamma=gamma, alpha=alpha)
    advantages, returns = method.compute(rewards=REWARDS, mask=MASK, group_ids=GROUPS,
                                         anchor_ids=ANCHORS)
    expected = torch.tensor(FROM_HGPO_RECIPE[case], dtype=torch.float64)
    assert torch.allclose(advantages, expected, atol=2e-6), advantages - expected
    assert torch.equal(returns, advantages)


def test_hgpo_on_the_current_state_alone_is_gigpos_step_advantage():
    hgpo = _hgpo(mode="mean_norm", history=0, gamma=0.9).compute(
        rewards=REWARDS, mask=MASK, group_ids=GROUPS, anchor_ids=ANCHORS)[0]
    both, episode = (_gigpo(mode="mean_norm", gamma=0.9, step_weight=w).compute(
        rewards=REWARDS, mask=MASK, group_ids=GROUPS, anchor_ids=ANCHORS)[0] for w in (1.0, 0.0))
    assert torch.allclose(hgpo * (1 + 1e-6), both - episode, atol=1e-12)
