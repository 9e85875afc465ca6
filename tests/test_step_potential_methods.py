"""Step-potential and peer-baseline step advantages on hand-worked episodes: SPAE (the change in
a step potential from Monte Carlo correctness and action confidence, outcome credit down-weighted
after the potential saturates) and BiPACE (steps clustered by the actor's hidden state, returns
recentred within a cluster by action)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workbench import registry

# one group of two episodes: row 0 reaches the goal at its third step (a fourth column of
# padding holding junk), row 1 plays four steps without reaching it
REWARDS = torch.tensor([[0, 0, 1, 7.0], [0, 0, 0, 0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.float64)
GROUPS = torch.tensor([0, 0])
# column t: the state step t starts from; only columns 1 .. L - 1 are read (0 with start)
MC = torch.tensor([[0.2, 0.5, 0.95, 0.3, 0.3], [0.2, 0.4, 0.1, 0.3, 0.8]], dtype=torch.float64)
# confidences exp(log p): row 0 0.5, 0.8, 0.5; row 1 all 1 (log p = 0); padding junk. The
# entropies given are -log p, so exp(-entropy) is the same confidence
LOGP = torch.log(torch.tensor([[0.5, 0.8, 0.5, 0.01], [1, 1, 1, 1]], dtype=torch.float64))


def _spae(**params):
    return registry.get("advantage", "spae")(**params)


def _compute(method, **inputs):
    base = {"rewards": REWARDS, "mask": MASK, "group_ids": GROUPS, "mc_values": MC,
            "old_log_probs": LOGP, "policy_entropy": -LOGP}
    return method.compute(**(base | inputs))[0]


def test_spae_on_accuracy_alone_shapes_gains_and_drops_and_penalises_after_saturation():
    # outcome (no std): scores 1, 0 -> A = +0.5, -0.5
    # Phi after each step (Acc: the next state's value, after the last step the outcome):
    #   row 0: 0.5, 0.95, 1        row 1: 0.4, 0.1, 0.3, 0
    # Delta (first 0): row 0: 0, 0.45, 0.05       row 1: 0, -0.3, 0.2, -0.3
    # saturation (kappa 0.9): row 0's Phi reaches 0.95 after step 1, so step 2 is after it
    # gain 2, drop 1, rho 0.5, lambda 0.1:
    #   row 0: 0.5, 0.5 + 2 * 0.45 = 1.4, 0.5 * 0.5 - 0.1 + 2 * 0.05 = 0.25, padding 0
    #   row 1: -0.5, -0.5 - 0.3 = -0.8, -0.5 + 2 * 0.2 = -0.1, -0.5 - 0.3 = -0.8
    method = _spae(potential="accuracy", norm_by_std=False, gain_weight=2.0, drop_weight=1.0,
                   rho=0.5, penalty=0.1)
    got = _compute(method, old_log_probs=None, policy_entropy=None)
    expected = torch.tensor([[0.5, 1.4, 0.25, 0.0], [-0.5, -0.8, -0.1, -0.8]],
                            dtype=torch.float64)
    torch.testing.assert_close(got, expected)
    assert method.requirements(method.params) == {"rewards", "mask", "group_ids", "mc_values"}


def test_spae_probe_potential_combines_correctness_and_the_next_state_s_confidence():
    # Phi = 1.5 Acc Conf + 0.5 Acc - Conf, Conf = exp(-entropy) at the next state:
    #   row 0: after step 0: Acc 0.5, Conf 0.8: 0.6 + 0.25 - 0.8 = 0.05
    #          after step 1: Acc 0.95, Conf 0.5: 0.7125 + 0.475 - 0.5 = 0.6875
    #          after step 2 (the goal): Acc 1, Conf 1: 1
    #   row 1 (Conf 1): Phi = 2 Acc - 1: -0.2, -0.8, -0.4, and after the last step -1
    # Delta: row 0: 0, 0.6375, 0.3125   row 1: 0, -0.6, 0.4, -0.6
    # no saturation before the last step (0.05 and 0.6875 < 0.9; row 1 never)
    method = _spae(norm_by_std=False)
    expected = torch.tensor([[0.5, 1.1375, 0.8125, 0.0], [-0.5, -1.1, -0.1, -1.1]],
                            dtype=torch.float64)
    torch.testing.assert_close(_compute(method, old_log_probs=None), expected)
    assert method.requirements(method.params) == {"rewards", "mask", "group_ids", "mc_values",
                                                  "policy_entropy"}
    # the taken actions' probabilities exp(log p) as confidence: the same numbers here
    taken = _spae(norm_by_std=False, confidence="action_prob")
    torch.testing.assert_close(_compute(taken, policy_entropy=None), expected)
    # an entropy that differs changes the potential: row 1's second state at entropy log 2
    # (Conf 0.5): Phi after step 0 = 1.5 * 0.4 * 0.5 + 0.2 - 0.5 = 0, Delta_1 = -0.8 - 0
    entropy = (-LOGP).clone()
    entropy[1, 1] = math.log(2.0)
    moved = _compute(method, policy_entropy=entropy)
    torch.testing.assert_close(moved[1, :2], torch.tensor([-0.5, -1.3], dtype=torch.float64))
    torch.testing.assert_close(moved[0], expected[0])
    # with the std (scores 1, 0: std sqrt(0.5)) the outcome term is +-0.5 / (sqrt(0.5) + 1e-6)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    scaled = _compute(_spae())
    torch.testing.assert_close(scaled - expected, torch.tensor(
        [[a - 0.5] * 3 + [0.0], [0.5 - a] * 4], dtype=torch.float64))


def test_spae_start_delta_uses_the_start_state_s_potential():
    # row 0: Phi(s_0) = 1.5 * 0.2 * 0.5 + 0.1 - 0.5 = -0.25, so Delta_0 = 0.05 + 0.25 = 0.3
    # row 1: Phi(s_0) = 2 * 0.2 - 1 = -0.6, so Delta_0 = -0.2 + 0.6 = 0.4
    zero = _compute(_spae(norm_by_std=False))
    start = _compute(_spae(norm_by_std=False, first_delta="start"))
    torch.testing.assert_close(start[:, 0] - zero[:, 0],
                               torch.tensor([0.3, 0.4], dtype=torch.float64))
    torch.testing.assert_close(start[:, 1:], zero[:, 1:])


def test_spae_requests_the_state_after_each_step_but_the_last():
    request = _spae(continuations=3).value_request(mask=MASK, old_log_probs=LOGP)
    assert request.continuations == 3
    assert request.points.tolist() == [[False, True, True, False, False],
                                       [False, True, True, True, False]]
    start = _spae(first_delta="start").value_request(mask=MASK, old_log_probs=LOGP)
    assert start.points[:, 0].tolist() == [True, True]


@pytest.mark.parametrize("kappa", [0.5, 0.9])
def test_spae_saturation_starts_after_the_first_boundary_at_kappa(kappa):
    # accuracy potential, row 0: Phi 0.5, 0.95, 1. kappa 0.5: steps 1 and 2 follow a
    # saturated boundary; kappa 0.9: step 2 only. rho 0 removes their outcome term.
    method = _spae(potential="accuracy", norm_by_std=False, rho=0.0, xi=0.0, kappa=kappa)
    got = _compute(method, old_log_probs=None, policy_entropy=None)
    row0 = [0.5, 0.0, 0.0, 0.0] if kappa == 0.5 else [0.5, 0.5, 0.0, 0.0]
    assert got[0].tolist() == row0
    assert got[1].tolist() == [-0.5] * 4  # never saturated


def test_spae_runs_in_the_agent_loop_with_its_continuations_counted():
    from workbench.testbeds import TASKS, Budget

    task = TASKS["keydoor"]
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["advantage"] = _spae()
    logged: list[dict] = []
    params = task.Params(train_instances=8, eval_instances=4, instances_per_update=4,
                         group_size=4, max_steps=12)
    task().run(params, methods, seed=0, device=torch.device("cpu"), budget=Budget(steps=2),
               log=lambda step, m: logged.append(dict(m)))
    played = logged[0]["train/episode_length"] * 4 * 4
    assert logged[0]["cost/env_steps"] > played * 1.5  # each boundary's state continued
    assert all(math.isfinite(m["train/policy_loss"]) for m in logged)
    assert logged[-1]["adv/zero_fraction"] < 1.0


# BiPACE: one group of two episodes of three steps (a fourth padded column of junk); row 0
# reaches the goal at its last step. gamma 0.5: returns row 0: 0.25, 0.5, 1; row 1: 0, 0, 0.
# Hidden states (2-D): both first steps at [1, 0] (one cluster); the second steps at [0, 1]
# and [0.1, 1] (cosine distance 1 - 1/sqrt(1.01) = 0.005: one cluster at tau 0.1); the third
# steps at [1, 1] and [-1, 0.2] (far from everything: clusters of one).
B_REWARDS = torch.tensor([[0, 0, 1, 9.0], [0, 0, 0, 9.0]], dtype=torch.float64)
B_MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.float64)
B_HIDDEN = torch.tensor([[[1, 0], [0, 1], [1, 1], [0, 1]],
                         [[1, 0], [0.1, 1], [-1, 0.2], [1, 0]]], dtype=torch.float64)
B_ACTIONS = torch.tensor([[1, 0, 3, 0], [2, 0, 3, 1]])


def _bipace(**params):
    method = registry.get("advantage", "bipace")(**({"gamma": 0.5, "tau": 0.1} | params))
    return method.compute(rewards=B_REWARDS, mask=B_MASK, group_ids=GROUPS,
                          hidden_states=B_HIDDEN, action_ids=B_ACTIONS)[0]


def test_bipace_q_recentres_each_action_s_returns_within_its_cluster():
    # episode advantage: scores 1, 0, each counted at 3 steps: mean 0.5 -> +-0.5
    # first steps' cluster (mean return 0.125): row 0's action 1 alone: 0.25 - 0.125 = 0.125,
    #   row 1's action 2 alone: 0 - 0.125 = -0.125
    # second steps' cluster: one action for both: 0; third steps alone: 0
    expected = torch.tensor([[0.625, 0.5, 0.5, 0], [-0.625, -0.5, -0.5, 0]],
                            dtype=torch.float64)
    torch.testing.assert_close(_bipace(), expected)
    # step_weight 2 doubles the cluster term only
    torch.testing.assert_close(_bipace(step_weight=2.0) - expected, torch.tensor(
        [[0.125, 0, 0, 0], [-0.125, 0, 0, 0]], dtype=torch.float64))


def test_bipace_v_subtracts_the_other_actions_mean_or_the_cluster_s():
    # first steps: 0.25 - 0 = 0.25 and 0 - 0.25 = -0.25 (the other action's return)
    # second steps, one action: return minus the cluster mean 0.25: +-0.25; third: 0
    expected = torch.tensor([[0.75, 0.75, 0.5, 0], [-0.75, -0.75, -0.5, 0]],
                            dtype=torch.float64)
    torch.testing.assert_close(_bipace(estimator="v"), expected)


def test_bipace_with_one_cluster_is_each_action_s_mean_return_minus_the_group_s():
    # tau 2 (the largest cosine distance): one cluster of the six steps, mean return 1.75 / 6
    # action 1: 0.25, action 2: 0, action 0: (0.5 + 0) / 2, action 3: (1 + 0) / 2
    mean = 1.75 / 6
    step = torch.tensor([[0.25 - mean, 0.25 - mean, 0.5 - mean],
                         [0 - mean, 0.25 - mean, 0.5 - mean]], dtype=torch.float64)
    got = _bipace(tau=2.0)
    torch.testing.assert_close(got[:, :3], torch.tensor([[0.5], [-0.5]],
                                                        dtype=torch.float64) + step)
    # tau 0 (and exact copies only): the first steps still share [1, 0]; nothing else does
    exact = _bipace(tau=0.0)
    torch.testing.assert_close(exact, torch.tensor(
        [[0.625, 0.5, 0.5, 0], [-0.625, -0.5, -0.5, 0]], dtype=torch.float64))


def test_bipace_ignores_padded_hidden_states_and_actions():
    hidden = B_HIDDEN.clone()
    hidden[:, 3] = torch.tensor([0.1, 1.0], dtype=torch.float64)  # next to the second steps
    actions = B_ACTIONS.clone()
    actions[:, 3] = 0
    method = registry.get("advantage", "bipace")(gamma=0.5, tau=0.1)
    moved = method.compute(rewards=B_REWARDS, mask=B_MASK, group_ids=GROUPS,
                           hidden_states=hidden, action_ids=actions)[0]
    torch.testing.assert_close(moved, _bipace())


def test_bipace_runs_in_the_agent_loop_on_the_policy_s_hidden_states():
    from workbench.testbeds import TASKS, Budget

    task = TASKS["toolcalc"]
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", "bipace")()
    logged: list[dict] = []
    params = task.Params(train_instances=8, eval_instances=4, instances_per_update=4,
                         group_size=4, max_steps=8)
    task().run(params, methods, seed=0, device=torch.device("cpu"), budget=Budget(steps=2),
               log=lambda step, m: logged.append(dict(m)))
    assert all(math.isfinite(m["train/policy_loss"]) for m in logged)
    assert logged[-1]["adv/zero_fraction"] < 1.0


def test_the_loop_s_hidden_states_are_the_policy_s_last_hidden_layer():
    from workbench.testbeds.agent.episodes import play
    from workbench.testbeds.agent.keydoor import KeyDoor, generate
    from workbench.testbeds.agent.loop import hidden_states_of
    from workbench.testbeds.agent.policy import Policy

    env = KeyDoor([generate(0, 0, i, 6, 0.0) for i in range(3)], 6)
    policy = Policy(env.obs_dim, 4, 5, 2)
    episodes = play(env, policy, torch.Generator().manual_seed(0))
    found = hidden_states_of(policy, episodes)
    assert found.shape == (*episodes.mask.shape, 5)
    layer = policy.net[:-1](episodes.obs[0, 0])  # Linear, Tanh, Linear, Tanh
    torch.testing.assert_close(found[0, 0], layer.detach())
    # the logits are the last Linear of that layer
    torch.testing.assert_close(policy.net[-1](found[0, 0]), policy.net(episodes.obs[0, 0]))
    assert bool((found[episodes.mask == 0] == 0).all())


# MatchTIR: one group of two rollouts of three calls against the trace [0, 1] (-1: its end).
# Row 0 calls 2, 0, 1 and succeeds at its last call; row 1 calls 1, 1, 3 and fails.
M_REWARDS = torch.tensor([[0, 0, 1.0], [0, 0, 0]], dtype=torch.float64)
M_MASK = torch.ones(2, 3, dtype=torch.float64)
M_ACTIONS = torch.tensor([[2, 0, 1], [1, 1, 3]])
M_TRACE = torch.tensor([[0, 1, -1], [0, 1, -1]])


def _matchtir(**params):
    method = registry.get("advantage", "matchtir")(**params)
    return method.compute(rewards=M_REWARDS, mask=M_MASK, group_ids=GROUPS,
                          action_ids=M_ACTIONS, reference_actions=M_TRACE)[0]


def test_matchtir_rewards_matched_calls_and_adds_their_future_sum_to_the_outcome():
    # turn rewards: row 0: call 2 matches nothing, 0 -> trace 0, 1 -> trace 1: 0, 1, 1
    #   row 1: both 1s could take trace 1; the nearer one (position 1 = trace position 1)
    #   does: 0, 1, 0
    # gamma 0.5: future sums row 0: 0.75, 1.5, 1   row 1: 0.5, 1, 0
    # group mean of the six: 4.75 / 6; trajectory advantage (no std): +-0.5
    mean = 4.75 / 6
    expected = torch.tensor([[0.5 + 0.75 - mean, 0.5 + 1.5 - mean, 0.5 + 1 - mean],
                             [-0.5 + 0.5 - mean, -0.5 + 1 - mean, -0.5 - mean]],
                            dtype=torch.float64)
    torch.testing.assert_close(_matchtir(gamma=0.5, turn_norm="mean", norm_by_std=False),
                               expected)
    # with the std: the turn term is divided by the unbiased std of the six future sums
    future = torch.tensor([0.75, 1.5, 1, 0.5, 1, 0], dtype=torch.float64)
    scaled = _matchtir(gamma=0.5, norm_by_std=False, epsilon=0.0)
    torch.testing.assert_close(scaled - torch.tensor([[0.5] * 3, [-0.5] * 3],
                                                     dtype=torch.float64),
                               ((future - future.mean()) / future.std()).view(2, 3))


def test_matchtir_matches_each_trace_call_once_and_ignores_padding():
    from methods.advantage.matchtir import matched_rewards

    assert matched_rewards(np.array([1, 1, 1]), np.array([1])).tolist() == [1, 0, 0]
    assert matched_rewards(np.array([0, 1, 1]), np.array([1, 0, 1])).tolist() == [1, 1, 1]
    assert matched_rewards(np.array([2, 2]), np.array([0, 1])).tolist() == [0, 0]
    # a padded call equal to the trace changes nothing
    mask = M_MASK.clone()
    mask[1, 2] = 0
    actions = M_ACTIONS.clone()
    method = registry.get("advantage", "matchtir")()
    base = method.compute(rewards=M_REWARDS, mask=mask, group_ids=GROUPS, action_ids=actions,
                          reference_actions=M_TRACE)[0]
    actions[1, 2] = 1
    moved = method.compute(rewards=M_REWARDS, mask=mask, group_ids=GROUPS, action_ids=actions,
                           reference_actions=M_TRACE)[0]
    torch.testing.assert_close(base, moved)
    assert base[1, 2] == 0


def test_the_loop_s_reference_actions_solve_each_row_s_instance():
    from workbench.testbeds.agent.loop import reference_actions_of
    from workbench.testbeds.agent.toolcalc import ToolCalc, generate

    puzzles = [generate(0, 0, i) for i in range(3)]
    groups = torch.tensor([0, 0, 2, 1])
    table = reference_actions_of(ToolCalc, puzzles, groups, max_steps=12,
                                 device=torch.device("cpu"))
    assert table.shape[0] == 4 and torch.equal(table[0], table[1])
    for row, group in enumerate(groups.tolist()):
        trace = [a for a in table[row].tolist() if a >= 0]
        assert len(trace) == puzzles[group].optimal
        env = ToolCalc([puzzles[group]], 12)
        env.reset()
        for action in trace:
            moved = env.step(torch.tensor([action]))
        assert bool(moved.terminated[0])  # the trace reaches the target


def test_matchtir_runs_in_the_tool_use_loop():
    from workbench.testbeds import TASKS, Budget

    task = TASKS["toolcalc"]
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", "matchtir")()
    logged: list[dict] = []
    params = task.Params(train_instances=8, eval_instances=4, instances_per_update=4,
                         group_size=4, max_steps=8)
    task().run(params, methods, seed=0, device=torch.device("cpu"), budget=Budget(steps=2),
               log=lambda step, m: logged.append(dict(m)))
    assert all(math.isfinite(m["train/policy_loss"]) for m in logged)
    assert logged[-1]["adv/zero_fraction"] < 1.0


def test_workbench_credit_gives_bipace_spae_and_matchtir_their_inputs(tmp_path):
    """A credit study measures them like the training loop feeds them: hidden states, actions,
    the planner's traces and Monte Carlo values (estimates finite for each)."""
    import yaml

    from workbench.cli import main as cli

    document = {
        "name": "tiny-credit", "checkpoint": {"methods": {"advantage": "grpo"}, "updates": 1,
                                              "seed": 3},
        "task": {"name": "toolcalc", "params": {
            "max_value": 12, "tools": 3, "max_operand": 4, "max_optimal": 3, "max_steps": 6,
            "hidden": 16, "train_instances": 8, "eval_instances": 2,
            "instances_per_update": 4, "group_size": 4, "epochs": 1, "minibatches": 1}},
        "estimators": ["bipace", "matchtir", "spae"], "group_sizes": [4],
        "continuations": [4], "instances": 4, "steps_per_instance": 2, "resamples": 100}
    path = tmp_path / "credit.yaml"
    path.write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    assert cli.main(["credit", str(path), "--out", str(out), "--device", "cpu"]) == 0
    table = (out / "table.csv").read_text()
    assert all(name in table for name in ("bipace", "matchtir", "spae"))
