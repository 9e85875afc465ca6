"""Key-door-goal gridworld: generated instances, their optimal plans, and N of them batched.

An instance is a ``size`` x ``size`` grid with a border of walls and one interior wall column
whose single gap is a locked door; obstacles fill the other interior cells with probability
``obstacle_density``. The agent starts left of the wall with the key, the goal is right of it.
Moves: up, down, left, right; a move into a wall, or into the door without the key, leaves the
agent where it is; stepping on the key picks it up. Reaching the goal ends the episode with
reward 1 (sparse); ``max_steps`` moves end it with 0.

Every generated instance is solvable: breadth-first search over (cell, key held) finds its
optimal length, and a layout without a path is drawn again from the same stream. Instance
``index`` of ``split`` (0: train, 1: held out) under ``seed`` is drawn from the stream
``seeds.stream(seed, "data", split, index)``, so the two splits never share an instance's
stream and any instance can be drawn alone.

``KeyDoor`` steps N instances as tensors on any device (G rollouts of one instance are G of
its rows), saves and restores the whole dynamic state exactly (``get_state``/``set_state``),
and gives each row's observation as a vector (the grid's channels) or as a short text, and
an anchor key: equal for two rows exactly when they show the same instance in the same state.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workbench.common import seeds
from workbench.testbeds.agent.environment import NO_OP, Transition

MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))
ACTION_NAMES = ("up", "down", "left", "right")
CHANNELS = ("wall", "key", "door", "goal", "agent")
Cell = tuple[int, int]


@dataclass(frozen=True)
class Layout:
    """One instance: its walls and where the start, key, door and goal are; ``optimal``: the
    fewest moves from the start to the goal."""

    walls: np.ndarray  # (size, size) bool
    start: Cell
    key: Cell
    door: Cell
    goal: Cell
    optimal: int

    @property
    def size(self) -> int:
        return self.walls.shape[0]


def plan(walls: np.ndarray, start: Cell, key: Cell, door: Cell, goal: Cell) -> list[int] | None:
    """The actions of a shortest path from ``start`` to ``goal`` (breadth-first search over
    (cell, key held)); None when the goal cannot be reached."""
    first = (start, start == key)
    parent: dict = {first: None}
    queue = deque([first])
    while queue:
        cell, held = state = queue.popleft()
        if cell == goal:
            actions = []
            while parent[state] is not None:
                state, action = parent[state]
                actions.append(action)
            return actions[::-1]
        for action, (dr, dc) in enumerate(MOVES):
            nxt = (cell[0] + dr, cell[1] + dc)
            if walls[nxt] or (nxt == door and not held):
                continue
            following = (nxt, held or nxt == key)
            if following not in parent:
                parent[following] = (state, action)
                queue.append(following)
    return None


def generate(seed: int, split: int, index: int, size: int = 7,
             obstacle_density: float = 0.15) -> Layout:
    """Instance ``index`` of ``split`` under ``seed`` (see the module docstring)."""
    if size < 5:
        raise ValueError(f"size must be at least 5, got {size}")
    rng = seeds.numpy_generator(seed, "data", split, index)
    for _ in range(10_000):
        walls = np.zeros((size, size), dtype=bool)
        walls[0, :] = walls[-1, :] = walls[:, 0] = walls[:, -1] = True
        column = int(rng.integers(2, size - 2))
        walls[1:-1, column] = True
        door = (int(rng.integers(1, size - 1)), column)
        walls[door] = False
        interior = np.zeros_like(walls)
        interior[1:-1, 1:-1] = True
        interior[:, column] = False
        walls |= interior & (rng.random((size, size)) < obstacle_density)
        rows, cols = np.nonzero(~walls)
        left = [(int(r), int(c)) for r, c in zip(rows, cols, strict=True) if c < column]
        right = [(int(r), int(c)) for r, c in zip(rows, cols, strict=True) if c > column]
        if len(left) < 2 or not right:
            continue
        start, key = (left[i] for i in rng.choice(len(left), size=2, replace=False))
        goal = right[int(rng.integers(len(right)))]
        path = plan(walls, start, key, door, goal)
        if path is not None:
            walls.setflags(write=False)
            return Layout(walls, start, key, door, goal, len(path))
    raise RuntimeError(f"no solvable layout in 10,000 draws (size {size}, obstacle density "
                       f"{obstacle_density})")


class KeyDoor:
    """N instances stepped together; row i plays ``layouts[i]``. ``instance_ids`` (default
    0..N-1) name the instances for the anchor keys: rows with one id play one instance."""

    def __init__(self, layouts: Sequence[Layout], max_steps: int, device: str | torch.device =
                 "cpu", instance_ids: Sequence[int] | None = None):
        sizes = {layout.size for layout in layouts}
        if len(sizes) != 1:
            raise ValueError(f"every layout must have one size, got {sorted(sizes)}")
        self.size, self.max_steps = sizes.pop(), int(max_steps)
        self.num_envs, self.device = len(layouts), torch.device(device)

        def cells(name: str) -> torch.Tensor:
            return torch.tensor([getattr(layout, name) for layout in layouts],
                                dtype=torch.long, device=self.device)

        self.walls = torch.tensor(np.stack([layout.walls for layout in layouts]),
                                  device=self.device)
        self.start, self.key, self.door, self.goal = (cells(n) for n in
                                                      ("start", "key", "door", "goal"))
        ids = range(self.num_envs) if instance_ids is None else instance_ids
        self.instance_ids = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)
        self.moves = torch.tensor(MOVES, dtype=torch.long, device=self.device)
        self.rows = torch.arange(self.num_envs, device=self.device)
        self.reset()

    # ----------------------------------------------------------------------------- dynamics

    def reset(self) -> None:
        """Every row back at its start, without the key, at step 0."""
        self.pos = self.start.clone()
        self.has_key = (self.pos == self.key).all(dim=1)
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.done = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def step(self, actions: torch.Tensor) -> Transition:
        """One move per row; rows whose episode has ended stay as they are, and so do rows
        given ``NO_OP`` (the step counts)."""
        active = ~self.done
        actions = actions.to(self.device)
        noop = actions == NO_OP
        target = self.pos + self.moves[actions.clamp(min=0)]
        at_door = (target == self.door).all(dim=1)
        blocked = self.walls[self.rows, target[:, 0], target[:, 1]] | (at_door & ~self.has_key)
        moved = active & ~blocked & ~noop
        self.pos = torch.where(moved[:, None], target, self.pos)
        self.has_key = self.has_key | (active & (self.pos == self.key).all(dim=1))
        self.elapsed = self.elapsed + active.long()
        terminated = active & (self.pos == self.goal).all(dim=1)
        truncated = active & ~terminated & (self.elapsed >= self.max_steps)
        self.done = self.done | terminated | truncated
        return Transition(terminated.float(), terminated, truncated, active)

    def get_state(self) -> torch.Tensor:
        """(N, 5) long: row, column, key held, steps elapsed, episode ended."""
        return torch.stack([self.pos[:, 0], self.pos[:, 1], self.has_key.long(), self.elapsed,
                            self.done.long()], dim=1)

    def set_state(self, state: torch.Tensor) -> None:
        """Restore a ``get_state`` result exactly (rows may come from other rows of the same
        instance: tree sampling continues one state in several rows)."""
        state = state.to(self.device, torch.long)
        self.pos = state[:, :2].clone()
        self.has_key, self.elapsed, self.done = state[:, 2] == 1, state[:, 3].clone(), \
            state[:, 4] == 1

    # ------------------------------------------------------------------------- observations

    @property
    def obs_dim(self) -> int:
        return len(CHANNELS) * self.size * self.size + 1

    @property
    def n_actions(self) -> int:
        return len(MOVES)

    def observe(self) -> torch.Tensor:
        """(N, obs_dim) float: the channels of ``CHANNELS`` over the grid, flattened (the key
        where it lies until it is held; the door while it is locked), then the key flag."""
        grid = torch.zeros(self.num_envs, len(CHANNELS), self.size, self.size,
                           device=self.device)
        grid[:, 0] = self.walls.float()
        lying = ~self.has_key
        grid[self.rows[lying], 1, self.key[lying, 0], self.key[lying, 1]] = 1.0
        grid[self.rows[lying], 2, self.door[lying, 0], self.door[lying, 1]] = 1.0
        grid[self.rows, 3, self.goal[:, 0], self.goal[:, 1]] = 1.0
        grid[self.rows, 4, self.pos[:, 0], self.pos[:, 1]] = 1.0
        return torch.cat([grid.flatten(1), self.has_key.float()[:, None]], dim=1)

    def anchor_keys(self) -> torch.Tensor:
        """(N,) long: equal exactly where the instance, the cell and the key flag are equal
        (what a row observes; the step count is not part of it, so states recur)."""
        cell = self.pos[:, 0] * self.size + self.pos[:, 1]
        return (self.instance_ids * self.size * self.size + cell) * 2 + self.has_key.long()

    def text(self, row: int) -> str:
        """Row ``row``'s observation as a short text for a language model."""
        r, c = (int(v) for v in self.pos[row])
        walls = self.walls[row]
        blocked = [name for name, (dr, dc) in zip(ACTION_NAMES, MOVES, strict=True)
                   if walls[r + dr, c + dc]]
        held = bool(self.has_key[row])
        key = "held" if held else "at ({},{})".format(*(int(v) for v in self.key[row]))
        door = "({},{}) {}".format(*(int(v) for v in self.door[row]),
                                   "open" if held else "locked")
        goal = "({},{})".format(*(int(v) for v in self.goal[row]))
        return (f"you ({r},{c}); key {key}; door {door}; goal {goal}; blocked: "
                f"{' '.join(blocked) or 'none'}")

    def action_text(self, row: int, action: int) -> str:
        """The name of move ``action`` (``parse_action``'s inverse)."""
        return ACTION_NAMES[action]

    def parse_action(self, row: int, text: str) -> int | None:
        """The move ``text`` names (``"up"``; case and surrounding spaces ignored), or None
        when it names none."""
        name = text.strip().lower()
        return ACTION_NAMES.index(name) if name in ACTION_NAMES else None

    def optimal_actions(self, row: int) -> list[int]:
        """A shortest sequence of moves from row ``row``'s current cell (and key flag) to its
        goal (``plan``; a held key is planned as lying where the agent stands)."""
        here = tuple(int(v) for v in self.pos[row])
        key = here if bool(self.has_key[row]) else tuple(int(v) for v in self.key[row])
        found = plan(self.walls[row].cpu().numpy(), here, key,
                     tuple(int(v) for v in self.door[row]), tuple(int(v) for v in self.goal[row]))
        return found or []
