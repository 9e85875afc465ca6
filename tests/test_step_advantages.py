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


# PAV-style progress and PRIME-style implicit process rewards: hand-worked values ----------

PAV_REWARDS = torch.tensor([[0, 0, 1.0], [0, 0, 4.0], [1, 0, 0.0]], dtype=torch.float64)
PAV_MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.float64)
PAV_GROUPS = torch.tensor([0, 0, 1])
# column t: V̂ of the state step t starts from; 7, 9, 3: after the last step or padding
PAV_VALUES = torch.tensor([[0.5, 0.25, 0.75, 9], [0.5, 0.1, 7, 9], [0.4, 3, 3, 3]],
                          dtype=torch.float64)


def _pav(**params):
    return registry.get("advantage", "pav")(**params)


def test_pav_adds_each_step_s_progress_to_the_outcome_advantage():
    # progress r_t + V(s_{t+1}) - V(s_t), V after the last step 0:
    #   row 0: -0.25, 0.5, 0.25 (summing to score - V(s_0) = 0.5); row 1: -0.4, -0.1; row 2: 0.6
    # RLOO outcome: row 0: 1 - 0 = 1, row 1: 0 - 1 = -1, row 2 (alone in its group): 1
    method = _pav(alpha=2.0)
    advantages, returns = method.compute(rewards=PAV_REWARDS, mask=PAV_MASK,
                                         group_ids=PAV_GROUPS, mc_values=PAV_VALUES)
    expected = torch.tensor([[0.5, 2.0, 1.5], [-1.8, -1.2, 0.0], [2.2, 0.0, 0.0]],
                            dtype=torch.float64)
    assert torch.allclose(advantages, expected, atol=1e-12)
    assert torch.equal(returns, torch.tensor([[1.0, 1, 1], [0, 0, 0], [1, 0, 0]],
                                             dtype=torch.float64))  # the reward to go
    alone = _pav(outcome="none").compute(rewards=PAV_REWARDS, mask=PAV_MASK,
                                          group_ids=PAV_GROUPS, mc_values=PAV_VALUES)[0]
    assert torch.allclose(alone, torch.tensor([[-0.25, 0.5, 0.25], [-0.4, -0.1, 0], [0.6, 0, 0]],
                                              dtype=torch.float64), atol=1e-12)
    critic = _pav(values="critic", outcome="none")
    assert critic.requirements(critic.params) == {"rewards", "mask", "values"}
    assert torch.equal(critic.compute(rewards=PAV_REWARDS, mask=PAV_MASK, values=PAV_VALUES)[0],
                       alone)


def test_pav_requests_the_value_of_every_played_step_s_state():
    request = _pav(continuations=3).value_request(mask=PAV_MASK,
                                                  old_log_probs=torch.zeros(3, 3))
    assert request.continuations == 3
    assert request.points.tolist() == [[True, True, True, False], [True, True, False, False],
                                       [True, False, False, False]]
    assert _pav(values="critic").value_request(mask=PAV_MASK, old_log_probs=None) is None


IMPLICIT_REWARDS = torch.tensor([[0, 1.0], [0, 5.0]], dtype=torch.float64)  # 5: padding
IMPLICIT_MASK = torch.tensor([[1, 1], [1, 0]], dtype=torch.float64)
IMPLICIT_GROUPS = torch.tensor([3, 3])
REF = torch.tensor([[-1.0, -1.0], [-1.0, -8.0]], dtype=torch.float64)
OLD = REF + torch.tensor([[0.2, -0.4], [0.6, 2.0]], dtype=torch.float64)  # log-ratios


def _implicit(**params):
    return registry.get("advantage", "implicit_prm")(**params).compute(
        rewards=IMPLICIT_REWARDS, mask=IMPLICIT_MASK, group_ids=IMPLICIT_GROUPS,
        old_log_probs=OLD, ref_log_probs=REF)


def test_implicit_prm_is_rloo_on_the_process_and_the_outcome_rewards_summed_to_go():
    # process (beta 1): row 0 [0.2, -0.4] (mean -0.1), row 1 [0.6] (mean 0.6); n = 2:
    #   p~ = 2 p - (-0.1 + 0.6) -> row 0 [-0.1, -1.3], row 1 [0.7]
    # outcome: scores 1, 0 -> 1 at row 0's last step, -1 at row 1's
    # rewards [-0.1, -0.3], [-0.3]; to go: [-0.4, -0.3], [-0.3]
    plain = {"norm": "none", "beta": 1.0, "process_coef": 1.0, "outcome_coef": 1.0}
    advantages, returns = _implicit(whiten=False, **plain)
    expected = torch.tensor([[-0.4, -0.3], [-0.3, 0.0]], dtype=torch.float64)
    assert torch.allclose(returns, expected, atol=1e-12)
    assert torch.allclose(advantages, expected, atol=1e-12)
    whitened, _ = _implicit(whiten=True, **plain)
    values = torch.tensor([-0.4, -0.3, -0.3], dtype=torch.float64)
    centred = values - values.mean()
    scaled = centred / torch.sqrt(centred.pow(2).sum() / 2 + 1e-8)
    assert torch.allclose(whitened[IMPLICIT_MASK != 0], scaled, atol=1e-9)
    assert whitened[1, 1] == 0.0
    # batch_norm divides by the largest |log-ratio to go| (0.6 here): beta cancels out
    normed = _implicit(whiten=False, norm="batch_norm", beta=1.0, process_coef=1.0,
                       outcome_coef=1.0)[1]
    assert torch.equal(normed, _implicit(whiten=False, norm="batch_norm", beta=7.0,
                                         process_coef=1.0, outcome_coef=1.0)[1])
    assert torch.allclose(normed, _implicit(whiten=False, norm="none", beta=1 / (0.6 + 1e-6),
                                            process_coef=1.0, outcome_coef=1.0)[1],
                          atol=1e-12)


def test_implicit_prm_with_the_reference_policy_itself_is_rloo_on_the_outcome():
    method = registry.get("advantage", "implicit_prm")(whiten=False, outcome_coef=1.0)
    _, returns = method.compute(rewards=IMPLICIT_REWARDS, mask=IMPLICIT_MASK,
                                group_ids=IMPLICIT_GROUPS, old_log_probs=REF,
                                ref_log_probs=REF)
    assert torch.allclose(returns, torch.tensor([[1.0, 1.0], [-1.0, 0.0]],
                                                dtype=torch.float64), atol=1e-12)
