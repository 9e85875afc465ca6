"""Environment steps per second of the agent testbed's rollouts, batched against one Python
environment at a time, in one run.

    .venv/bin/python benchmarks/agent_env.py

For each agent environment, both sides play its instances (key-door: size 6; tool-use puzzle:
the task's defaults, 4 tools, values 0 .. 30) to the end of their episodes with the same small
policy network (sampled actions): ``KeyDoor`` / ``ToolCalc`` step N instances as tensors with
one policy forward per step for all of them (N = 1, 64, 4,096); the baseline steps N single
environments written in plain Python (the same rules) one after another, with one policy
forward per environment per step, as a loop over ``gym.Env`` instances would. The figure is env
steps/s and its ratio to the baseline at the same N (the baseline at 4,096 is timed on 256
environments and scaled: it is linear in N).
"""

from __future__ import annotations

import time

import torch

from workbench.testbeds.agent import keydoor, toolcalc
from workbench.testbeds.agent.keydoor import MOVES, KeyDoor
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.toolcalc import KINDS, ToolCalc

MAX_STEPS = 30
TOOL_STEPS = 12


class OneGrid:
    """One key-door instance in plain Python, the rules of ``KeyDoor``."""

    def __init__(self, layout):
        self.layout, self.size = layout, layout.size
        self.walls = layout.walls.tolist()

    def reset(self):
        self.pos, self.key, self.t = self.layout.start, False, 0
        return self.observe()

    def observe(self) -> torch.Tensor:
        n = self.size
        grid = torch.zeros(5, n, n)
        grid[0] = torch.tensor(self.layout.walls, dtype=torch.float32)
        if not self.key:
            grid[1][self.layout.key] = 1.0
            grid[2][self.layout.door] = 1.0
        grid[3][self.layout.goal] = 1.0
        grid[4][self.pos] = 1.0
        return torch.cat([grid.flatten(), torch.tensor([float(self.key)])])

    def step(self, action: int):
        dr, dc = MOVES[action]
        cell = (self.pos[0] + dr, self.pos[1] + dc)
        if not (self.walls[cell[0]][cell[1]] or (cell == self.layout.door and not self.key)):
            self.pos = cell
        self.key = self.key or self.pos == self.layout.key
        self.t += 1
        goal = self.pos == self.layout.goal
        return self.observe(), float(goal), goal or self.t >= MAX_STEPS


class OnePuzzle:
    """One tool-use puzzle in plain Python, the rules and observation of ``ToolCalc``."""

    def __init__(self, puzzle):
        self.puzzle, self.top = puzzle, puzzle.max_value

    def reset(self):
        self.value, self.t = self.puzzle.start, 0
        return self.observe()

    def observe(self) -> torch.Tensor:
        top, target = self.top, self.puzzle.target
        features = [0.0] * (2 * (top + 1))
        features[self.value] = features[top + 1 + target] = 1.0
        features += [self.value / top, target / top]
        for kind, p in self.puzzle.tools:
            result = toolcalc.call((kind, p), self.value, top)
            works, after = result is not None, self.value if result is None else result
            features += [float(kind == k) for k in KINDS]
            features += [float(p == q) for q in range(self.puzzle.max_operand + 1)]
            features += [float(works), float(after == target), after / top,
                         (after - target) / top]
        return torch.tensor(features)

    def step(self, action: int):
        self.value = toolcalc.apply(self.puzzle.tools[action], self.value, self.top)
        self.t += 1
        goal = self.value == self.puzzle.target
        return self.observe(), float(goal), goal or self.t >= TOOL_STEPS


def batched(make_env, max_steps, layouts, policy, generator) -> tuple[int, float]:
    env = make_env(layouts, max_steps)
    started, steps = time.perf_counter(), 0
    with torch.no_grad():
        while not bool(env.done.all()):
            probs = policy.distribution(env.observe()).probs
            moved = env.step(torch.multinomial(probs, 1, generator=generator).squeeze(1))
            steps += int(moved.active.sum())
    return steps, time.perf_counter() - started


def one_by_one(one_env, layouts, policy, generator) -> tuple[int, float]:
    started, steps = time.perf_counter(), 0
    with torch.no_grad():
        for layout in layouts:
            env = one_env(layout)
            obs, done = env.reset(), False
            while not done:
                probs = policy.distribution(obs[None]).probs
                action = int(torch.multinomial(probs, 1, generator=generator))
                obs, _, done = env.step(action)
                steps += 1
    return steps, time.perf_counter() - started


def main() -> None:
    torch.set_num_threads(1)
    environments = {
        "keydoor": ([keydoor.generate(0, 0, i, size=6) for i in range(4096)], KeyDoor, OneGrid,
                    MAX_STEPS),
        "toolcalc": ([toolcalc.generate(0, 0, i) for i in range(4096)], ToolCalc, OnePuzzle,
                     TOOL_STEPS),
    }
    print(f"{'env':>9} {'N':>6} {'batched steps/s':>16} {'one by one':>12} {'ratio':>7}")
    for name, (layouts, make_env, one_env, max_steps) in environments.items():
        torch.manual_seed(0)
        probe = make_env(layouts[:1], max_steps)
        policy = Policy(probe.obs_dim, probe.n_actions, 128, 2)
        generator = torch.Generator().manual_seed(0)
        for n in (1, 64, 4096):
            ours = batched(make_env, max_steps, layouts[:n], policy, generator)
            timed = min(n, 256)
            theirs = one_by_one(one_env, layouts[:timed], policy, generator)
            ours_rate, theirs_rate = ours[0] / ours[1], theirs[0] / theirs[1]
            print(f"{name:>9} {n:>6} {ours_rate:>16,.0f} {theirs_rate:>12,.0f} "
                  f"{ours_rate / theirs_rate:>6.1f}x")


if __name__ == "__main__":
    main()
