"""The value-based testbed (``dqn-cartpole``): its pieces on hand-worked cases, a learning run,
the batch-size slot as the replay batch size, and the command line."""

import json
import math

import pytest
import torch
from torch import nn

from tests.conftest import run_cli
from workbench import registry
from workbench.common.validation import SpecError
from workbench.spec import sweep as spec
from workbench.testbeds import TASKS, Budget
from workbench.testbeds.value import dqn
from workbench.testbeds.value.dqn import (
    ReplayBuffer,
    epsilon_at,
    td_loss,
    td_target,
    update_target,
)

TASK = TASKS["dqn-cartpole"]
#: A small configuration that learns CartPole in 20,000 environment steps (README: value).
FAST = {"num_envs": 4, "learning_starts": 1000, "train_frequency": 4,
        "target_network_frequency": 250, "batch_size": 64, "exploration_fraction": 0.3,
        "hidden": [64, 64]}


def run(params, methods, *, samples=None, steps=None, seed=0):
    chosen = {"step_size": registry.get("step_size", "adam")(),
              "batch_size": registry.get("batch_size", "constant")()}
    chosen.update(methods)
    history = []
    budget = Budget(**{k: v for k, v in (("samples", samples), ("steps", steps)) if v})
    out = TASK().run(TASK.Params(**params), chosen, seed=seed, device=torch.device("cpu"),
                     budget=budget, log=lambda step, m: history.append((step, dict(m))))
    return out, history


class Table(nn.Module):
    """Q(s, .) = rows[s], s the observation's first component (an index)."""

    def __init__(self, rows):
        super().__init__()
        self.rows = nn.Parameter(torch.tensor(rows, dtype=torch.float64))

    def forward(self, obs):
        return self.rows[obs[:, 0].long()]


# ---- replay buffer ------------------------------------------------------------------------------

def transitions(first, count):
    """``count`` transitions numbered first, first + 1, ...: every field holds the number."""
    ids = torch.arange(first, first + count, dtype=torch.float64)
    return ids[:, None].repeat(1, 3), ids.long(), ids, ids[:, None].repeat(1, 3) + 0.5, ids % 2


def test_the_replay_buffer_keeps_the_last_capacity_transitions_in_a_ring():
    buffer = ReplayBuffer(5, 3, dtype=torch.float64)
    buffer.add(*transitions(0, 3))
    assert (buffer.size, buffer.position) == (3, 3)
    buffer.add(*transitions(3, 4))  # 7 added: 0 and 1 overwritten by 5 and 6
    assert (buffer.size, buffer.position) == (5, 2)
    assert sorted(buffer.rewards.tolist()) == [2.0, 3.0, 4.0, 5.0, 6.0]
    rows = buffer.rewards.long()
    assert torch.equal(buffer.actions, rows)  # each row one transition, fields aligned
    assert torch.equal(buffer.obs[:, 0], buffer.rewards)
    assert torch.equal(buffer.next_obs[:, 0], buffer.rewards + 0.5)
    assert torch.equal(buffer.terminated, buffer.rewards % 2)


def test_replay_sampling_is_uniform_over_the_stored_transitions_and_seeded():
    buffer = ReplayBuffer(100, 3, dtype=torch.float64)
    buffer.add(*transitions(0, 4))  # four stored of 100 places: only those are drawn
    draws = 40_000
    _, actions, rewards, _, _ = buffer.sample(draws, torch.Generator().manual_seed(0))
    assert set(actions.tolist()) == {0, 1, 2, 3} and torch.equal(actions.double(), rewards)
    counts = torch.bincount(actions, minlength=4).double() / draws
    # each 1/4 +- 5 standard deviations (sqrt(p (1 - p) / n) = 0.0022)
    assert torch.allclose(counts, torch.full((4,), 0.25, dtype=torch.float64), atol=0.011), counts
    again = buffer.sample(50, torch.Generator().manual_seed(0))[1]
    assert torch.equal(again, buffer.sample(50, torch.Generator().manual_seed(0))[1])
    assert not torch.equal(again, buffer.sample(50, torch.Generator().manual_seed(1))[1])
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(3, 3).sample(1)


# ---- TD target, loss, target update, exploration -----------------------------------------------

# next states 0, 1, 0 with rewards 1, 0.5, 2; the third transition terminated; gamma 0.9
TARGET_Q = [[1.0, 3.0], [2.0, -1.0]]  # Q_target(s', .)
ONLINE_Q = [[5.0, 0.0], [0.0, 4.0]]  # Q_online(s', .): its argmax disagrees with the target's
NEXT_OBS = torch.tensor([[0.0], [1.0], [0.0]], dtype=torch.float64)
REWARDS = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
TERMINATED = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)


def test_the_td_target_bootstraps_from_the_target_networks_best_action():
    y = td_target(REWARDS, NEXT_OBS, TERMINATED, gamma=0.9, target=Table(TARGET_Q))
    # 1 + 0.9 * max(1, 3); 0.5 + 0.9 * max(2, -1); 2 (terminated: no bootstrap)
    assert torch.allclose(y, torch.tensor([3.7, 2.3, 2.0], dtype=torch.float64))


def test_double_dqn_picks_the_action_online_and_values_it_with_the_target_network():
    y = td_target(REWARDS, NEXT_OBS, TERMINATED, gamma=0.9, target=Table(TARGET_Q),
                  online=Table(ONLINE_Q))
    # a* = argmax online: 0 at s' = 0, 1 at s' = 1; valued by the target: 1 and -1
    assert torch.allclose(y, torch.tensor([1.9, -0.4, 2.0], dtype=torch.float64))


def test_td_losses_on_a_hand_worked_batch():
    q, y = torch.tensor([1.5, 4.0]), torch.tensor([1.0, 1.0])  # errors 0.5 and 3
    assert td_loss(q, y, "mse").item() == pytest.approx((0.25 + 9.0) / 2)
    # Huber, delta 1: 0.5 * 0.5^2 (inside), 1 * (3 - 0.5) (outside)
    assert td_loss(q, y, "huber", 1.0).item() == pytest.approx((0.125 + 2.5) / 2)
    assert td_loss(q, y, "huber", 4.0).item() == pytest.approx((0.125 + 4.5) / 2)
    with pytest.raises(ValueError, match="mse"):
        td_loss(q, y, "l1")


def test_the_target_update_copies_or_averages_the_online_parameters():
    online, target = Table([[1.0, 2.0]]), Table([[5.0, -2.0]])
    update_target(target, online, 0.25)  # 0.25 online + 0.75 target
    assert torch.allclose(target.rows, torch.tensor([[4.0, -1.0]], dtype=torch.float64))
    update_target(target, online, 1.0)
    assert torch.equal(target.rows, online.rows) and target.rows is not online.rows


def test_epsilon_falls_linearly_then_stays():
    at = [epsilon_at(t, start_e=1.0, end_e=0.05, duration=100) for t in (0, 50, 100, 500)]
    assert at == pytest.approx([1.0, 0.525, 0.05, 0.05])
    assert epsilon_at(0, start_e=1.0, end_e=0.1, duration=0) == 0.1


def test_epsilon_greedy_acts_greedily_at_zero_and_at_random_at_one():
    q_net = Table([[0.0, 1.0], [1.0, 0.0]])
    obs = torch.tensor([[0.0], [1.0]] * 500, dtype=torch.float64)
    greedy = dqn.act(q_net, obs, 0.0, torch.Generator().manual_seed(0))
    assert torch.equal(greedy, torch.tensor([1, 0] * 500))
    random = dqn.act(q_net, obs, 1.0, torch.Generator().manual_seed(0))
    assert 0.4 < random.double().mean().item() < 0.6  # about half the actions are 1


# ---- the loop ------------------------------------------------------------------------------------

def test_updates_start_after_learning_starts_and_follow_train_frequency():
    out, history = run({**FAST, "num_envs": 2, "learning_starts": 100, "train_frequency": 3,
                        "batch_size": 8, "hidden": [8]}, {}, samples=400)
    assert out["env_steps"] == 400 and out["steps"] == (400 - 100) // 3
    assert [step for step, _ in history] == list(range(1, 101))
    # the update after e env steps is number floor((e - 100) / 3) or earlier (two per step)
    for step, m in history:
        assert step <= (m["cost/env_steps"] - 100) // 3
    assert all(m["cost/samples"] == m["cost/env_steps"] for _, m in history)


def test_a_budget_in_wall_seconds_ends_the_run():
    chosen = {"step_size": registry.get("step_size", "adam")(),
              "batch_size": registry.get("batch_size", "constant")()}
    out = TASK().run(TASK.Params(**{**FAST, "learning_starts": 0, "hidden": [8]}), chosen,
                     seed=0, device=torch.device("cpu"), budget=Budget(wall_seconds=0.3),
                     log=lambda step, m: None)
    # no step or sample limit: only the clock ended it (after the first step's update)
    assert 1 <= out["steps"] < Budget(wall_seconds=0.3).steps and not out["diverged"]


def test_the_target_network_is_updated_every_k_environment_steps_after_learning_starts(
        monkeypatch):
    from workbench.testbeds.value import loop

    calls = []
    monkeypatch.setattr(loop, "update_target",
                        lambda target, online, tau: calls.append(tau))
    run({**FAST, "num_envs": 2, "learning_starts": 100, "train_frequency": 1,
         "target_network_frequency": 50, "tau": 0.5, "batch_size": 8, "hidden": [8]}, {},
        samples=400)
    assert calls == [0.5] * ((400 - 100) // 50)


def test_epsilon_is_logged_as_it_decays_over_exploration_steps():
    _, history = run({**FAST, "num_envs": 1, "learning_starts": 0, "train_frequency": 1,
                      "batch_size": 4, "hidden": [8], "exploration_steps": 50,
                      "start_e": 1.0, "end_e": 0.1}, {}, steps=80)
    for step, m in history:  # the update after env step e acted with epsilon(e - 1)
        assert m["train/epsilon"] == pytest.approx(max(0.1, 1.0 - 0.9 * (step - 1) / 50))


def test_the_replay_batch_size_follows_a_batch_size_schedule(monkeypatch):
    drawn = []
    original = ReplayBuffer.sample

    def sample(self, batch_size, generator=None):
        drawn.append(batch_size)
        return original(self, batch_size, generator)

    monkeypatch.setattr(ReplayBuffer, "sample", sample)
    ramp = registry.get("batch_size", "linear_ramp")(
        trigger="steps", start_size=16, increment=16, ramp_steps=21)
    _, history = run({**FAST, "learning_starts": 200, "hidden": [16]},
                     {"batch_size": ramp}, steps=30)
    logged = [int(m["batch/size"]) for _, m in history]
    # Megatron's ramp to the task's 64 in 3 increments over 21 updates: 7 updates at each size
    assert logged == [16] * 7 + [32] * 7 + [48] * 7 + [64] * 9
    assert drawn == logged  # what the loop replayed is what it logged


def test_a_replay_batch_larger_than_the_buffer_is_clamped_to_its_capacity():
    big = registry.get("batch_size", "constant")(size=5000)
    _, history = run({**FAST, "learning_starts": 100, "buffer_size": 300, "hidden": [8]},
                     {"batch_size": big}, steps=3)
    assert [m["batch/size"] for _, m in history] == [300.0] * 3


def test_the_step_size_slot_steps_the_q_network():
    constant = registry.get("step_size", "constant")(lr=0.0)  # lr 0: Q never moves
    out, history = run({**FAST, "learning_starts": 100, "hidden": [16]},
                       {"step_size": constant}, steps=20)
    assert len(history) == 20 and all(m["method/step_size"] == 0.0 for _, m in history)
    moved, steps = run({**FAST, "learning_starts": 100, "hidden": [16]},
                       {"step_size": registry.get("step_size", "constant")(lr=0.05)}, steps=20)
    assert all(m["method/step_size"] == 0.05 for _, m in steps)
    assert moved["train/td_loss"] != out["train/td_loss"]  # same draws, other parameters


def test_dqn_learns_cartpole():
    """Mean return over the last 100 episodes (epsilon-greedy, epsilon 0.05 at the end) well
    above a random policy's ~22; README "Value-based testbed" gives the numbers over seeds."""
    out, history = run(FAST, {"step_size": registry.get("step_size", "adam")(lr=2.5e-3)},
                       samples=20_000)
    first = next(m["train/return_recent"] for _, m in history if "train/return_recent" in m)
    assert first < 40  # it starts at a random policy's level
    assert out["train/return_recent"] > 100, out["train/return_recent"]
    assert not out["diverged"] and out["env_steps"] == 20_000


def test_the_same_seed_gives_the_same_run_and_double_dqn_another():
    params = {**FAST, "learning_starts": 100, "hidden": [16]}
    a, _ = run(params, {}, steps=30)
    b, _ = run(params, {}, steps=30)
    assert a["train/td_loss"] == b["train/td_loss"] and a["train/q_mean"] == b["train/q_mean"]
    double, _ = run({**params, "double_dqn": True, "loss": "huber"}, {}, steps=30)
    assert double["train/td_loss"] != a["train/td_loss"]


# ---- the task's declarations, the spec and the command line ------------------------------------

def test_the_task_has_no_entropy_or_advantage_slot():
    assert TASK.slots == ("step_size", "batch_size")
    document = {"task": {"name": "dqn-cartpole"}, "budget": {"samples": 2000},
                "methods": {"step_size": ["adam"], "entropy": ["constant"]}}
    with pytest.raises(SpecError, match="entropy"):
        spec.check(document, "dqn.yaml")
    with pytest.raises(ValueError, match="end_e"):
        TASK.Params(start_e=0.1, end_e=0.5)


def test_workbench_run_dqn_cartpole(tmp_path):
    out = run_cli("run", "dqn-cartpole", "learning_starts=100", "train_frequency=2",
                  "num_envs=2", "batch_size=32", "double_dqn=true", "loss=huber",
                  "--samples", "300", "--json", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["env_steps"], result["steps"]) == (300, (300 - 100) // 2)
    assert result["batch/size"] == 32 and math.isfinite(result["train/td_loss"])
    assert list(tmp_path.iterdir()) == []
