"""The key-door rubric judge (issue 17): its annotations on optimal episodes and against a
one-row-at-a-time judge written with Python sets, what ``play`` hands the advantage slot and
the contract's padding check on the new inputs. (tests/test_agent_sweep.py runs the sweep and
report with every estimator of sweeps/agent-advantage-keydoor.yaml, sas and
rubric_redistribution among them.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from methods.advantage.rubric_redistribution import RubricRedistribution
from methods.advantage.sas import SAS
from workbench import families, registry
from workbench.testbeds import TASKS, Budget
from workbench.testbeds.agent.episodes import play
from workbench.testbeds.agent.keydoor import MOVES, KeyDoor, generate, plan
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.rubric import ITEMS, WEIGHTS, KeyDoorJudge

LAYOUTS = [generate(3, 0, i, size=7, obstacle_density=0.15) for i in range(6)]


def _judge_moves(layouts, actions: torch.Tensor, max_steps: int) -> torch.Tensor:
    """(N, T, C): the judge's annotations of ``actions`` (N, T) played from each start."""
    env = KeyDoor(layouts, max_steps)
    judge = KeyDoorJudge(env)
    return torch.stack([judge.after(env.step(actions[:, t])) for t in range(actions.shape[1])],
                       dim=1)


def test_an_optimal_episode_meets_each_sub_goal_once_and_violates_nothing():
    paths = [plan(lay.walls, lay.start, lay.key, lay.door, lay.goal) for lay in LAYOUTS]
    horizon = max(len(p) for p in paths)
    actions = torch.tensor([p + [0] * (horizon - len(p)) for p in paths])
    marks = _judge_moves(LAYOUTS, actions, max_steps=50)
    for row, (lay, path) in enumerate(zip(LAYOUTS, paths, strict=True)):
        cells, cell = [], lay.start
        for action in path:
            cell = (cell[0] + MOVES[action][0], cell[1] + MOVES[action][1])
            cells.append(cell)
        expected = torch.zeros(horizon, len(ITEMS))
        if lay.start != lay.key:
            expected[cells.index(lay.key), 0] = 1
        expected[cells.index(lay.door), 1] = 1
        expected[len(path) - 1, 2] = 1
        assert torch.equal(marks[row], expected), (row, marks[row].nonzero().tolist())


def _python_judge(lay, actions: list[int], max_steps: int) -> list[list[float]]:
    cell, held, passed, visited, out = lay.start, lay.start == lay.key, False, set(), []
    visited.add((cell, held))
    for step, action in enumerate(actions):
        if step >= max_steps or cell == lay.goal:
            out.append([0.0] * 5)
            continue
        target = (cell[0] + MOVES[action][0], cell[1] + MOVES[action][1])
        blocked = bool(lay.walls[target]) or (target == lay.door and not held)
        got_key = not blocked and target == lay.key and not held
        cell = cell if blocked else target
        held = held or got_key
        door = cell == lay.door and not passed
        passed = passed or door
        revisit = not blocked and (cell, held) in visited
        visited.add((cell, held))
        out.append([float(got_key), float(door), float(cell == lay.goal), -float(blocked),
                    -float(revisit)])
    return out


def test_the_batched_judge_agrees_with_a_one_row_judge_on_random_moves():
    layouts = [lay for lay in LAYOUTS for _ in range(4)]
    actions = torch.from_numpy(np.random.default_rng(0).integers(0, 4, (len(layouts), 60)))
    marks = _judge_moves(layouts, actions, max_steps=50)
    expected = torch.tensor([_python_judge(lay, row.tolist(), 50)
                             for lay, row in zip(layouts, actions, strict=True)])
    assert torch.equal(marks, expected)
    totals = expected.abs().sum(dim=(0, 1))
    assert bool((totals[[0, 3, 4]] > 0).all()), totals  # keys, bumps and revisits happen


def test_play_hands_the_advantage_slot_the_judges_annotations_and_the_sampling_log_probs():
    env = KeyDoor([lay for lay in LAYOUTS[:2] for _ in range(4)], max_steps=12)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        policy = Policy(env.obs_dim, len(MOVES), 16, 1, False)
    episodes = play(env, policy, torch.Generator().manual_seed(1), judge=KeyDoorJudge)
    inputs = episodes.advantage_inputs(torch.arange(2).repeat_interleave(4))
    rubric, mask = inputs["rubric"], inputs["mask"]
    assert rubric.shape == (*mask.shape, len(ITEMS))
    assert bool((rubric[mask == 0] == 0).all()) and bool((rubric[mask != 0] != 0).any())
    assert torch.equal(rubric[:, :, 2], episodes.terminated.float())  # the goal item
    assert torch.equal(inputs["rubric_weights"], torch.tensor([WEIGHTS] * 8))
    assert inputs["old_log_probs"] is episodes.log_probs
    again = policy.distribution(episodes.obs[mask != 0]).log_prob(episodes.actions[mask != 0])
    assert torch.allclose(inputs["old_log_probs"][mask != 0], again)


def test_only_a_task_with_a_judge_provides_the_rubric():
    assert {"rubric", "rubric_weights"} <= TASKS["keydoor"].provides
    assert not {"rubric", "rubric_weights"} & TASKS["toolcalc"].provides
    assert TASKS["toolcalc"].judge is None


class _PaddedConfidences(SAS):
    """Reads old_log_probs at padded steps: the contract must say so."""

    def compute(self, *, rewards, mask, group_ids, old_log_probs, **_):
        adv = super().compute(rewards=rewards, mask=mask, group_ids=group_ids,
                              old_log_probs=old_log_probs)[0]
        adv = adv + 1e-3 * (old_log_probs * (mask == 0)).sum(dim=1, keepdim=True) * mask
        return adv, adv.clone()


class _PaddedRubric(RubricRedistribution):
    """Reads the rubric at padded steps: the contract must say so."""

    def compute(self, *, mask, group_ids, rubric, rubric_weights, **_):
        return super().compute(mask=torch.ones_like(mask), group_ids=group_ids,
                               rubric=rubric, rubric_weights=rubric_weights)


def test_the_contract_catches_a_method_that_reads_the_new_inputs_at_padding():
    for cls in (_PaddedConfidences, _PaddedRubric):
        problems = families.check(cls)
        assert any("padded positions" in p for p in problems), (cls, problems)


def test_tree_sampling_with_a_rubric_method_is_refused_by_name():
    task = TASKS["keydoor"]
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", "rubric_redistribution")()
    params = task.Params(sampling="tree", train_instances=4, eval_instances=2,
                         instances_per_update=2, group_size=4, max_steps=8)
    with pytest.raises(ValueError, match="sampling: tree cannot carry the rubric judge"):
        task().run(params, methods, seed=0, device=torch.device("cpu"),
                   budget=Budget(steps=1), log=lambda step, m: None)
