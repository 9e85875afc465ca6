"""The control rollout never waits on the host per step: on CUDA every operation that reads a
tensor's values into Python (``nonzero``, ``item``, a boolean mask as an index, ``bool(t)``)
stalls the stream until the device catches up.

On the CPU, ``HostReads`` (a ``TorchFunctionMode``) counts the calls that would synchronise
on CUDA; the CUDA test asks torch itself (``torch.cuda.set_sync_debug_mode``)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode

from workbench.testbeds.control.policy import ActorCritic
from workbench.testbeds.control.rollout import collect
from workbench.testbeds.envs import ENV_IDS, make

_READS = {"nonzero", "argwhere", "item", "tolist", "__bool__", "__int__", "__float__",
          "__index__", "masked_select", "unique", "bincount", "repeat_interleave"}


def _bool_index(value) -> bool:
    items = value if isinstance(value, tuple) else (value,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class HostReads(TorchFunctionMode):
    """Counts calls that read device values on the host (each a sync on CUDA)."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in _READS or (name in ("__getitem__", "__setitem__", "index_put_")
                              and len(args) > 1 and _bool_index(args[1])):
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def _agent(env):
    torch.manual_seed(0)
    if env.discrete:
        return ActorCritic(env.obs_dim, n_actions=env.n_actions).to(env.dtype)
    return ActorCritic(env.obs_dim, act_dim=env.act_dim).to(env.dtype)


def _rollout_reads(env_id: str, horizon: int, by_index: bool) -> list[str]:
    env = make(env_id, 32, seed=1, max_episode_steps=5)  # episodes end within each rollout
    env._reset_by_index = by_index  # False: the CUDA path (draw all, torch.where)
    agent = _agent(env)
    obs = env.reset(seed=1)
    with HostReads() as reads:
        rollout, _ = collect(env, agent, obs, horizon, by_index=by_index)
    assert (rollout.episode_returns.numel() > 0) == (horizon > 5)
    return reads.calls


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_the_cuda_path_reads_the_host_once_per_rollout_not_per_step(env_id):
    short, long = (_rollout_reads(env_id, h, by_index=False) for h in (4, 16))
    assert short == long == ["nonzero"]  # the ended episodes, picked out after the last step


def test_the_counter_sees_the_per_step_reads_of_the_cpu_path():
    # the CPU path finds truncated rows and reset rows with nonzero at each step: the counter
    # must see them, or the test above proves nothing
    short, long = (_rollout_reads("CartPole-v1", h, by_index=True) for h in (4, 16))
    assert len(long) > len(short) > 1


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_both_bootstrap_paths_give_the_same_rollout(env_id):
    rollouts = []
    for by_index in (True, False):
        env = make(env_id, 16, seed=2, dtype=torch.float64, max_episode_steps=6)
        agent = _agent(env)
        generator = torch.Generator().manual_seed(3)
        rollouts.append(collect(env, agent, env.reset(seed=2), 20, generator,
                                by_index=by_index)[0])
    a, b = rollouts
    assert (a.dones & ~a.terminated).any()  # truncations were bootstrapped
    for name in ("obs", "actions", "log_probs", "values", "rewards", "dones", "terminated",
                 "last_value", "episode_returns", "episode_lengths", "episode_envs"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    # V of a row alone or within the whole batch: equal up to the matrix product's rounding
    torch.testing.assert_close(a.next_values, b.next_values, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_cuda_rollout_syncs_once_whatever_the_horizon(env_id):
    counts = []
    for horizon in (4, 16):
        env = make(env_id, 4096, seed=0, device="cuda", max_episode_steps=5)
        agent = _agent(env).cuda()
        obs = env.reset(seed=0)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                rollout, _ = collect(env, agent, obs, horizon)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts.append(sum("synchroniz" in str(w.message) for w in caught))
        assert (rollout.episode_returns.numel() > 0) == (horizon > 5)
    assert counts[0] == counts[1] <= 2, counts
