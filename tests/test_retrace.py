"""Multi-step targets of the value-based testbed (``target: n_step | retrace``): the replay
buffer's sequences, the n-step and Retrace(lambda) targets on hand-worked cases, episode ends
inside the window, and the loop and command line with each target."""

import json
import math

import torch
from torch import nn

from tests.conftest import run_cli
from tests.test_dqn import FAST, TASK, Table, run
from workbench.testbeds.value.dqn import (
    ReplayBuffer,
    act,
    act_with_probs,
    multi_step_target,
    n_step_target,
    retrace_target,
)

GAMMA = 0.5


def sequence(actions, mu, rewards=(1.0, 2.0, 3.0), terminated=(0.0, 0.0, 0.0),
             valid=(True, True, True)):
    """One row of a ``sample_sequences`` batch: s_{k+1} is state k + 1 of the ``TABLE``."""
    n = len(rewards)
    next_obs = torch.tensor([[[k + 1.0]] for k in range(n)], dtype=torch.float64)
    return {"obs": torch.zeros(1, n, 1, dtype=torch.float64),
            "actions": torch.tensor([actions]), "rewards": torch.tensor([rewards],
                                                                        dtype=torch.float64),
            "next_obs": next_obs.view(1, n, 1), "terminated": torch.tensor([terminated],
                                                                           dtype=torch.float64),
            "behaviour_probs": torch.tensor([mu], dtype=torch.float64),
            "valid": torch.tensor([valid])}


#: Q_target: s1 -> [2, 4] (greedy 1), s2 -> [6, 0] (greedy 0), s3 -> [1, 3] (greedy 1)
TABLE = Table([[0.0, 0.0], [2.0, 4.0], [6.0, 0.0], [1.0, 3.0]])


def test_the_n_step_target_on_a_hand_worked_three_step_case():
    # 1 + 0.5 * 2 + 0.25 * 3 + 0.125 * max(1, 3) = 3.125
    batch = sequence([0, 1, 1], [0.9, 0.6, 0.3])
    y = multi_step_target(batch, kind="n_step", gamma=GAMMA, target=TABLE)
    assert y.tolist() == [3.125]
    # double DQN: the online network picks action 0 at s3, valued 1 by the target network
    online = Table([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [5.0, 0.0]])
    y = multi_step_target(batch, kind="n_step", gamma=GAMMA, target=TABLE, online=online)
    assert y.tolist() == [1 + 1 + 0.75 + 0.125 * 1]


def test_retrace_on_a_hand_worked_three_step_case_with_the_greedy_target_policy():
    # E_pi Q: s1 4, s2 6, s3 3. a1 = 1 greedy (c = lambda), a2 = 1 not greedy (c = 0):
    # Q_ret_2 = 3 + 0.5 * 3 = 4.5; Q_ret_1 = 2 + 0.5 * 6 = 5 (cut);
    # Q_ret_0 = 1 + 0.5 * (4 + lambda (5 - Q(s1, 1) = 4))
    batch = sequence([0, 1, 1], [0.9, 0.6, 0.3])
    for lam, expected in ((1.0, 3.5), (0.5, 3.25), (0.0, 3.0)):
        y = multi_step_target(batch, kind="retrace", gamma=GAMMA, target=TABLE, lam=lam)
        assert y.tolist() == [expected]
    # a2 = 0 greedy: Q_ret_1 = 2 + 0.5 * (6 + 4.5 - 6) = 4.25; Q_ret_0 = 1 + 0.5 * 4.25
    y = multi_step_target(sequence([0, 1, 0], [0.9, 0.6, 0.3]), kind="retrace", gamma=GAMMA,
                          target=TABLE, lam=1.0)
    assert y.tolist() == [3.125]


def test_retrace_on_policy_with_lambda_one_is_the_expected_sarsa_n_step_return():
    """pi = mu, lambda = 1: every c is 1 and Q_ret telescopes to sum_k gamma^k r_k +
    gamma^n E_pi Q(s_n) + sum_{1<=t<n} gamma^t (E_pi Q(s_t) - Q(s_t, a_t))."""
    g = torch.Generator().manual_seed(0)
    b, n, n_actions, gamma = 5, 4, 3, 0.9
    rewards = torch.randn(b, n, generator=g, dtype=torch.float64)
    next_q = torch.randn(b, n, n_actions, generator=g, dtype=torch.float64)
    next_pi = torch.rand(b, n, n_actions, generator=g, dtype=torch.float64) + 0.1
    next_pi /= next_pi.sum(-1, keepdim=True)
    next_actions = torch.randint(0, n_actions, (b, n), generator=g)
    next_mu = next_pi.gather(-1, next_actions.unsqueeze(-1)).squeeze(-1)  # mu = pi
    ones = torch.ones(b, n, dtype=torch.bool)
    y = retrace_target(rewards, torch.zeros(b, n, dtype=torch.float64), ones, next_q, next_pi,
                       next_actions, next_mu, gamma=gamma, lam=1.0)
    expected_q = (next_pi * next_q).sum(-1)
    taken_q = next_q.gather(-1, next_actions.unsqueeze(-1)).squeeze(-1)
    closed = sum(gamma ** k * rewards[:, k] for k in range(n)) + gamma ** n * expected_q[:, -1]
    closed = closed + sum(gamma ** t * (expected_q[:, t - 1] - taken_q[:, t - 1])
                          for t in range(1, n))
    torch.testing.assert_close(y, closed)


def test_retrace_truncates_c_at_one_and_cuts_it_where_mu_exceeds_pi():
    # two steps, gamma 0.5: Q(s1) = [2, 4], pi(s1) = [0.8, 0.2], a1 = 1; Q(s2) = [6, 0],
    # pi(s2) = [0.5, 0.5]: E_pi Q(s1) = 2.4, Q_ret_1 = 2 + 0.5 * 3 = 3.5,
    # Q_ret_0 = 1 + 0.5 * (2.4 + c (3.5 - 4)), c = lambda min(1, 0.2 / mu)
    rewards = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    next_q = torch.tensor([[[2.0, 4.0], [6.0, 0.0]]], dtype=torch.float64)
    next_pi = torch.tensor([[[0.8, 0.2], [0.5, 0.5]]], dtype=torch.float64)
    zeros, ones = torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, 2, dtype=torch.bool)
    for mu, lam in ((0.8, 1.0), (0.1, 1.0), (0.8, 0.5), (0.2, 1.0)):
        c = lam * min(1.0, 0.2 / mu)
        y = retrace_target(rewards, zeros, ones, next_q, next_pi, torch.tensor([[1, 0]]),
                           torch.tensor([[mu, 1.0]], dtype=torch.float64), gamma=GAMMA, lam=lam)
        torch.testing.assert_close(y, torch.tensor([1 + 0.5 * (2.4 + c * (3.5 - 4))],
                                                   dtype=torch.float64))
    assert min(1.0, 0.2 / 0.8) == 0.25 and min(1.0, 0.2 / 0.1) == 1.0  # the two regimes


def test_an_episode_end_inside_the_window_stops_the_targets():
    bootstrap = torch.tensor([[10.0, 20.0, 30.0]], dtype=torch.float64)
    rewards = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    cut = torch.tensor([[True, True, False]])
    # terminated at step 1: r0 + gamma r1, no bootstrap; truncated at step 1: bootstrap from
    # step 1's final observation
    terminated = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    assert n_step_target(rewards, terminated, cut, bootstrap, gamma=GAMMA).tolist() == [2.0]
    assert n_step_target(rewards, 0 * terminated, cut, bootstrap,
                         gamma=GAMMA).tolist() == [1 + 1 + 0.25 * 20]
    # retrace, greedy pi = one-hot of the larger value, a1 = 1 greedy at s1 (c = 1)
    next_q = torch.tensor([[[2.0, 4.0], [6.0, 0.0], [9.0, 9.0]]], dtype=torch.float64)
    pi = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]], dtype=torch.float64)
    actions, mu = torch.tensor([[1, 0, 0]]), torch.full((1, 3), 0.5, dtype=torch.float64)
    y = retrace_target(rewards, terminated, cut, next_q, pi, actions, mu, gamma=GAMMA, lam=1.0)
    assert y.tolist() == [1 + 0.5 * (4 + (2 - 4))]
    y = retrace_target(rewards, 0 * terminated, cut, next_q, pi, actions, mu, gamma=GAMMA,
                       lam=1.0)
    assert y.tolist() == [1 + 0.5 * (4 + (2 + 0.5 * 6 - 4))]


def test_replay_sequences_follow_each_environment_and_stop_at_episode_ends_and_overwrites():
    """Two environments, five add() calls into a ring of 8 (calls 0 and 1 partly overwritten
    by call 4): rewards 10 call + env; env 0 terminates at call 1, env 1 is truncated at call
    2."""
    buffer = ReplayBuffer(8, 1, dtype=torch.float64)
    for call in range(5):
        ids = torch.tensor([10.0 * call, 10.0 * call + 1], dtype=torch.float64)
        buffer.add(ids[:, None], torch.tensor([0, 1]), ids, ids[:, None] + 0.5,
                   torch.tensor([float(call == 1), 0.0]),
                   truncated=torch.tensor([False, call == 2]),
                   behaviour_probs=ids / 100)
    batch = buffer.sample_sequences(2000, 3, torch.Generator().manual_seed(1))
    ends = {(0, 1), (1, 2)}  # (env, call) whose episode ended
    seen = set()
    for rewards, valid, mu, actions in zip(batch["rewards"].tolist(), batch["valid"].tolist(),
                                           batch["behaviour_probs"].tolist(),
                                           batch["actions"].tolist(), strict=True):
        call, env = divmod(int(rewards[0]), 10)
        seen.add((call, env))
        expected = [True]
        for k in range(1, 3):
            expected.append(expected[-1] and call + k <= 4 and (env, call + k - 1) not in ends)
        assert valid == expected, (call, env)
        for k in range(3):
            if valid[k]:
                assert rewards[k] == 10 * (call + k) + env and actions[k] == env
                assert math.isclose(mu[k], rewards[k] / 100)
    assert seen == {(c, e) for c in (1, 2, 3, 4) for e in (0, 1)}  # call 0 overwritten
    # the same draw as sample(): the one-step batch is the sequences' first column
    one = buffer.sample(50, torch.Generator().manual_seed(3))
    seq = buffer.sample_sequences(50, 3, torch.Generator().manual_seed(3))
    assert torch.equal(one[2], seq["rewards"][:, 0]) and torch.equal(one[0], seq["obs"][:, 0])


def test_epsilon_greedy_stores_the_behaviour_probability_of_each_action():
    q_net = nn.Linear(2, 3)
    obs = torch.randn(500, 2, generator=torch.Generator().manual_seed(0))
    actions, probs = act_with_probs(q_net, obs, 0.3, torch.Generator().manual_seed(5))
    assert torch.equal(actions, act(q_net, obs, 0.3, torch.Generator().manual_seed(5)))
    greedy = q_net(obs).argmax(dim=1)
    expected = torch.where(actions == greedy, torch.tensor(0.8), torch.tensor(0.1))
    torch.testing.assert_close(probs, expected)
    assert 0 < int((actions != greedy).sum()) < 500


def test_with_one_step_every_target_is_the_one_step_run_and_with_three_another():
    params = {**FAST, "learning_starts": 100, "hidden": [16]}
    base, _ = run(params, {}, steps=30)
    for target in ("n_step", "retrace"):
        same, _ = run({**params, "target": target, "n_steps": 1}, {}, steps=30)
        assert (same["train/td_loss"], same["train/q_mean"]) == (
            base["train/td_loss"], base["train/q_mean"])
        other, _ = run({**params, "target": target}, {}, steps=30)
        assert other["train/td_loss"] != base["train/td_loss"]
    assert TASK.Params().target == "one_step"


def test_retrace_refuses_double_dqn():
    try:
        TASK.Params(target="retrace", double_dqn=True)
    except ValueError as error:
        assert "double_dqn" in str(error)
    else:
        raise AssertionError("accepted")


def test_workbench_run_dqn_cartpole_with_retrace(tmp_path):
    out = run_cli("run", "dqn-cartpole", "target=retrace", "n_steps=4", "retrace_lambda=0.9",
                  "learning_starts=500", "train_frequency=4", "num_envs=2", "batch_size=32",
                  "hidden=[32]", "--samples", "3000", "--json", "--device", "cpu",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["env_steps"], result["steps"]) == (3000, (3000 - 500) // 4)
    assert math.isfinite(result["train/td_loss"]) and not result["diverged"]
