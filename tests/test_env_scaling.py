"""batch_size/env_scaling: PPO's minibatch count as the number of environments scales, in its
two co-scaling variants (minibatch size kept, or minibatch count kept)."""

from __future__ import annotations

import pytest
import torch

from methods.entropy.none import NoEntropy
from workbench import registry
from workbench.testbeds import Budget, get_task


def scaling(**params):
    return registry.get("batch_size", "env_scaling")(**params)


@pytest.mark.parametrize("keep, minibatch_size, size, expected", [
    ("minibatch_size", 0, 1024, 16),    # 4 * 1024 / 256: minibatches of 64 kept
    ("minibatch_size", 0, 64, 1),       # 4 * 64 / 256 = 1
    ("minibatch_size", 0, 32, 1),       # 0.5 rounds to 0, at least 1
    ("minibatch_size", 0, 640, 10),     # 4 * 640 / 256
    ("minibatch_size", 48, 1024, 21),   # 1024 // 48
    ("minibatch_count", 0, 1024, 4),    # the task's own count
])
def test_minibatch_counts(keep, minibatch_size, size, expected):
    method = scaling(size=size, keep=keep, minibatch_size=minibatch_size)
    assert method.start({"batch_size": 256, "n_samples": 2**40}) == size
    assert method.next_batch_size(1, {"samples": size}) == size
    assert method.minibatches(size, 4) == expected


def test_size_zero_keeps_the_tasks_batch_and_its_minibatches():
    method = scaling()
    assert method.start({"batch_size": 256, "n_samples": 2**40}) == 256
    assert method.minibatches(256, 4) == 4


class RowCounter(NoEntropy):
    """No entropy bonus; records how many samples each minibatch's loss is taken over."""

    def start(self, info):
        self.rows: list[int] = []

    def policy_loss_hook(self, **inputs):
        self.rows.append(inputs["log_probs"].shape[0])
        return {}


@pytest.mark.parametrize("keep, rows, minibatches", [("minibatch_size", 8, 16),
                                                     ("minibatch_count", 32, 4)])
def test_ppo_takes_the_minibatches_the_method_sets(keep, rows, minibatches):
    """CartPole with N0 = 4 environments x T = 8 steps and 4 minibatches (of 8 samples):
    env_scaling to 128 samples makes N = 16 environments and, keeping the minibatch size,
    16 minibatches of 8 per epoch; keeping the count, 4 minibatches of 32."""
    task = get_task("cartpole")
    counter = RowCounter()
    methods = {"step_size": registry.get("step_size", "adam_schedule")(),
               "advantage": registry.get("advantage", "gae")(), "entropy": counter,
               "batch_size": scaling(size=128, keep=keep)}
    logged: list[dict] = []
    task().run(task.Params(num_envs=4, rollout_len=8, batch_axis="num_envs", minibatches=4,
                           epochs=2),
               methods, seed=0, device=torch.device("cpu"), budget=Budget(steps=3),
               log=lambda step, m: logged.append(dict(m)))
    assert [m["batch/num_envs"] for m in logged] == [16.0] * 3
    assert [m["batch/minibatches"] for m in logged] == [float(minibatches)] * 3
    assert counter.rows == [rows] * (3 * 2 * minibatches)


def test_on_a_seed_axis_every_seed_takes_the_minibatches_of_its_own_run():
    """The seed-axis loop cuts each seed's batch as the sequential loop does (96 samples, 3
    seeds x 6 environments x 16 steps; minibatches of 16: 6 of them)."""
    from tests.test_control_seed_axis import SMALL, both

    methods = {"step_size": registry.get("step_size", "adam")(),
               "batch_size": scaling(size=96, minibatch_size=16),
               "entropy": registry.get("entropy", "constant")(),
               "advantage": registry.get("advantage", "gae")()}
    _, together = both("cartpole", {**SMALL, "batch_axis": "num_envs"}, methods, [1, 2], 3)
    assert {m["batch/minibatches"] for rows in together.values() for _, m in rows} == {6.0}
