"""The advantage family's typed input batch: the set it provides is the set of fields it
fills, and asking for an input it does not fill is a clear error naming it."""

from dataclasses import fields

import pytest
import torch

from workbench.families import AdvantageBatch, advantage, compute_advantages
from workbench.registry import get


def test_requirable_is_the_batch_fields_with_their_meanings():
    assert list(advantage.REQUIRABLE) == [f.name for f in fields(AdvantageBatch)]
    assert all(advantage.REQUIRABLE.values())


def test_the_provided_set_is_derived_from_the_filled_fields():
    rewards, mask = torch.zeros(2, 3), torch.ones(2, 3)
    batch = AdvantageBatch(rewards=rewards, mask=mask, group_ids=torch.tensor([0, 0]))
    assert batch.provided() == {"rewards", "mask", "group_ids"}
    assert batch.inputs(["mask", "rewards"]) == {"mask": mask, "rewards": rewards}


def test_asking_for_an_input_the_batch_does_not_fill_names_it():
    batch = AdvantageBatch(rewards=torch.zeros(2, 3), mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"requires anchor_ids, values, which .* does not fill "
                                         r"\(it fills mask, rewards\)"):
        batch.inputs(["rewards", "values", "anchor_ids"])
    with pytest.raises(ValueError, match="requires no_such_input"):
        batch.inputs(["no_such_input"])


def test_declared_names_must_be_fields():
    assert AdvantageBatch.names("rewards", "mask") == {"rewards", "mask"}
    with pytest.raises(TypeError, match="no field rewardz"):
        AdvantageBatch.names("rewards", "rewardz")


def test_compute_advantages_passes_a_method_the_inputs_it_requires():
    method = get("advantage", "grpo")()
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.0, 0.0]])
    batch = AdvantageBatch(rewards=rewards, mask=torch.ones(4, 2),
                           group_ids=torch.tensor([0, 0, 1, 1]), values=torch.zeros(4, 3))
    names = method.requirements(method.params)
    out = compute_advantages(method, batch, names)
    expected = method.compute(**{k: getattr(batch, k) for k in names})
    assert all(torch.equal(a, b) for a, b in zip(out, expected, strict=True))


def test_each_rl_testbed_provides_the_advantage_inputs_its_builder_fills():
    from workbench.testbeds import TASKS
    from workbench.testbeds.agent.episodes import play
    from workbench.testbeds.agent.keydoor import MOVES, KeyDoor, generate
    from workbench.testbeds.agent.policy import Policy
    from workbench.testbeds.agent.rubric import KeyDoorJudge
    from workbench.testbeds.shared.advantage_batch import (
        COMPLETION_INPUTS,
        EPISODE_INPUTS,
        completion_batch,
        episode_batch,
    )

    def given(task):
        return TASKS[task].provides & advantage.REQUIRABLE.keys()

    layouts = [generate(3, 0, i, size=7, obstacle_density=0.15) for i in range(2)]
    env = KeyDoor([lay for lay in layouts for _ in range(2)], max_steps=8)
    policy = Policy(env.obs_dim, len(MOVES), 8, 1, True)
    groups = torch.arange(2).repeat_interleave(2)
    filled = episode_batch(play(env, policy, torch.Generator().manual_seed(0), values=True),
                           groups).provided()
    assert filled == EPISODE_INPUTS
    # the turn loop's frozen reference model gives ref_log_probs
    assert filled | {"ref_log_probs"} == given("keydoor-lm") == given("toolcalc-lm")
    judged = episode_batch(play(env, policy, torch.Generator().manual_seed(0), values=True,
                                judge=KeyDoorJudge), groups).provided()
    # mc_values: the loop's continuations; ref_log_probs: its frozen reference policy;
    # hidden_states and action_ids: the sampling policy's features and the actions it took;
    # policy_entropy: its entropy at each step; reference_actions: the planner's solution
    loop = {"mc_values", "ref_log_probs", "hidden_states", "action_ids", "reference_actions",
            "policy_entropy"}
    assert judged | loop == given("keydoor")
    assert filled | loop == given("toolcalc")
    rewards, mask = torch.zeros(4, 3), torch.ones(4, 3)
    full = completion_batch(rewards, mask, groups, torch.zeros(4, 4), torch.zeros(4),
                            torch.zeros(4, 3), torch.zeros(4, 3))
    assert full.provided() == COMPLETION_INPUTS == given("rlvr-arith") == given("rlvr-countdown")
    assert completion_batch(rewards, mask, groups, None, None).provided() == {
        "rewards", "mask", "group_ids"}
