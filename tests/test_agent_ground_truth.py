"""The Monte Carlo protocol for true step advantages (workbench/testbeds/agent/ground_truth.py)
recovers, within its interval, the advantages that dynamic programming gives exactly on a small
key-door instance under a fixed, non-uniform policy: a shortest path's next move with
probability 0.625, each other move 0.125; and on a small tool-use puzzle, where the dynamic
programming for any environment (``exact_advantages_over``) gives the exact ones, after
agreeing with the key-door table."""

from __future__ import annotations

import torch

from workbench.testbeds.agent import toolcalc
from workbench.testbeds.agent.ground_truth import (
    exact_advantages,
    exact_advantages_over,
    monte_carlo_advantages,
)
from workbench.testbeds.agent.keydoor import KeyDoor, generate, plan
from workbench.testbeds.agent.toolcalc import ToolCalc

MAX_STEPS = 14


def _policy(layout):
    """probs_of(env): each row's probabilities, from a table over (key held, row, column)."""
    n = layout.size
    table = torch.full((2, n, n, 4), 0.25)
    for key in (0, 1):
        for r in range(n):
            for c in range(n):
                if layout.walls[r, c] or (r, c) == layout.goal:
                    continue
                path = plan(layout.walls, (r, c), (r, c) if key else layout.key, layout.door,
                            layout.goal)
                if path:
                    table[key, r, c] = 0.125
                    table[key, r, c, path[0]] = 0.625

    def probs_of(env):
        return table[env.has_key.long(), env.pos[:, 0], env.pos[:, 1]]

    return probs_of


def test_monte_carlo_recovers_the_exact_advantages_within_its_interval():
    layout = generate(0, 0, 0, size=5, obstacle_density=0.0)
    probs_of = _policy(layout)
    value, q = exact_advantages(layout, probs_of, MAX_STEPS)
    env, draws = KeyDoor([layout] * 4, MAX_STEPS), torch.Generator().manual_seed(1)
    states, actions = [], []
    for _ in range(4):  # states the policy visits in its first four moves, each move taken
        live = ~env.done
        action = torch.multinomial(probs_of(env), 1, generator=draws).squeeze(1)
        states.append(env.get_state()[live])
        actions.append(action[live])
        env.step(action)
    states, actions = torch.cat(states), torch.cat(actions)
    estimate, stderr = monte_carlo_advantages(layout, probs_of, MAX_STEPS, states, actions,
                                              n=3000, generator=torch.Generator().manual_seed(2))
    exact = torch.tensor([q[t, key, r, c, a] - value[t, key, r, c]
                          for (r, c, key, t, _), a in zip(states.tolist(), actions.tolist(),
                                                          strict=True)], dtype=torch.float64)
    assert len(exact) >= 12 and exact.abs().max() > 0.05  # advantages worth recovering
    assert stderr.max() < 0.03
    assert ((estimate - exact).abs() <= 4 * stderr + 1e-12).all(), \
        torch.stack([exact, estimate, stderr], dim=1)


def test_the_exact_value_of_the_start_is_the_probability_of_reaching_the_goal_in_time():
    layout = generate(4, 0, 1, size=5, obstacle_density=0.0)
    probs_of = _policy(layout)
    value, _ = exact_advantages(layout, probs_of, MAX_STEPS)
    env = KeyDoor([layout] * 4000, MAX_STEPS)
    draws = torch.Generator().manual_seed(0)
    with torch.no_grad():
        while not bool(env.done.all()):
            env.step(torch.multinomial(probs_of(env), 1, generator=draws).squeeze(1))
    reached = (env.pos == env.goal).all(dim=1).double()
    start = value[0, 0, layout.start[0], layout.start[1]]
    assert abs(float(reached.mean()) - start) <= 4 * float(reached.std()) / 4000 ** 0.5 + 1e-12
    assert 0.0 <= start <= 1.0
    if layout.optimal > MAX_STEPS:
        assert start == 0.0


def test_the_exact_advantages_over_any_environment_equal_the_key_door_table():
    layout = generate(2, 0, 3, size=5, obstacle_density=0.0)
    probs_of = _policy(layout)
    value, q = exact_advantages(layout, probs_of, MAX_STEPS)
    cells = [(key, r, c) for key in (0, 1) for r in range(5) for c in range(5)
             if not layout.walls[r, c]]
    states = torch.tensor([[r, c, key, 0, 0] for key, r, c in cells])
    generic_value, generic_q = exact_advantages_over(layout, states, probs_of, MAX_STEPS,
                                                     KeyDoor)
    for i, (key, r, c) in enumerate(cells):
        assert abs(generic_value[:, i] - value[:, key, r, c]).max() < 1e-12
        assert abs(generic_q[:, i] - q[:, key, r, c]).max() < 1e-12
    assert generic_value[0].max() > 0.5  # the policy reaches the goal in time from most cells


def test_monte_carlo_recovers_the_exact_advantages_on_the_tool_use_puzzle():
    puzzle = toolcalc.generate(0, 0, 5, max_value=12, tools=3, min_optimal=3, max_optimal=4)
    horizon = 8
    table = torch.full((13, 3), 0.2)  # the plan's next call with probability 0.6
    for v in range(13):
        path = toolcalc.plan(v, puzzle.target, puzzle.tools, puzzle.max_value)
        if path:
            table[v, path[0]] = 0.6

    def probs_of(env):
        return table[env.value]

    states = torch.tensor([[v, 0, 0] for v in range(13)])
    value, q = exact_advantages_over(puzzle, states, probs_of, horizon, ToolCalc)
    env, draws = ToolCalc([puzzle] * 4, horizon), torch.Generator().manual_seed(1)
    visited, actions = [], []
    for _ in range(3):  # states the policy visits in its first three calls, each call taken
        live = ~env.done
        action = torch.multinomial(probs_of(env), 1, generator=draws).squeeze(1)
        visited.append(env.get_state()[live])
        actions.append(action[live])
        env.step(action)
    visited, actions = torch.cat(visited), torch.cat(actions)
    estimate, stderr = monte_carlo_advantages(puzzle, probs_of, horizon, visited, actions,
                                              n=3000, generator=torch.Generator().manual_seed(2),
                                              make_env=ToolCalc)
    exact = torch.tensor([q[t, v, a] - value[t, v] for (v, t, _), a in
                          zip(visited.tolist(), actions.tolist(), strict=True)],
                         dtype=torch.float64)
    assert len(exact) >= 9 and exact.abs().max() > 0.05  # advantages worth recovering
    assert stderr.max() < 0.03
    assert ((estimate - exact).abs() <= 4 * stderr + 1e-12).all(), \
        torch.stack([exact, estimate, stderr], dim=1)
