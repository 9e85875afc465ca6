"""Named seed streams: independent across seeds, purposes and steps; stable; reproducible runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from workbench import registry
from workbench.common import seeds
from workbench.testbeds import Budget, get_task

# The positions as first published. Append-only: a new purpose gets a new position here too.
PINNED = {"global": 0, "data": 1, "init": 2, "batches": 3, "env": 4, "actions": 5,
          "minibatches": 6, "prompts": 7, "rollouts": 8, "eval": 9, "baselines": 10,
          "branches": 11}
SEEDS = range(10)


def first_draws(seed: int, purpose: str, *keys: int) -> tuple[int, ...]:
    return tuple(seeds.numpy_generator(seed, purpose, *keys).integers(2**63, size=4).tolist())


# ---- stability ---------------------------------------------------------------------------

def test_purposes_keep_their_positions():
    assert {k: seeds.PURPOSES[k] for k in PINNED} == PINNED
    positions = list(seeds.PURPOSES.values())
    assert len(set(positions)) == len(positions)
    # new purposes only ever take positions after the pinned ones
    assert all(p > max(PINNED.values()) for k, p in seeds.PURPOSES.items() if k not in PINNED)


def test_a_stream_is_the_spawned_child_at_its_position():
    for purpose, position in PINNED.items():
        child = np.random.SeedSequence(5).spawn(position + 1)[position]
        assert np.array_equal(seeds.stream(5, purpose).generate_state(4),
                              child.generate_state(4))
    per_step = seeds.stream(5, "rollouts").spawn(8)[7]
    assert np.array_equal(seeds.stream(5, "rollouts", 7).generate_state(4),
                          per_step.generate_state(4))


def test_known_values_do_not_move():
    """Pinned integers: a change to how streams are derived (and so to every run's numbers)
    shows up here."""
    assert seeds.int_seed(0, "init") == 7229315352737646089
    assert seeds.int_seed(7, "data") == 4042502035264064771
    assert seeds.int_seed(1, "rollouts", 2, 3) == 2045761171491463227


# ---- independence ------------------------------------------------------------------------

def test_first_draws_of_every_seed_and_purpose_are_pairwise_distinct():
    draws = [first_draws(s, p) for s in SEEDS for p in seeds.PURPOSES]
    assert len(set(draws)) == len(draws)
    ints = [seeds.int_seed(s, p) for s in SEEDS for p in seeds.PURPOSES]
    assert len(set(ints)) == len(ints)
    torch_draws = [tuple(torch.rand(4, generator=seeds.torch_generator(s, p)).tolist())
                   for s in SEEDS for p in seeds.PURPOSES]
    assert len(set(torch_draws)) == len(torch_draws)


def test_a_seeds_streams_are_not_its_neighbours_or_the_bare_seed():
    """The old offsets made seed s's init stream (s + 1) seed s + 1's global stream."""
    for s in SEEDS:
        init = torch.rand(8, generator=seeds.torch_generator(s, "init"))
        for purpose in seeds.PURPOSES:
            neighbour = torch.rand(8, generator=seeds.torch_generator(s + 1, purpose))
            assert not torch.equal(init, neighbour)
        for bare in (s, s + 1, s + 2):  # what torch.manual_seed(seed + k) used to give
            assert not torch.equal(init, torch.rand(8, generator=torch.Generator().manual_seed(
                bare)))
            assert first_draws(s, "data") != tuple(
                np.random.default_rng(bare).integers(2**63, size=4).tolist())


def test_per_step_streams_do_not_collide_across_seeds_and_steps():
    """``seed + step`` made seed 0's step 1 seed 1's step 0; keyed children do not."""
    keys = [seeds.int_seed(s, "rollouts", step, draw)
            for s, step, draw in itertools.product(SEEDS, range(10), range(3))]
    assert len(set(keys)) == len(keys)
    assert seeds.int_seed(0, "rollouts", 1, 0) != seeds.int_seed(1, "rollouts", 0, 0)


def test_the_same_seed_and_purpose_reproduce():
    assert first_draws(3, "batches") == first_draws(3, "batches")
    assert first_draws(3, "rollouts", 4, 1) == first_draws(3, "rollouts", 4, 1)
    a = torch.randn(5, generator=seeds.torch_generator(3, "init"))
    assert torch.equal(a, torch.randn(5, generator=seeds.torch_generator(3, "init")))
    assert 0 <= seeds.int_seed(3, "env") < 2**63


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown seed purpose"):
        seeds.stream(0, "nope")
    with pytest.raises(ValueError, match="non-negative"):
        seeds.stream(-1, "init")
    with pytest.raises(ValueError, match="non-negative"):
        seeds.stream(0, "rollouts", -1)


# ---- runs --------------------------------------------------------------------------------

def run_task(task_name: str, seed: int, steps: int, **params) -> list[tuple[int, dict]]:
    task = get_task(task_name)
    chosen = {"step_size": registry.get("step_size", "adam_schedule")(lr=0.01)}
    for slot, default in task.default_methods.items():
        chosen[slot] = registry.get(slot, default)()
    logged: list[tuple[int, dict]] = []
    task().run(task.Params(**params), chosen, seed=seed, device=torch.device("cpu"),
               budget=Budget(steps=steps),
               log=lambda step, m: logged.append(
                   (step, {k: v for k, v in m.items() if not k.startswith("time/")})))
    return logged


@pytest.mark.parametrize("task_name, params", [
    ("cartpole", {"num_envs": 4, "rollout_len": 16}),  # env, init, actions, minibatches
    ("logreg", {"n_samples": 64, "batch_size": 8}),  # data, init, batches
    ("toolcalc", {"train_instances": 8, "eval_instances": 4, "instances_per_update": 4,
                  "group_size": 4, "hidden": 16}),  # instances, init, actions, minibatches
])
def test_a_run_is_reproducible_and_leaves_the_global_rng_alone(task_name, params):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = run_task(task_name, 2, 4, **params)
    assert torch.equal(torch.get_rng_state(), before)  # no testbed touches the global RNG
    torch.manual_seed(999)  # and none depends on it
    assert repr(run_task(task_name, 2, 4, **params)) == repr(first)  # repr: NaN equals NaN
    assert repr(run_task(task_name, 3, 4, **params)) != repr(first)
