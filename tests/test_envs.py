"""Batched environments against Gymnasium 1.x's reference implementations, step for step.

Each torch environment runs next to N Gymnasium environments (``gymnasium.make``, so with its
``TimeLimit``) on the same actions; after every Gymnasium reset the torch environment copies the
new state with ``set_state`` and is otherwise left to its own dynamics.  Observations are
compared with the float64 observation of Gymnasium's float64 state (its own observations are
float32), rewards, terminated, truncated (ours is False where terminated, Gymnasium's TimeLimit
sets both), final observations and episode returns and lengths.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from workbench.testbeds.envs import ENV_IDS, GymVectorEnv, make

# float64 observation of Gymnasium's (float64) state, written from each environment's _get_obs
REFERENCE_OBS = {
    "CartPole-v1": lambda s: np.asarray(s, dtype=np.float64),
    "MountainCar-v0": lambda s: np.asarray(s, dtype=np.float64),
    "Acrobot-v1": lambda s: np.array([math.cos(s[0]), math.sin(s[0]), math.cos(s[1]),
                                      math.sin(s[1]), s[2], s[3]]),
    "Pendulum-v1": lambda s: np.array([math.cos(s[0]), math.sin(s[0]), s[1]]),
}
# reset ranges of the state components (Gymnasium's defaults)
RESET_RANGES = {
    "CartPole-v1": ([-0.05] * 4, [0.05] * 4),
    "MountainCar-v0": ([-0.6, 0.0], [-0.4, 0.0]),
    "Acrobot-v1": ([-0.1] * 4, [0.1] * 4),
    "Pendulum-v1": ([-math.pi, -1.0], [math.pi, 1.0]),
}


def random_actions(rng, state, env):
    if env.discrete:
        return rng.integers(0, env.n_actions, env.num_envs)
    # dyadic torques in [-3, 3] (clipping exercised): 3u and u^2 are exact in float32, where
    # Gymnasium computes them (its action space is float32)
    return rng.integers(-192, 193, (env.num_envs, 1)) / 64.0


def acrobot_pump(rng, state, env):
    """Torque against the first joint's velocity, 20% random: swings up in ~100 steps."""
    actions = np.where(state[:, 2] > 0, 0, 2)
    return np.where(rng.random(env.num_envs) < 0.2, rng.integers(0, 3, env.num_envs), actions)


def mountain_car_pump(rng, state, env):
    """Push along the velocity, 10% random: reaches the goal in ~100 steps."""
    actions = np.where(state[:, 1] > 0, 2, 0)
    return np.where(rng.random(env.num_envs) < 0.1, rng.integers(0, 3, env.num_envs), actions)


# env id -> (time limit making both terminations and truncations frequent, policy).  Acrobot is
# chaotic: torch's and numpy's sin/cos differ in the last bit now and then, and over 500-step
# episodes that grows to ~1e-7; within its 110-step episodes here it stays below 1e-12.
SETTINGS = {
    "CartPole-v1": (30, random_actions),
    "MountainCar-v0": (120, mountain_car_pump),
    "Acrobot-v1": (110, acrobot_pump),
    "Pendulum-v1": (60, random_actions),
}


def gym_state(env) -> np.ndarray:
    return np.asarray(env.unwrapped.state, dtype=np.float64)


def drive_against_gymnasium(env_id, *, steps, dtype, atol, num_envs=4, seed=0):
    """Run both side by side, asserting agreement at every step; returns episode counts."""
    limit, policy = SETTINGS[env_id]
    reference = [gym.make(env_id, max_episode_steps=limit) for _ in range(num_envs)]
    for i, env in enumerate(reference):
        env.reset(seed=seed + i)
    ours = make(env_id, num_envs, dtype=dtype, max_episode_steps=limit, seed=seed)
    obs = ours.set_state(torch.as_tensor(np.stack([gym_state(e) for e in reference])),
                         elapsed=torch.zeros(num_envs, dtype=torch.int32))
    observe = REFERENCE_OBS[env_id]
    np.testing.assert_allclose(obs.numpy(), np.stack([observe(gym_state(e)) for e in reference]),
                               rtol=0, atol=atol)
    rng = np.random.default_rng(seed)
    returns, lengths = np.zeros(num_envs), np.zeros(num_envs)
    terminations = truncations = 0
    for t in range(steps):
        actions = policy(rng, ours.get_state().numpy(), ours)
        step = ours.step(torch.as_tensor(actions, dtype=torch.long if ours.discrete else dtype))
        got = {k: v.numpy() for k, v in vars(step).items()}
        state = ours.get_state()
        reset = False
        for i, env in enumerate(reference):
            action = actions[i] if ours.discrete else actions[i].astype(np.float32)
            gym_obs, reward, terminated, truncated, _ = env.step(action)
            where = f"{env_id} step {t} env {i}"
            expected = observe(gym_state(env))
            np.testing.assert_allclose(got["final_obs"][i], expected, rtol=0, atol=atol,
                                       err_msg=where)
            np.testing.assert_allclose(got["final_obs"][i], gym_obs, rtol=2e-6,
                                       atol=max(atol, 1e-6), err_msg=where)  # its float32 obs
            assert abs(got["reward"][i] - reward) <= atol, where
            assert got["terminated"][i] == terminated, where
            assert got["truncated"][i] == (truncated and not terminated), where
            returns[i] += reward
            lengths[i] += 1
            if terminated or truncated:
                terminations += terminated
                truncations += truncated and not terminated
                assert got["episode_length"][i] == lengths[i], where
                assert abs(got["episode_return"][i] - returns[i]) <= atol * lengths[i], where
                returns[i] = lengths[i] = 0.0
                env.reset()
                state[i] = torch.as_tensor(gym_state(env))
                reset = True
            else:
                assert np.isnan(got["episode_return"][i]) and np.isnan(got["episode_length"][i])
                np.testing.assert_array_equal(got["obs"][i], got["final_obs"][i], err_msg=where)
                np.testing.assert_allclose(state[i].numpy(), gym_state(env), rtol=0, atol=atol,
                                           err_msg=where)
        if reset:
            obs = ours.set_state(state)
            np.testing.assert_allclose(
                obs.numpy(), np.stack([observe(gym_state(e)) for e in reference]), rtol=0,
                atol=atol)
    return terminations, truncations


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_float64_matches_gymnasium_step_for_step(env_id):
    terminations, truncations = drive_against_gymnasium(
        env_id, steps=1000, dtype=torch.float64, atol=1e-9)
    assert truncations >= 4
    if env_id != "Pendulum-v1":  # Pendulum never terminates
        assert terminations >= 4


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_float32_agrees_with_gymnasium_over_a_short_horizon(env_id):
    drive_against_gymnasium(env_id, steps=60, dtype=torch.float32, atol=1e-4)


# states at the edges of each environment's rules (thresholds, walls, wrapping, clipping)
EDGE_STATES = {
    "CartPole-v1": [(2.39, 1.0, 0.0, 0.0), (-2.39, -1.0, 0.1, 0.5), (0.0, 0.0, 0.2094, 0.1),
                    (0.0, 0.0, -0.2094, -0.1), (2.4, 0.0, 0.0, 0.0), (0.0, 0.0, 0.3, -2.0)],
    "Acrobot-v1": [(3.1, 3.1, 4.0, 9.0), (-3.1, -3.1, -4.0, -9.0), (0.0, 0.0, 12.5, 28.2),
                   (0.0, 0.0, -12.5, -28.2), (3.0, 0.3, 0.5, 0.5), (math.pi, -math.pi, 0.0, 0.0)],
    "MountainCar-v0": [(0.55, -0.01), (0.49, 0.02), (0.4999, 0.0), (-1.19, -0.05),
                       (-1.2, 0.0), (0.0, 0.07)],
    "Pendulum-v1": [(3.1, 7.9), (-3.1, -7.9), (7.0, 0.0), (-9.5, 1.0), (0.0, 0.0),
                    (math.pi, 8.0)],
}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_edge_states_match_gymnasium(env_id):
    """One step from states at the thresholds, walls and bounds, with every action."""
    reference = gym.make(env_id).unwrapped
    reference.reset(seed=0)
    ours = make(env_id, 1, dtype=torch.float64)
    actions = range(ours.n_actions) if ours.discrete else (-3.0, -2.0, -0.5, 1.25, 2.0, 3.0)
    for state in EDGE_STATES[env_id]:
        for action in actions:
            reference.state = np.array(state, dtype=np.float64)
            reference.steps_beyond_terminated = None  # CartPole: a fresh episode's step
            ours.set_state(torch.tensor([state], dtype=torch.float64),
                           torch.zeros(1, dtype=torch.int32))
            _, reward, terminated, _, _ = reference.step(
                action if ours.discrete else np.array([action], dtype=np.float32))
            step = ours.step(torch.tensor([action] if ours.discrete else [[action]]))
            where = f"{env_id} from {state} with action {action}"
            np.testing.assert_allclose(step.final_obs[0].numpy(),
                                       REFERENCE_OBS[env_id](gym_state(reference)), rtol=0,
                                       atol=1e-12, err_msg=where)
            assert abs(float(step.reward[0]) - reward) <= 1e-9, where
            assert bool(step.terminated[0]) == terminated, where
            if not terminated:  # the state itself (Acrobot's angles wrapped into [-pi, pi])
                np.testing.assert_allclose(ours.get_state()[0].numpy(), gym_state(reference),
                                           rtol=0, atol=1e-12, err_msg=where)


def run_random(env, steps, seed=0):
    """Random actions; returns the list of Steps."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        if env.discrete:
            actions = torch.randint(0, env.n_actions, (env.num_envs,), generator=generator)
        else:
            actions = torch.rand((env.num_envs, env.act_dim), generator=generator,
                                 dtype=env.dtype) * 6 - 3
        out.append(env.step(actions.to(env.device)))
    return out


def in_reset_range(env_id, states):
    low, high = (torch.tensor(b, dtype=states.dtype, device=states.device)
                 for b in RESET_RANGES[env_id])
    return bool(((states >= low) & (states <= high)).all())


@pytest.mark.parametrize("by_index", [True, False], ids=["reset-by-index", "reset-by-where"])
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_autoreset_gives_fresh_states_true_final_obs_and_episode_stats(env_id, by_index):
    env = make(env_id, 64, seed=3, max_episode_steps=40)
    env._reset_by_index = by_index  # the CUDA path (draw all, torch.where) tested on the CPU
    returns = torch.zeros(64)  # summed in the env's order and dtype: equal, not close
    lengths = torch.zeros(64)
    ended = 0
    for _ in range(120):
        before = env.get_state()
        step = run_random(env, 1, seed=ended)[0]
        done = step.terminated | step.truncated
        assert not (step.terminated & step.truncated).any()
        returns += step.reward
        lengths += 1
        after = env.get_state()
        assert in_reset_range(env_id, after[done])
        assert (env.get_elapsed()[done] == 0).all()
        assert torch.equal(step.obs[~done], step.final_obs[~done])
        assert not torch.equal(step.obs[done], step.final_obs[done]) or not done.any()
        assert torch.equal(env.set_state(after)[done], step.obs[done])  # obs = reset state's
        assert torch.equal(step.episode_return[done], returns[done])
        assert torch.equal(step.episode_length[done], lengths[done])
        assert step.episode_return[~done].isnan().all() and step.episode_length[~done].isnan().all()
        assert (step.truncated == (lengths == 40) & ~step.terminated).all()
        assert not torch.equal(before[done], after[done]) or not done.any()
        returns[done], lengths[done] = 0.0, 0.0
        ended += int(done.sum())
        if env_id == "CartPole-v1":  # the true last observation: past a threshold
            last = step.final_obs[step.terminated]
            assert ((last[:, 0].abs() > 2.4) | (last[:, 2].abs() > 12 * math.pi / 180)).all()
            assert step.reward.eq(1.0).all()
    assert ended >= 64


def test_step_returns_new_tensors_each_step():
    env = make("CartPole-v1", 16)
    first = run_random(env, 1)[0]
    kept = {k: v.clone() for k, v in vars(first).items()}
    run_random(env, 30, seed=1)
    for name, value in vars(first).items():
        torch.testing.assert_close(value, kept[name], rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeding_is_deterministic(env_id):
    def trajectory(seed):
        env = make(env_id, 8, seed=seed, max_episode_steps=25)
        first = env.get_state()
        return first, torch.cat([s.obs for s in run_random(env, 60)])

    (start, same), (_, other) = trajectory(5), trajectory(6)
    assert torch.equal(same, trajectory(5)[1])
    assert not torch.equal(same, other)
    env = make(env_id, 8, seed=0)
    env.reset(seed=5)
    assert torch.equal(env.get_state(), start)  # reset(seed) starts as make(seed=...) does
    env.reset()
    assert not torch.equal(env.get_state(), start)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_resize_keeps_the_first_envs_and_resets_the_new_ones(env_id):
    env = make(env_id, 6, seed=1)
    run_random(env, 7)
    state, elapsed = env.get_state(), env.get_elapsed()
    obs = env.resize(10)
    assert obs.shape == (10, env.obs_dim) and env.num_envs == 10
    assert torch.equal(env.get_state()[:6], state)
    assert torch.equal(env.get_elapsed()[:6], elapsed)
    assert in_reset_range(env_id, env.get_state()[6:]) and (env.get_elapsed()[6:] == 0).all()
    assert run_random(env, 3)[-1].obs.shape == (10, env.obs_dim)
    kept = env.get_state()[:4]
    env.resize(4)
    assert torch.equal(env.get_state(), kept)
    assert run_random(env, 3)[-1].reward.shape == (4,)


def test_pendulum_clips_torques_to_the_action_bounds():
    env = make("Pendulum-v1", 3, dtype=torch.float64)
    assert env.action_low.tolist() == [-2.0] and env.action_high.tolist() == [2.0]
    state = env.get_state()
    big = env.step(torch.tensor([[5.0], [-7.0], [1.5]], dtype=torch.float64))
    env.set_state(state, torch.zeros(3, dtype=torch.int32))
    clipped = env.step(torch.tensor([[2.0], [-2.0], [1.5]], dtype=torch.float64))
    assert torch.equal(big.obs, clipped.obs) and torch.equal(big.reward, clipped.reward)


def test_interface_attributes():
    expected = {"CartPole-v1": (4, 2, 500, 500.0), "Acrobot-v1": (6, 3, 500, 0.0),
                "MountainCar-v0": (2, 3, 200, 0.0), "Pendulum-v1": (3, None, 200, 0.0)}
    for env_id, (obs_dim, n_actions, limit, bound) in expected.items():
        env = make(env_id, 2)
        assert (env.obs_dim, env.n_actions, env.max_episode_steps, env.return_upper_bound) == (
            obs_dim, n_actions, limit, bound)
        assert env.discrete == (n_actions is not None) and env.reset().dtype == torch.float32
    assert make("CartPole-v1", 2, max_episode_steps=50).return_upper_bound == 50.0


def test_gymnasium_backend_for_discrete_observations_one_hot():
    env = make("FrozenLake-v1", 5, seed=0)
    assert isinstance(env, GymVectorEnv) and env.obs_dim == 16 and env.n_actions == 4
    obs = env.reset(seed=0)
    assert obs.shape == (5, 16) and torch.equal(obs.sum(1), torch.ones(5))
    assert torch.equal(obs.argmax(1), torch.zeros(5, dtype=torch.long))  # start square
    ended = 0
    lengths = torch.zeros(5)
    for step in run_random(env, 300):
        lengths += 1
        done = step.terminated | step.truncated
        assert torch.equal(step.obs.sum(1), torch.ones(5))
        assert torch.equal(step.final_obs.sum(1), torch.ones(5))
        assert torch.equal(step.obs[~done], step.final_obs[~done])
        assert torch.equal(step.episode_length[done], lengths[done])
        assert step.episode_length[~done].isnan().all()
        # a FrozenLake episode terminates in a hole or at the goal, never on the start square
        assert (step.final_obs[step.terminated].argmax(1) != 0).all()
        assert (step.obs[done].argmax(1) == 0).all()
        lengths[done] = 0
        ended += int(done.sum())
    assert ended >= 10
    env.close()


def test_gymnasium_backend_resize_and_taxi():
    env = make("Taxi-v4", 3, seed=2)
    assert env.obs_dim == 500 and env.n_actions == 6
    run_random(env, 5)
    before = env.step(torch.zeros(3, dtype=torch.long)).obs
    after = env.resize(5)
    assert after.shape == (5, 500) and torch.equal(after[:3], before)
    assert run_random(env, 2)[-1].obs.shape == (5, 500)
    assert env.resize(2).shape == (2, 500)
    env.close()


def test_cartpole_through_gymnasium_backend_matches_torch_backend():
    slow = make("CartPole-v1", 4, backend="gymnasium", dtype=torch.float64, seed=7,
                max_episode_steps=30)
    fast = make("CartPole-v1", 4, dtype=torch.float64, max_episode_steps=30)
    assert isinstance(slow, GymVectorEnv) and slow.return_upper_bound == 30.0
    subenvs = slow._vector.envs

    def states():
        return torch.as_tensor(np.stack([gym_state(e) for e in subenvs]))

    fast.set_state(states(), torch.zeros(4, dtype=torch.int32))
    generator = torch.Generator().manual_seed(0)
    episodes = 0
    for _ in range(200):
        actions = torch.randint(0, 2, (4,), generator=generator)
        a, b = slow.step(actions), fast.step(actions)
        for name in ("reward", "terminated", "truncated", "episode_length", "episode_return"):
            torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0,
                                       equal_nan=True, msg=name)
        torch.testing.assert_close(a.final_obs, b.final_obs, rtol=1e-6, atol=1e-6)
        done = a.terminated | a.truncated
        torch.testing.assert_close(a.obs[~done], b.obs[~done], rtol=1e-6, atol=1e-6)
        episodes += int(done.sum())
        if done.any():
            fast.set_state(torch.where(done[:, None], states(), fast.get_state()))
    assert episodes >= 20 and slow.max_episode_steps == 30


def test_make_rejects_unknown_backend():
    with pytest.raises(ValueError, match="backend"):
        make("CartPole-v1", 2, backend="jax")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_cuda_matches_cpu_without_host_syncs(env_id):
    cpu = make(env_id, 512, dtype=torch.float64, seed=0, max_episode_steps=50)
    cuda = make(env_id, 512, dtype=torch.float64, seed=0, device="cuda", max_episode_steps=50)
    cuda.set_state(cpu.get_state().cuda(), cpu.get_elapsed().cuda())
    generator = torch.Generator().manual_seed(0)
    for _ in range(100):
        if cpu.discrete:
            actions = torch.randint(0, cpu.n_actions, (512,), generator=generator)
        else:
            actions = torch.rand((512, 1), generator=generator, dtype=torch.float64) * 4 - 2
        on_device = actions.cuda()
        torch.cuda.set_sync_debug_mode("error")
        try:
            b = cuda.step(on_device)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        a = cpu.step(actions)
        assert b.obs.device.type == "cuda" and b.episode_return.device.type == "cuda"
        for name in ("terminated", "truncated"):
            assert torch.equal(getattr(a, name), getattr(b, name).cpu()), name
        torch.testing.assert_close(b.final_obs.cpu(), a.final_obs, rtol=0, atol=1e-9)
        torch.testing.assert_close(b.reward.cpu(), a.reward, rtol=0, atol=1e-9)
        done = (a.terminated | a.truncated).cuda()
        assert in_reset_range(env_id, cuda.get_state()[done])
        cuda.set_state(cpu.get_state().cuda())
