"""SPO-tree against numbers from the reference's own code, and SPO-tree's sampler."""

from __future__ import annotations

import math

import pytest
import torch

from methods.advantage.spo_tree import SPOTree
from workbench import registry
from workbench.common import seeds
from workbench.common.validation import SpecError, validate
from workbench.families import check
from workbench.testbeds import TASKS, Budget
from workbench.testbeds.agent.keydoor import KeyDoor, generate
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.tree import SegmentShape, play_segment_trees

# One instance's tree of segments (a segment: a chain of steps between branch points) and the
# leaf scores: root -> A (2 steps) -> {A1 (2 steps, score 1), A2 (1 step) -> {A2a (1 step,
# score 0), A2b (2 steps, score 1)}}, root -> B (1 step) -> {B1 (1 step, 0), B2 (3 steps, 0)};
# and a second instance whose tree is a single branch: C (2 steps) -> C1 (1 step, score 1).
# Rows are the leaves' paths, each step named by its node.
PATHS = [  # (instance, the nodes of the row's steps as "SEGMENT.step", score)
    (0, ["A.0", "A.1", "A1.0", "A1.1"], 1.0),
    (0, ["A.0", "A.1", "A2.0", "A2a.0"], 0.0),
    (0, ["A.0", "A.1", "A2.0", "A2b.0", "A2b.1"], 1.0),
    (0, ["B.0", "B1.0"], 0.0),
    (0, ["B.0", "B2.0", "B2.1", "B2.2"], 0.0),
    (1, ["C.0", "C.1", "C1.0"], 1.0),
]
# Edge advantages AIFrameResearch/SPO's code gives on the same trees: node rewards and stds by
# hybrid_inference_strategy.py _construct_tree's aggregation (mean and np.std of the children's
# rewards), edges by tree_episode_generator.py extract_edges_from_tree with
# only_adv_greater_than_zero=False, run in a scratch directory (not in this repo):
#   rloo: A 0.375, A1 0.25, A2 -0.25, A2a -0.5, A2b 0.5, B -0.375, B1 0.0, B2 0.0, C 0.0, C1 0.0
#   grpo: A 0.999999973333, A1 0.99999996, A2 -0.99999996, A2a -0.99999998, A2b 0.99999998,
#         B -0.999999973333, B1 0.0, B2 0.0, C 0.0, C1 0.0
EDGES = {
    "difference": {"A": 0.375, "A1": 0.25, "A2": -0.25, "A2a": -0.5, "A2b": 0.5, "B": -0.375,
                   "B1": 0.0, "B2": 0.0, "C": 0.0, "C1": 0.0},
    "std": {"A": 0.999999973333, "A1": 0.99999996, "A2": -0.99999996, "A2a": -0.99999998,
            "A2b": 0.99999998, "B": -0.999999973333, "B1": 0.0, "B2": 0.0, "C": 0.0,
            "C1": 0.0},
}


def _segment(node: str) -> str:
    """The reference's edge a step belongs to ('A2b.1' -> 'A2b')."""
    return node.split(".")[0]


def _batch(paths):
    width = max(len(p) for _, p, _ in paths)
    ids = {n: i for i, n in enumerate(sorted({n for _, p, _ in paths for n in p}))}
    rewards = torch.zeros(len(paths), width, dtype=torch.float64)
    mask = torch.zeros(len(paths), width)
    nodes = torch.full((len(paths), width), 999, dtype=torch.long)  # any value at padding
    for row, (_, path, score) in enumerate(paths):
        rewards[row, len(path) - 1] = score
        mask[row, :len(path)] = 1
        nodes[row, :len(path)] = torch.tensor([ids[n] for n in path])
    groups = torch.tensor([g for g, _, _ in paths])
    return {"rewards": rewards, "mask": mask, "group_ids": groups, "node_ids": nodes}


@pytest.mark.parametrize("mode", ["difference", "std"])
def test_each_segment_gets_the_reference_codes_edge_advantage(mode):
    advantages, returns = SPOTree(mode=mode).compute(**_batch(PATHS))
    for row, (_, path, _) in enumerate(PATHS):
        expected = [EDGES[mode][_segment(node)] for node in path]
        assert advantages[row, :len(path)].tolist() == pytest.approx(expected, abs=1e-9)
        assert advantages[row, len(path):].abs().sum() == 0
    assert torch.equal(advantages, returns)


def test_rows_in_any_order_give_each_row_the_same_advantages():
    order = [4, 2, 0, 5, 3, 1]
    shuffled = SPOTree().compute(**_batch([PATHS[i] for i in order]))[0]
    direct = SPOTree().compute(**_batch(PATHS))[0]
    assert torch.equal(shuffled, direct[order])


def test_independent_rollouts_get_their_score_minus_the_group_mean():
    scores = [1.0, 0.0, 0.0, 1.0, 1.0]
    paths = [(0 if i < 3 else 1, [f"r{i}.{t}" for t in range(2 + i)], s)
             for i, s in enumerate(scores)]
    advantages = SPOTree().compute(**_batch(paths))[0]
    means = [1 / 3] * 3 + [1.0] * 2  # the second group's equal scores give 0
    for row, (_, path, score) in enumerate(paths):
        assert advantages[row, :len(path)].tolist() == pytest.approx(
            [score - means[row]] * len(path))


def test_meets_the_advantage_contract():
    assert check(SPOTree) == []
    assert registry.get("advantage", "spo_tree").fidelity == "reference-checked"


def _segment_trees(shape: SegmentShape, instances: int = 3, max_steps: int = 20):
    layouts = [generate(0, 0, i, 6, 0.1) for i in range(instances)]
    probe = KeyDoor(layouts[:1], max_steps)
    torch.manual_seed(0)
    policy = Policy(probe.obs_dim, probe.n_actions, 16, 1, False)
    return play_segment_trees(layouts, list(range(instances)), shape, policy,
                              seeds.torch_generator(0, "actions"), max_steps=max_steps,
                              device=torch.device("cpu"), make_env=KeyDoor)


def test_segment_trees_branch_only_at_segment_ends_and_count_each_step_once():
    shape = SegmentShape((2, 3, 2), segment=3)
    episodes, played = _segment_trees(shape)
    valid = episodes.mask != 0
    assert played == len(torch.unique(episodes.node_ids[valid]))
    for group in range(3):
        rows = (episodes.groups == group).nonzero().squeeze(1)
        assert 1 <= len(rows) <= math.prod(shape.branching)
        nodes = episodes.node_ids[rows]
        for t in range(nodes.shape[1]):
            present = valid[rows, t]
            distinct = len(torch.unique(nodes[present, t]))
            if t % shape.segment or t >= shape.segment * (len(shape.branching) - 1) + 1:
                # inside a segment (or the last depth's free play): no new branch starts
                parents = len(torch.unique(nodes[present, t - 1])) if t else 1
                assert distinct <= parents, (group, t)
        assert len(torch.unique(episodes.tree_ids[rows])) == 1
    assert bool(episodes.dones[valid].sum() == len(episodes.lengths))  # every row a leaf


def test_segment_branching_must_multiply_to_the_group_size():
    with pytest.raises(SpecError) as raised:
        validate(TASKS["keydoor"].Params, {"sampling": "segments", "group_size": 8,
                                           "segment_branching": [2, 3]}, "task.params")
    assert "segment_branching" in str(raised.value) and "group_size" in str(raised.value)


def test_the_loop_learns_with_spo_tree_on_its_own_trees():
    task = TASKS["keydoor"]
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", "spo_tree")()
    logged: list[dict] = []
    task().run(task.Params(sampling="segments", segment_length=4), methods, seed=0,
               device=torch.device("cpu"), budget=Budget(steps=40),
               log=lambda step, m: logged.append(dict(m)))
    first = sum(m["train/success"] for m in logged[:3]) / 3
    last = sum(m["train/success"] for m in logged[-5:]) / 5
    assert last >= first + 0.2, (first, last)


def test_a_sweep_whose_segments_cannot_give_the_group_is_refused_before_it_runs(tmp_path):
    """Under sampling: auto only spo_tree grows segment trees: the spec check names the key."""
    from tests.conftest import ROOT, run_cli

    spec = (ROOT / "sweeps" / "agent-advantage-keydoor.yaml").read_text()
    path = tmp_path / "bad.yaml"
    path.write_text(spec.replace("segment_branching: [2, 2, 2]", "segment_branching: [2, 3]"))
    out = run_cli("sweep", path, "--storage", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "task.params.segment_branching" in out.stderr and "spo_tree" in out.stderr
    assert not (tmp_path / "x.db").exists()
