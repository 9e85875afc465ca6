"""The tree sampler of the agent testbed (Tree-GRPO's): rows of one tree share their prefix
steps exactly, every row replays from the instance's start to the same states, the steps
played are counted once, and the loop learns with tree_grpo on trees."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench import registry
from workbench.common import seeds
from workbench.common.validation import SpecError, validate
from workbench.testbeds import TASKS, Budget
from workbench.testbeds.agent import toolcalc
from workbench.testbeds.agent.keydoor import KeyDoor, generate
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.toolcalc import ToolCalc
from workbench.testbeds.agent.tree import TreeShape, once_per_node, play_trees

MAX_STEPS = 10


def _grow(shape: TreeShape, seed: int = 0, instances: int = 3, critic: bool = False,
          env: str = "keydoor"):
    if env == "keydoor":
        make_env, layouts = KeyDoor, [generate(0, 0, i, 6, 0.1) for i in range(instances)]
    else:
        make_env, layouts = ToolCalc, [toolcalc.generate(0, 0, i) for i in range(instances)]
    probe = make_env(layouts[:1], MAX_STEPS)
    torch.manual_seed(seed)
    policy = Policy(probe.obs_dim, probe.n_actions, 16, 1, critic)
    episodes, played = play_trees(
        layouts, list(range(10, 10 + instances)), shape, policy,
        seeds.torch_generator(seed, "actions"), seeds.numpy_generator(seed, "branches", 0),
        max_steps=MAX_STEPS, device=torch.device("cpu"), make_env=make_env, values=critic)
    return (policy if critic else layouts), episodes, played


SHAPES = [TreeShape(trees=2, expansions=2, rounds=1, leaves=3),  # the reference's default
          TreeShape(trees=1, expansions=3, rounds=2, leaves=4),  # some branches pruned
          TreeShape(trees=3, expansions=1, rounds=0, leaves=1)]  # a rollout per tree


@pytest.mark.parametrize("env", ["keydoor", "toolcalc"])
@pytest.mark.parametrize("shape", SHAPES)
def test_rows_of_a_tree_share_their_prefix_steps_exactly(shape, env):
    _, ep, _ = _grow(shape, env=env)
    rows = 3 * shape.trees * shape.leaves
    assert ep.mask.shape[0] == ep.tree_ids.shape[0] == rows
    # rows by instance, then tree (the loop's group_ids: instance of each row), K per tree
    trees = torch.arange(3 * shape.trees).repeat_interleave(shape.leaves)
    assert torch.equal(ep.tree_ids, trees)
    valid = ep.mask != 0
    assert torch.equal(ep.lengths, valid.sum(dim=1)) and bool((ep.node_ids[~valid] == -1).all())
    assert bool(ep.dones[torch.arange(rows), ep.lengths - 1].all())  # each row ends an episode
    for a in range(rows):
        for b in range(rows):
            same = valid[a] & valid[b] & (ep.node_ids[a] == ep.node_ids[b])
            if ep.tree_ids[a] != ep.tree_ids[b]:
                assert not bool(same.any())  # trees share no node
                continue
            shared = int(same.sum())
            assert bool(same[:shared].all())  # a shared node: every step before it shared
            for name in ("obs", "actions", "log_probs", "rewards", "anchor_ids", "states"):
                x, y = getattr(ep, name)[a][:shared], getattr(ep, name)[b][:shared]
                assert torch.equal(x, y), (name, a, b)
            if a != b:  # distinct leaves part before either ends (a leaf has no child)
                assert shared < min(int(ep.lengths[a]), int(ep.lengths[b]))
    if shape.rounds:  # branches from inside a rollout, not only from the root
        assert bool((ep.node_ids[:, :1] == ep.node_ids[:, :1].T).sum() > rows)


@pytest.mark.parametrize("shape", SHAPES)
def test_each_row_replays_from_the_start_to_the_same_states(shape):
    """Restoring a node's state is exact: each row's actions replayed from the instance's
    start in a fresh environment give its observations, states and rewards."""
    layouts, ep, _ = _grow(shape, seed=1)
    per_instance = shape.trees * shape.leaves
    replay = KeyDoor([layouts[r // per_instance] for r in range(len(ep.mask))], MAX_STEPS,
                     instance_ids=[10 + r // per_instance for r in range(len(ep.mask))])
    for t in range(ep.mask.shape[1]):
        on = ep.mask[:, t] != 0
        # the state before each step, and at padding the state the episode ended in (as play)
        assert torch.equal(replay.get_state(), ep.states[:, t])
        assert torch.equal(replay.observe()[on], ep.obs[on, t])
        assert torch.equal(replay.anchor_keys()[on], ep.anchor_ids[on, t])
        moved = replay.step(ep.actions[:, t])
        assert torch.equal(moved.active, on)
        assert torch.equal(moved.reward[on], ep.rewards[on, t])
    assert bool(replay.done.all())
    assert torch.equal(ep.success, ep.rewards.sum(dim=1) > 0)


def test_tree_rows_carry_the_value_of_each_state_and_of_the_state_after_the_last():
    policy, ep, _ = _grow(SHAPES[0], critic=True)
    valid = ep.mask != 0
    with torch.no_grad():
        assert torch.allclose(ep.values[:, :-1][valid], policy.value(ep.obs[valid]))
    inside = valid[:, 1:]  # a step's next state is the following step's state
    assert torch.allclose(ep.next_values[:, :-1][inside], ep.values[:, 1:-1][inside])
    rows = torch.arange(len(ep.lengths))
    assert torch.equal(ep.values[rows, ep.lengths], ep.next_values[rows, ep.lengths - 1])


def test_the_steps_played_count_each_node_once():
    # every leaf kept: the steps played are exactly the distinct nodes of the rows
    shape = TreeShape(trees=2, expansions=2, rounds=1, leaves=3)
    _, ep, played = _grow(shape)
    nodes = ep.node_ids[ep.mask != 0]
    assert played == len(nodes.unique()) < len(nodes)  # shared prefixes: fewer than the rows'
    # pruned branches were played too: more steps than the kept rows' distinct nodes
    _, ep, played = _grow(TreeShape(trees=1, expansions=3, rounds=2, leaves=4))
    assert played > len(ep.node_ids[ep.mask != 0].unique())
    # no rounds: one rollout per tree, nothing shared
    _, ep, played = _grow(TreeShape(trees=3, expansions=1, rounds=0, leaves=1))
    assert played == int(ep.mask.sum()) == len(ep.node_ids[ep.mask != 0].unique())


def test_once_per_node_keeps_each_shared_step_once_with_its_rows_mean_advantage():
    _, ep, played = _grow(SHAPES[0])  # every leaf kept: the distinct nodes are the steps played
    advantages = torch.randn(ep.mask.shape, generator=torch.Generator().manual_seed(0),
                             dtype=torch.float64)
    once, adv, ret = once_per_node(ep, advantages, 2 * advantages)
    kept = once.mask != 0
    assert int(kept.sum()) == played < int(ep.mask.sum())
    assert torch.equal(ep.node_ids[kept].sort().values, ep.node_ids[ep.mask != 0].unique())
    for row, step in kept.nonzero().tolist()[::7]:
        sharing = (ep.node_ids == ep.node_ids[row, step]) & (ep.mask != 0)
        assert torch.isclose(adv[row, step], advantages[sharing].mean())
    assert torch.allclose(ret, 2 * adv)
    assert torch.equal(once.obs, ep.obs) and torch.equal(ep.mask, (ep.node_ids >= 0).float())


def _run(advantage: str, steps: int, **params) -> list[dict]:
    task = TASKS["keydoor"]
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", advantage)()
    logged: list[dict] = []
    task().run(task.Params(**params), methods, seed=0, device=torch.device("cpu"),
               budget=Budget(steps=steps), log=lambda step, m: logged.append(dict(m)))
    return logged


def test_the_loop_learns_with_tree_grpo_on_trees_and_counts_shared_steps_once():
    logged = _run("tree_grpo", 40, sampling="auto", tree_count=2, tree_expansions=3)
    first = logged[0]["train/success"]
    last = np.mean([m["train/success"] for m in logged[-5:]])
    assert last >= first + 0.25, (first, last)  # measured: about 0.16 -> 0.46
    # a row per kept leaf, its shared steps played once: fewer env steps than the rows hold
    lengths = np.array([m["train/episode_length"] for m in logged])
    rows_steps = np.cumsum(lengths * 16 * 8)
    spent = np.array([m["cost/env_steps"] for m in logged])
    assert (spent < rows_steps - 0.5).all(), (spent[:3], rows_steps[:3])


def test_counting_shared_steps_once_changes_the_updates_not_the_samples():
    small = {"train_instances": 8, "eval_instances": 4, "instances_per_update": 4,
             "group_size": 4, "max_steps": 12, "sampling": "tree"}
    per_leaf = _run("tree_grpo", 2, **small)
    once = _run("tree_grpo", 2, tree_shared_steps="once", **small)
    assert once[0]["cost/env_steps"] == per_leaf[0]["cost/env_steps"]
    assert once[0]["adv/mean"] == per_leaf[0]["adv/mean"]  # the same first batch
    assert once[0]["train/grad_norm"] != per_leaf[0]["train/grad_norm"]


def test_monte_carlo_values_continue_from_tree_rows_states():
    """spo_chain restores the states of tree rows (``Episodes.states``) and plays on: the same
    first trees as grpo's, plus its continuations in cost/env_steps."""
    small = {"train_instances": 8, "eval_instances": 4, "instances_per_update": 4,
             "group_size": 4, "max_steps": 12, "sampling": "tree"}
    grpo, spo = _run("grpo", 1, **small), _run("spo_chain", 1, **small)
    assert grpo[0]["train/episode_length"] == spo[0]["train/episode_length"]
    assert spo[0]["cost/env_steps"] > grpo[0]["cost/env_steps"]


def test_auto_keeps_independent_rollouts_for_a_method_that_reads_no_trees():
    small = {"train_instances": 8, "eval_instances": 4, "instances_per_update": 4,
             "group_size": 4, "max_steps": 12}
    plain = _run("grpo", 2, **small)
    auto = _run("grpo", 2, sampling="auto", **small)
    drop = ("time/wall_seconds", "time/env_steps_per_second")
    assert repr([{k: v for k, v in m.items() if k not in drop} for m in plain]) == \
        repr([{k: v for k, v in m.items() if k not in drop} for m in auto])
    tree = _run("grpo", 2, sampling="tree", **small)
    assert [m["cost/env_steps"] for m in tree] != [m["cost/env_steps"] for m in plain]


@pytest.mark.parametrize(("params", "words"), [
    ({"group_size": 7}, "multiple of tree_count"),
    ({"group_size": 8, "tree_expansions": 1}, "raise tree_expansions or tree_rounds"),
])
def test_a_tree_shape_that_cannot_give_the_group_is_refused_naming_its_keys(params, words):
    with pytest.raises(SpecError) as caught:
        validate(TASKS["keydoor"].Params, {"sampling": "tree", "tree_count": 2, **params},
                 "sweep.yaml", prefix="task.params")
    assert words in str(caught.value) and "sweep.yaml" in str(caught.value)
