"""The key-door gridworld of the agent testbed: seeded generation, solvable instances with the
right optimal length, exact save and restore, anchor keys (workbench/testbeds/agent/keydoor.py).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.testbeds.agent import keydoor
from workbench.testbeds.agent.keydoor import KeyDoor, generate

instances = st.tuples(st.integers(0, 2**31), st.integers(0, 1), st.integers(0, 10_000),
                      st.integers(5, 9), st.floats(0.0, 0.35))


def _distances(layout) -> int | None:
    """The optimal length by relaxation over (key held, row, column) to a fixed point: an
    independent check of the breadth-first search."""
    n, inf = layout.size, 10**9
    dist = np.full((2, n, n), inf)
    dist[int(layout.start == layout.key), *layout.start] = 0
    changed = True
    while changed:
        changed = False
        for held in (0, 1):
            for r in range(n):
                for c in range(n):
                    d = dist[held, r, c]
                    if d == inf:
                        continue
                    for dr, dc in keydoor.MOVES:
                        cell = (r + dr, c + dc)
                        if layout.walls[cell] or (cell == layout.door and not held):
                            continue
                        after = int(held or cell == layout.key)
                        if d + 1 < dist[after, *cell]:
                            dist[after, *cell] = d + 1
                            changed = True
    best = dist[:, layout.goal[0], layout.goal[1]].min()
    return None if best == inf else int(best)


@settings(max_examples=60, deadline=None)
@given(instances)
def test_every_instance_is_reproducible_solvable_and_its_optimal_length_is_right(case):
    seed, split, index, size, density = case
    layout = generate(seed, split, index, size, density)
    again = generate(seed, split, index, size, density)
    assert np.array_equal(layout.walls, again.walls)
    assert (layout.start, layout.key, layout.door, layout.goal, layout.optimal) == (
        again.start, again.key, again.door, again.goal, again.optimal)
    assert layout.optimal == _distances(layout)
    env = KeyDoor([layout], max_steps=4 * size * size)  # the plan, played, takes that long
    for action in keydoor.plan(layout.walls, layout.start, layout.key, layout.door,
                               layout.goal):
        assert not env.done[0]
        result = env.step(torch.tensor([action]))
    assert bool(result.terminated[0]) and float(result.reward[0]) == 1.0
    assert int(env.elapsed[0]) == layout.optimal


def test_the_splits_and_the_indices_draw_different_instances():
    layouts = {(split, index): generate(0, split, index) for split in (0, 1)
               for index in range(20)}
    signatures = {(x.walls.tobytes(), x.start, x.key, x.goal) for x in layouts.values()}
    assert len(signatures) == len(layouts)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 30), st.integers(1, 30))
def test_restore_replays_exactly(seed, before, after):
    layouts = [generate(seed, 0, i) for i in range(3)]
    env = KeyDoor([layouts[i % 3] for i in range(12)], max_steps=40,
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
                         t.truncated, env.get_state()))
        return seen

    first = play()
    env.set_state(saved)
    assert torch.equal(env.get_state(), saved)
    for one, two in zip(first, play(), strict=True):
        assert all(torch.equal(x, y) for x, y in zip(one, two, strict=True))


def test_rows_of_one_instance_share_anchor_keys_only_in_the_same_state():
    layout = generate(3, 0, 0)
    env = KeyDoor([layout] * 4 + [generate(3, 0, 1)], max_steps=30,
                  instance_ids=[0, 0, 0, 0, 1])
    keys = env.anchor_keys()
    assert len(set(keys[:4].tolist())) == 1 and keys[4] != keys[0]
    first = keydoor.plan(layout.walls, layout.start, layout.key, layout.door, layout.goal)[0]
    other = next(a for a in range(4) if a != first)
    env.step(torch.tensor([first, first, other, other, 0]))
    keys, obs = env.anchor_keys(), env.observe()
    assert keys[0] == keys[1] and torch.equal(obs[0], obs[1])
    assert (keys[2] == keys[0]) == torch.equal(obs[2], obs[0])  # a blocked move stays put
    # the step count is not observed: the start cell at step 5 is the start state again
    env.set_state(torch.tensor([[*layout.start, 0, 5, 0]] * 5))
    assert env.anchor_keys()[0] == KeyDoor([layout], 30).anchor_keys()[0]


def test_the_episode_ends_at_the_goal_or_after_max_steps_and_ended_rows_stay():
    layout = generate(5, 0, 2)
    env = KeyDoor([layout, layout], max_steps=layout.optimal + 2, instance_ids=[0, 0])
    path = keydoor.plan(layout.walls, layout.start, layout.key, layout.door, layout.goal)
    blocked = next(a for a in range(4)
                   if layout.walls[layout.start[0] + keydoor.MOVES[a][0],
                                   layout.start[1] + keydoor.MOVES[a][1]])
    for step in range(layout.optimal + 4):
        a = path[step] if step < len(path) else 0
        t = env.step(torch.tensor([a, blocked]))
        if step == layout.optimal - 1:
            assert t.terminated.tolist() == [True, False]
        if step == layout.optimal + 1:
            assert t.truncated.tolist() == [False, True] and float(t.reward.sum()) == 0.0
        if step > layout.optimal + 1:
            assert t.active.tolist() == [False, False]
    assert env.elapsed.tolist() == [layout.optimal, layout.optimal + 2]


def test_the_text_observation_names_the_cells_and_the_blocked_moves():
    layout = generate(1, 1, 4)
    env = KeyDoor([layout], max_steps=10)
    text = env.text(0)
    assert text.startswith(f"you ({layout.start[0]},{layout.start[1]}); key at "
                           f"({layout.key[0]},{layout.key[1]}); door "
                           f"({layout.door[0]},{layout.door[1]}) locked; goal "
                           f"({layout.goal[0]},{layout.goal[1]}); blocked:")
    blocked = [name for name, (dr, dc) in zip(keydoor.ACTION_NAMES, keydoor.MOVES, strict=True)
               if layout.walls[layout.start[0] + dr, layout.start[1] + dc]]
    assert text.endswith(" ".join(blocked) or "none")
    assert env.observe().shape == (1, env.obs_dim)
