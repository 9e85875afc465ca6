"""The tool-use puzzle of the agent testbed: seeded generation within its difficulty bounds,
solvable instances with the right optimal length, steps that follow the rules, exact save and
restore, anchor keys, the text observation and its action parser
(workbench/testbeds/agent/toolcalc.py)."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from workbench.testbeds import TASKS
from workbench.testbeds.agent import toolcalc
from workbench.testbeds.agent.toolcalc import KINDS, ToolCalc, generate


@st.composite
def difficulties(draw) -> dict:
    low = draw(st.integers(1, 3))
    return {"max_value": draw(st.integers(5, 40)), "tools": draw(st.integers(1, 4)),
            "max_operand": draw(st.integers(2, 9)), "min_optimal": low,
            "max_optimal": draw(st.integers(low, 5))}


instances = st.tuples(st.integers(0, 2**31), st.integers(0, 1), st.integers(0, 10_000),
                      difficulties())


def _reaches_within(puzzle, calls: int) -> bool:
    """Whether any sequence of ``calls`` calls reaches the target, every sequence played in
    one batch of ``ToolCalc`` (an episode ends at the target, so shorter ones count too)."""
    sequences = list(itertools.product(range(len(puzzle.tools)), repeat=calls))
    env = ToolCalc([puzzle] * len(sequences), max_steps=calls + 1)
    reached = torch.zeros(len(sequences), dtype=torch.bool)
    for step in range(calls):
        reached |= env.step(torch.tensor([s[step] for s in sequences])).terminated
    return bool(reached.any())


@settings(max_examples=60, deadline=None)
@given(instances)
def test_every_instance_is_reproducible_within_bounds_solvable_and_optimal(case):
    seed, split, index, bounds = case
    puzzle = generate(seed, split, index, **bounds)
    assert puzzle == generate(seed, split, index, **bounds)
    assert 0 <= puzzle.start <= bounds["max_value"] and 0 <= puzzle.target <= bounds["max_value"]
    assert len(set(puzzle.tools)) == len(puzzle.tools) == bounds["tools"]
    for kind, p in puzzle.tools:
        assert kind in KINDS
        assert 1 <= p <= bounds["max_operand"] if kind in ("add", "sub") else 2 <= p <= min(
            bounds["max_operand"], toolcalc.MULTIPLICATIVE_MAX)
    assert bounds["min_optimal"] <= puzzle.optimal <= bounds["max_optimal"]
    # the plan, played, reaches the target in exactly ``optimal`` calls ...
    env = ToolCalc([puzzle], max_steps=puzzle.optimal + 3)
    path = toolcalc.plan(puzzle.start, puzzle.target, puzzle.tools, puzzle.max_value)
    assert len(path) == puzzle.optimal
    for action in path:
        assert not env.done[0]
        result = env.step(torch.tensor([action]))
    assert bool(result.terminated[0]) and float(result.reward[0]) == 1.0
    assert int(env.elapsed[0]) == puzzle.optimal
    # ... and no sequence of fewer calls reaches it (every one tried)
    assert not _reaches_within(puzzle, puzzle.optimal - 1)


@settings(max_examples=30, deadline=None)
@given(instances)
def test_a_step_follows_the_rules_from_every_value(case):
    seed, split, index, bounds = case
    puzzle = generate(seed, split, index, **bounds)
    values, k = range(puzzle.max_value + 1), len(puzzle.tools)
    env = ToolCalc([puzzle] * (len(values) * k), max_steps=5)
    env.set_state(torch.tensor([[v, 0, 0] for v in values for _ in range(k)]))
    env.step(torch.arange(k).repeat(len(values)))
    expected = [toolcalc.apply(tool, v, puzzle.max_value) for v in values
                for tool in puzzle.tools]
    assert env.value.tolist() == expected


def test_the_rules_of_each_kind():
    assert toolcalc.apply(("add", 3), 28, 30) == 28  # 31 leaves the range: a no-op
    assert toolcalc.apply(("add", 3), 27, 30) == 30
    assert toolcalc.apply(("sub", 5), 4, 30) == 4 and toolcalc.apply(("sub", 4), 4, 30) == 0
    assert toolcalc.apply(("mul", 3), 10, 30) == 30 and toolcalc.apply(("mul", 3), 11, 30) == 11
    assert toolcalc.apply(("div", 4), 12, 30) == 3 and toolcalc.apply(("div", 4), 14, 30) == 14
    assert toolcalc.plan(3, 13, [("mul", 2), ("add", 1)], 30) == [0, 0, 1]  # 6, 12, 13
    assert toolcalc.plan(1, 9, [("mul", 2)], 30) is None


def test_the_splits_and_the_indices_draw_different_instances():
    puzzles = {(split, index): generate(0, split, index) for split in (0, 1)
               for index in range(30)}
    assert len({(p.start, p.target, p.tools) for p in puzzles.values()}) == len(puzzles)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 15), st.integers(1, 15))
def test_restore_replays_exactly(seed, before, after):
    puzzles = [generate(seed, 0, i) for i in range(3)]
    env = ToolCalc([puzzles[i % 3] for i in range(12)], max_steps=12,
                   instance_ids=[i % 3 for i in range(12)])
    rng = torch.Generator().manual_seed(seed)
    for _ in range(before):
        env.step(torch.randint(0, 4, (12,), generator=rng))
    saved = env.get_state()
    actions = [torch.randint(0, 4, (12,), generator=rng) for _ in range(after)]

    def play():
        seen = []
        for a in actions:
            t = env.step(a)
            seen.append((env.observe(), env.anchor_keys(), t.reward, t.terminated,
                         t.truncated, t.active, env.get_state()))
        return seen

    first = play()
    env.set_state(saved)
    assert torch.equal(env.get_state(), saved)
    for one, two in zip(first, play(), strict=True):
        assert all(torch.equal(x, y) for x, y in zip(one, two, strict=True))


def test_rows_of_one_instance_share_anchor_keys_exactly_at_the_same_value():
    puzzle, other = generate(3, 0, 0), generate(3, 0, 1)
    env = ToolCalc([puzzle] * 4 + [other], max_steps=12, instance_ids=[0, 0, 0, 0, 1])
    keys = env.anchor_keys()
    assert len(set(keys[:4].tolist())) == 1 and keys[4] != keys[0]
    first = toolcalc.plan(puzzle.start, puzzle.target, puzzle.tools, puzzle.max_value)[0]
    differs = next(a for a in range(4)
                   if toolcalc.apply(puzzle.tools[a], puzzle.start, puzzle.max_value)
                   != toolcalc.apply(puzzle.tools[first], puzzle.start, puzzle.max_value))
    env.step(torch.tensor([first, first, differs, differs, 0]))
    keys, obs = env.anchor_keys(), env.observe()
    assert keys[0] == keys[1] and torch.equal(obs[0], obs[1])
    assert keys[2] != keys[0] and not torch.equal(obs[2], obs[0])
    # the call count is not observed: the start value after 5 calls is the start state again
    env.set_state(torch.tensor([[puzzle.start, 5, 0]] * 5))
    assert env.anchor_keys()[0] == ToolCalc([puzzle], 12).anchor_keys()[0]
    assert torch.equal(env.observe()[0], ToolCalc([puzzle], 12).observe()[0])


def test_the_episode_ends_at_the_target_or_after_max_steps_and_ended_rows_stay():
    puzzle = generate(5, 0, 2)
    path = toolcalc.plan(puzzle.start, puzzle.target, puzzle.tools, puzzle.max_value)
    # a call that never reaches the target from the start: the row stays away from it
    stuck = [a for a in range(4) if toolcalc.plan(puzzle.start, puzzle.target,
                                                  [puzzle.tools[a]], puzzle.max_value) is None]
    env = ToolCalc([puzzle, puzzle], max_steps=puzzle.optimal + 2, instance_ids=[0, 0])
    for step in range(puzzle.optimal + 4):
        t = env.step(torch.tensor([path[step] if step < len(path) else 0, stuck[0]]))
        if step == puzzle.optimal - 1:
            assert t.terminated.tolist() == [True, False]
        if step == puzzle.optimal + 1:
            assert t.truncated.tolist() == [False, True] and float(t.reward.sum()) == 0.0
        if step > puzzle.optimal + 1:
            assert t.active.tolist() == [False, False]
    assert env.elapsed.tolist() == [puzzle.optimal, puzzle.optimal + 2]


def test_the_text_observation_names_the_value_the_target_and_the_tools():
    puzzle = toolcalc.Puzzle(7, 23, (("add", 3), ("mul", 2), ("sub", 1)), 30, 9, 3)
    env = ToolCalc([puzzle], max_steps=10)
    assert env.text(0) == "value 7, target 23; tools: add 3, mul 2, sub 1"
    env.step(torch.tensor([1]))
    assert env.text(0).startswith("value 14, target 23;")
    assert env.observe().shape == (1, env.obs_dim) and env.n_actions == 3


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 1), st.integers(0, 1000), st.text(max_size=12))
def test_the_action_parser_inverts_the_action_text_and_rejects_the_rest(seed, split, index,
                                                                         noise):
    puzzle = generate(seed, split, index)
    env = ToolCalc([puzzle], max_steps=10)
    for action in range(env.n_actions):
        text = env.action_text(0, action)
        assert env.parse_action(0, text) == action
        assert env.parse_action(0, f"  {text.upper()} ") == action
        assert env.parse_action(0, text + " 1") is None and env.parse_action(0, text + "x") is None
    parsed = env.parse_action(0, noise)
    assert parsed is None or env.action_text(0, parsed) == " ".join(noise.lower().split())


@pytest.mark.parametrize("text", ["", "add", "3", "add three", "mul 2 3", "call add 3",
                                  "add -3", "pow 2", "add 99999999999"])
def test_malformed_actions_and_tools_the_instance_lacks_parse_to_none(text):
    env = ToolCalc([toolcalc.Puzzle(7, 23, (("add", 3), ("mul", 2)), 30, 9, 2)], 10)
    assert env.parse_action(0, text) is None
    assert env.parse_action(0, "sub 1") is None  # a well-formed call of a tool it lacks


@pytest.mark.parametrize("bad, names", [
    ({"min_optimal": 5, "max_optimal": 3}, ("min_optimal", "max_optimal")),
    ({"max_optimal": 9, "max_steps": 8}, ("max_optimal", "max_steps")),
    ({"tools": 20, "max_operand": 3}, ("tools", "max_operand")),
])
def test_inconsistent_difficulty_parameters_are_refused_by_name(bad, names):
    with pytest.raises(ValidationError) as error:
        TASKS["toolcalc"].Params(**bad)
    assert all(name in str(error.value) for name in names)
