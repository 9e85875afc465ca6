"""``precision: bf16`` for the control testbed's policy training: the update's forward passes
autocast to bfloat16 (on the CPU too, where torch supports it) while the weights stay fp32."""

from __future__ import annotations

import math

import pydantic
import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget, get_task
from workbench.testbeds.control.policy import ActorCritic
from workbench.testbeds.control.ppo import autocast


def _run(device: str, seeds=None, **params):
    task = get_task("cartpole")
    chosen = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    logged = []
    kwargs = dict(device=torch.device(device), budget=Budget(steps=3),
                  log=lambda step, m: logged.append(m))
    p = task.Params(num_envs=16, rollout_len=16, **params)
    if seeds is None:
        task().run(p, chosen, seed=0, **kwargs)
    else:
        task().run_seeds(p, chosen, seeds=seeds, **kwargs)
    return logged


def test_autocast_runs_the_matrix_products_in_bf16_with_fp32_weights():
    agent = ActorCritic(4, n_actions=2)
    with autocast("bf16", torch.device("cpu")):
        value = agent.value(torch.zeros(3, 4))
    assert value.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in agent.parameters())
    with autocast("fp32", torch.device("cpu")):
        assert agent.value(torch.zeros(3, 4)).dtype == torch.float32


@pytest.mark.parametrize("algorithm", ["ppo", "reinforce"])
@pytest.mark.parametrize("seeds", [None, [0, 1]], ids=["one-seed", "seed-axis"])
def test_bf16_training_runs_and_differs_from_fp32(algorithm, seeds):
    fp32 = _run("cpu", seeds, algorithm=algorithm)
    bf16 = _run("cpu", seeds, algorithm=algorithm, precision="bf16")
    assert len(fp32) == len(bf16) == 3
    last = bf16[-1] if seeds is None else bf16[-1][0]
    first = fp32[-1] if seeds is None else fp32[-1][0]
    assert math.isfinite(last["train/value_loss"]) and math.isfinite(last["train/policy_loss"])
    # the same seed, the same rollout at the first update: only the precision differs
    assert last["train/value_loss"] != first["train/value_loss"]


def test_bf16_with_float64_is_refused():
    with pytest.raises(pydantic.ValidationError, match="float32"):
        get_task("cartpole").Params(precision="bf16", dtype="float64")
    with pytest.raises(pydantic.ValidationError):
        get_task("cartpole").Params(precision="fp16")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bf16_training_on_cuda():
    logged = _run("cuda", precision="bf16")
    assert math.isfinite(logged[-1]["train/value_loss"])
