"""The control testbed's loop: PPO and REINFORCE on batched environments with the four slots."""

from __future__ import annotations

import math

import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget, get_task
from workbench.testbeds.control.policy import ActorCritic
from workbench.testbeds.control.rollout import ADVANTAGE_INPUTS, collect
from workbench.testbeds.envs import make


def method(family: str, name: str, **params):
    return registry.get(family, name)(**params)


def run_task(task_name: str, budget: Budget, seed: int = 0, methods=None, **params):
    task = get_task(task_name)
    chosen = {"step_size": method("step_size", "adam_schedule")}
    for slot, default in task.default_methods.items():
        chosen[slot] = method(slot, default)
    chosen.update(methods or {})
    logged: list[tuple[int, dict]] = []
    result = task().run(task.Params(**params), chosen, seed=seed, device=torch.device("cpu"),
                        budget=budget, log=lambda step, m: logged.append((step, dict(m))))
    return result, logged


# ---- adam_schedule ------------------------------------------------------------------------

@pytest.mark.parametrize("shape, decoupled", [("linear", False), ("cosine", True),
                                              ("wsd", False), ("constant", True)])
def test_adam_schedule_matches_torch_adam_with_lambda_lr(shape, decoupled):
    total = 30
    m = method("step_size", "adam_schedule", lr=0.05, shape=shape, decoupled=decoupled,
               weight_decay=0.1, warmup_fraction=0.2, final_fraction=0.1)
    target = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)

    def trajectory(make_optimizer, scheduler=None):
        x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        opt = make_optimizer([x])
        sched = scheduler(opt) if scheduler else None
        points = []
        for _ in range(total):
            def closure():
                opt.zero_grad()
                loss = ((x - target) ** 4).sum()
                loss.backward()
                return loss
            opt.step(closure)
            if sched:
                sched.step()
            points.append(x.detach().clone())
        return torch.stack(points)

    ours = trajectory(lambda p: m.build(p, {"total_steps": total}))
    base = torch.optim.AdamW if decoupled else torch.optim.Adam
    reference = trajectory(
        lambda p: base(p, lr=0.05, eps=1e-5, weight_decay=0.1),
        lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda k: m.multiplier(k, total)))
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-12)


def test_adam_schedule_linear_is_cleanrl_annealing():
    m = method("step_size", "adam_schedule", lr=1.0)
    assert [m.multiplier(k, 4) for k in range(4)] == [1.0, 0.75, 0.5, 0.25]


# ---- rollouts ----------------------------------------------------------------------------

def test_rollout_bootstraps_truncations_from_the_final_observation():
    env = make("CartPole-v1", 6, seed=3, dtype=torch.float64, max_episode_steps=5)
    torch.manual_seed(0)
    agent = ActorCritic(env.obs_dim, n_actions=env.n_actions).double()
    steps = []
    step = env.step
    env.step = lambda actions: steps.append(step(actions)) or steps[-1]
    rollout, _ = collect(env, agent, env.reset(seed=3), 12)
    truncated = rollout.dones & ~rollout.terminated
    assert truncated.any()
    with torch.no_grad():
        for t, n in truncated.nonzero().tolist():
            final = steps[t].final_obs[n]
            assert not torch.equal(final, steps[t].obs[n])  # the env reset after the episode
            bootstrap = float(agent.value(final[None])[0])
            assert math.isclose(rollout.next_values[t, n], bootstrap, rel_tol=1e-12)
            if t + 1 < 12:  # the next stored value is the reset state's, not the bootstrap
                assert rollout.next_values[t, n] != rollout.values[t + 1, n]
    not_done = ~rollout.dones[:-1]
    assert torch.equal(rollout.next_values[:-1][not_done], rollout.values[1:][not_done])
    assert torch.equal(rollout.next_values[-1], rollout.last_value)
    inputs = rollout.as_advantage_inputs()
    assert torch.equal(inputs["next_values"], rollout.next_values.T)
    assert inputs["values"].shape == (6, 13)


# ---- learning ----------------------------------------------------------------------------

def test_ppo_on_cartpole_learns_well_above_a_random_policy():
    """A random policy's CartPole return is about 22; a short PPO run must clear 100."""
    result, logged = run_task("cartpole", Budget(steps=1000, samples=60_000), seed=1)
    returns = [m["train/return_recent"] for _, m in logged if "train/return_recent" in m]
    assert returns[0] < 40
    assert result["train/return_recent"] > 100, returns[-5:]
    assert not result["diverged"]


def test_every_update_logs_the_metrics_the_issue_names():
    _, logged = run_task("cartpole", Budget(steps=3), num_envs=16, rollout_len=32)
    names = set(logged[-1][1])
    for name in ["train/return", "train/episode_length", "train/entropy", "train/approx_kl",
                 "train/clip_frac", "train/value_loss", "train/explained_variance",
                 "adv/mean", "adv/std", "train/grad_norm", "method/step_size",
                 "method/entropy_coef", "cost/env_steps", "time/env_steps_per_second"]:
        assert name in names, name
    assert [step for step, _ in logged] == [1, 2, 3]
    assert logged[-1][1]["cost/env_steps"] == 3 * 16 * 32


def test_reinforce_with_reward_to_go_runs_and_improves():
    slots = {"advantage": method("advantage", "reward_to_go"),
             "step_size": method("step_size", "adam_schedule", lr=0.01)}
    result, logged = run_task("cartpole", Budget(steps=1000, samples=60_000), seed=0,
                              methods=slots, algorithm="reinforce", num_envs=16,
                              rollout_len=128)
    returns = [m["train/return_recent"] for _, m in logged if "train/return_recent" in m]
    assert returns[0] < 40
    assert returns[-1] > 2 * returns[0], returns[::5]
    assert all(m["train/approx_kl"] > 0 for _, m in logged)  # measured after the step


@pytest.mark.parametrize("axis", ["rollout_len", "num_envs"])
def test_batch_size_slot_changes_the_named_axis(axis):
    ramp = method("batch_size", "linear_ramp", start_size=128, increment=128, ramp_samples=1024)
    _, logged = run_task("cartpole", Budget(steps=12, samples=20_000), methods={
        "batch_size": ramp}, num_envs=8, rollout_len=64, batch_axis=axis)
    sizes = [(m["batch/num_envs"], m["batch/rollout_len"]) for _, m in logged]
    fixed = 0 if axis == "rollout_len" else 1
    assert len({s[fixed] for s in sizes}) == 1
    assert len({s[1 - fixed] for s in sizes}) > 1


def test_pendulum_and_gymnasium_backend_run():
    result, _ = run_task("pendulum", Budget(steps=2), num_envs=4, rollout_len=16)
    assert math.isfinite(result["train/value_loss"])
    result, _ = run_task("control", Budget(steps=2), env="CartPole-v1", backend="gymnasium",
                         num_envs=2, rollout_len=16)
    assert math.isfinite(result["train/value_loss"])


def test_the_task_provides_exactly_the_advantage_inputs_its_rollout_gives():
    """A method needing an input the loop never gives (mc_values) is refused by the spec
    check, not left to crash in the first update."""
    env = make("CartPole-v1", 2, seed=0)
    agent = ActorCritic(env.obs_dim, n_actions=env.n_actions, hidden=4, layers=1)
    rollout, _ = collect(env, agent, env.reset(seed=0), 3)
    given = set(rollout.as_advantage_inputs())
    task = get_task("cartpole")
    from workbench.families import advantage

    assert task.provides & set(advantage.REQUIRABLE) == given == ADVANTAGE_INPUTS
    spo = registry.get("advantage", "spo_chain")
    assert not spo.requirements(spo().params) <= task.provides


# ---- policy_lag: an asynchronous actor's stale policy -------------------------------------

def test_the_lagged_policy_acts_with_the_parameters_of_k_updates_before():
    from workbench.testbeds.control.loop import LaggedPolicy, learner_log_probs

    env = make("CartPole-v1", 3, seed=0, dtype=torch.float64)
    torch.manual_seed(0)
    agent = ActorCritic(env.obs_dim, n_actions=env.n_actions, hidden=8, layers=1).double()
    lagged = LaggedPolicy(agent, 2)
    initial = [p.detach().clone() for p in agent.parameters()]
    seen = []
    for update in range(4):
        behaviour = lagged.step()
        seen.append([p.detach().clone() for p in behaviour.parameters()])
        with torch.no_grad():  # an update moves every parameter
            for p in agent.parameters():
                p.add_(0.1 * (update + 1))
    # updates 0, 1, 2 act with the initial parameters (0, 1: none older), update 3 with those
    # after update 0
    for k in range(3):
        assert all(torch.equal(a, b) for a, b in zip(seen[k], initial, strict=True))
    assert all(torch.equal(a, b + 0.1) for a, b in zip(seen[3], initial, strict=True))
    rollout, _ = collect(env, agent, env.reset(seed=0), 5, torch.Generator().manual_seed(1),
                         behaviour=behaviour)
    obs, actions = rollout.obs.flatten(0, 1), rollout.actions.flatten(0, 1)
    with torch.no_grad():
        assert torch.allclose(rollout.log_probs.flatten(), behaviour.evaluate(obs, actions)[0])
        assert torch.allclose(rollout.values.flatten(), agent.value(obs))  # the learner's critic
        target = learner_log_probs(agent, rollout)
        assert torch.allclose(target.flatten(), agent.evaluate(obs, actions)[0])
    assert not torch.allclose(target, rollout.log_probs)
    rollout.target_log_probs = target
    batch = rollout.advantage_batch()
    assert torch.equal(batch.old_log_probs, rollout.log_probs.T)
    assert torch.equal(batch.target_log_probs, target.T)


def test_on_policy_the_target_log_probs_are_the_behaviours():
    env = make("CartPole-v1", 2, seed=0)
    agent = ActorCritic(env.obs_dim, n_actions=env.n_actions, hidden=4, layers=1)
    rollout, _ = collect(env, agent, env.reset(seed=0), 3)
    batch = rollout.advantage_batch()
    assert torch.equal(batch.target_log_probs, batch.old_log_probs)
    assert torch.equal(batch.old_log_probs, rollout.log_probs.T)


@pytest.mark.parametrize("advantage, evaluated", [("vtrace", 4), ("gae", 0)])
def test_a_policy_lag_evaluates_the_learner_only_for_a_method_that_reads_it(
        monkeypatch, advantage, evaluated):
    from workbench.testbeds.control import loop

    calls = []
    original = loop.learner_log_probs
    monkeypatch.setattr(loop, "learner_log_probs",
                        lambda *a: calls.append(1) or original(*a))
    result, logged = run_task("cartpole", Budget(steps=4),
                              methods={"advantage": method("advantage", advantage)},
                              policy_lag=2, num_envs=4, rollout_len=16)
    assert result["steps"] == 4 and not result["diverged"]
    assert all(math.isfinite(m["train/value_loss"]) for _, m in logged)
    assert len(calls) == evaluated


def test_a_policy_lag_runs_on_the_seed_axis():
    # the parity with the one-at-a-time loop: tests/test_control_seed_axis.py
    task = get_task("cartpole")
    assert task.seed_axis_problem(task.Params()) is None
    assert task.seed_axis_problem(task.Params(policy_lag=2)) is None
