"""Tool-use puzzle: reach a target number from a start number by calling tools, one per step.

An instance has a start and a target in 0 .. ``max_value`` and ``tools`` distinct tools, each
a kind of ``KINDS`` with a parameter drawn per instance: ``add p`` and ``sub p`` with p in
1 .. ``max_operand``, ``mul p`` and ``div p`` with p in 2 .. ``min(max_operand, 5)``. A call
whose result leaves 0 .. ``max_value`` (or ``div p`` of a value that p does not divide) fails
and leaves the value as it is. Reaching the target ends the episode with reward 1 (sparse);
``max_steps`` calls end it with 0. Action i calls tool i.

Every generated instance is solvable: breadth-first search over the values from the start
gives each value's fewest calls, and the target is drawn among the values whose fewest calls
lie in ``min_optimal`` .. ``max_optimal``; a draw of tools and start with no such value is
drawn again from the same stream. Instance ``index`` of ``split`` (0: train, 1: held out)
under ``seed`` is drawn from the stream ``seeds.stream(seed, "data", split, index)``, as the
key-door instances are, so the splits never share a stream and any instance can be drawn
alone.

``ToolCalc`` steps N instances as tensors on any device with the interface of
``environment.AgentEnv``: exact ``get_state``/``set_state``, a vector observation (the value,
the target, the tools and what calling each gives now), a short text (``"value 7, target 23;
tools: add 3, mul 2, sub 1"``), the text of an action and its parser (``parse_action``:
``"mul 2"`` -> that tool's index, anything else -> None), and anchor keys, equal exactly when
two rows show the same instance at the same value.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workbench.common import seeds
from workbench.testbeds.agent.environment import NO_OP, Transition

KINDS = ("add", "sub", "mul", "div")
MULTIPLICATIVE_MAX = 5  # the largest parameter of mul and div
Tool = tuple[str, int]
_ACTION = re.compile(r"\s*(add|sub|mul|div)\s+(0|[1-9][0-9]{0,8})\s*", re.ASCII)


@dataclass(frozen=True)
class Puzzle:
    """One instance; ``optimal``: the fewest calls from ``start`` to ``target``.
    ``max_value`` and ``max_operand`` are the generation's bounds (they size the
    observation, so every instance of a run shares them)."""

    start: int
    target: int
    tools: tuple[Tool, ...]
    max_value: int
    max_operand: int
    optimal: int


def call(tool: Tool, value: int, max_value: int) -> int | None:
    """What calling ``tool`` on ``value`` gives; None when the call fails."""
    kind, p = tool
    if kind == "div":
        result = value // p if value % p == 0 else -1
    else:
        result = {"add": value + p, "sub": value - p, "mul": value * p}[kind]
    return result if 0 <= result <= max_value else None


def apply(tool: Tool, value: int, max_value: int) -> int:
    """The value after calling ``tool`` on ``value`` (``value`` itself when the call fails)."""
    result = call(tool, value, max_value)
    return value if result is None else result


def distances(start: int, tools: Sequence[Tool], max_value: int) -> dict[int, int]:
    """{value: fewest calls from ``start``} over the reachable values (breadth-first)."""
    fewest = {start: 0}
    queue = deque([start])
    while queue:
        value = queue.popleft()
        for tool in tools:
            nxt = apply(tool, value, max_value)
            if nxt not in fewest:
                fewest[nxt] = fewest[value] + 1
                queue.append(nxt)
    return fewest


def plan(start: int, target: int, tools: Sequence[Tool], max_value: int) -> list[int] | None:
    """The actions of a shortest sequence of calls from ``start`` to ``target`` (breadth-first
    search over the values); None when the target cannot be reached."""
    parent: dict[int, tuple[int, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        value = queue.popleft()
        if value == target:
            actions = []
            while parent[value] is not None:
                value, action = parent[value]
                actions.append(action)
            return actions[::-1]
        for i, tool in enumerate(tools):
            nxt = apply(tool, value, max_value)
            if nxt not in parent:
                parent[nxt] = (value, i)
                queue.append(nxt)
    return None


def _largest_operands(max_operand: int) -> dict[str, int]:
    small = min(max_operand, MULTIPLICATIVE_MAX)
    return {"add": max_operand, "sub": max_operand, "mul": small, "div": small}


def distinct_tools(max_operand: int) -> int:
    """How many different tools there are with parameters up to ``max_operand``."""
    return sum(top - (kind in ("mul", "div")) for kind, top in
               _largest_operands(max_operand).items())


def generate(seed: int, split: int, index: int, max_value: int = 30, tools: int = 4,
             max_operand: int = 9, min_optimal: int = 2, max_optimal: int = 6) -> Puzzle:
    """Instance ``index`` of ``split`` under ``seed`` (see the module docstring)."""
    if max_value < 2 or max_operand < 2 or not 1 <= min_optimal <= max_optimal:
        raise ValueError(f"need max_value >= 2, max_operand >= 2 and 1 <= min_optimal <= "
                         f"max_optimal; got {max_value}, {max_operand}, {min_optimal}, "
                         f"{max_optimal}")
    top = _largest_operands(max_operand)
    distinct = distinct_tools(max_operand)
    if not 1 <= tools <= distinct:
        raise ValueError(f"tools must be 1 .. {distinct} (the distinct tools with max_operand "
                         f"{max_operand}), got {tools}")
    rng = seeds.numpy_generator(seed, "data", split, index)
    for _ in range(10_000):
        chosen: list[Tool] = []
        while len(chosen) < tools:  # a kind, then its parameter; a repeated tool is redrawn
            kind = KINDS[int(rng.integers(len(KINDS)))]
            low = 1 if kind in ("add", "sub") else 2
            tool = (kind, int(rng.integers(low, top[kind] + 1)))
            if tool not in chosen:
                chosen.append(tool)
        start = int(rng.integers(max_value + 1))
        fewest = distances(start, chosen, max_value)
        targets = sorted(v for v, d in fewest.items() if min_optimal <= d <= max_optimal)
        if targets:
            target = targets[int(rng.integers(len(targets)))]
            return Puzzle(start, target, tuple(chosen), max_value, max_operand, fewest[target])
    raise RuntimeError(f"no instance with an optimal length in {min_optimal} .. {max_optimal} "
                       f"in 10,000 draws (max_value {max_value}, {tools} tools, max_operand "
                       f"{max_operand})")


class ToolCalc:
    """N instances stepped together; row i plays ``puzzles[i]``. ``instance_ids`` (default
    0..N-1) name the instances for the anchor keys: rows with one id play one instance."""

    def __init__(self, puzzles: Sequence[Puzzle], max_steps: int, device: str | torch.device =
                 "cpu", instance_ids: Sequence[int] | None = None):
        shapes = {(len(p.tools), p.max_value, p.max_operand) for p in puzzles}
        if len(shapes) != 1:
            raise ValueError("every puzzle must have one number of tools, max_value and "
                             f"max_operand, got {sorted(shapes)}")
        (self.n_tools, self.max_value, self.max_operand), = shapes
        self.puzzles, self.max_steps = list(puzzles), int(max_steps)
        self.num_envs, self.device = len(puzzles), torch.device(device)

        def column(values) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=self.device)

        self.start = column([p.start for p in puzzles])
        self.target = column([p.target for p in puzzles])
        self.kinds = column([[KINDS.index(kind) for kind, _ in p.tools] for p in puzzles])
        self.operands = column([[operand for _, operand in p.tools] for p in puzzles])
        ids = range(self.num_envs) if instance_ids is None else instance_ids
        self.instance_ids = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)
        self.rows = torch.arange(self.num_envs, device=self.device)
        self.reset()

    # ----------------------------------------------------------------------------- dynamics

    def reset(self) -> None:
        """Every row back at its start value, at step 0."""
        self.value = self.start.clone()
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.done = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    def step(self, actions: torch.Tensor) -> Transition:
        """One tool call per row; rows whose episode has ended stay as they are, and so do
        rows given ``NO_OP`` (the step counts)."""
        active = ~self.done
        actions = actions.to(self.device)
        after, _ = self.outcomes()
        moved = active & (actions != NO_OP)
        self.value = torch.where(moved, after[self.rows, actions.clamp(min=0)], self.value)
        self.elapsed = self.elapsed + active.long()
        terminated = active & (self.value == self.target)
        truncated = active & ~terminated & (self.elapsed >= self.max_steps)
        self.done = self.done | terminated | truncated
        return Transition(terminated.float(), terminated, truncated, active)

    def get_state(self) -> torch.Tensor:
        """(N, 3) long: value, calls made, episode ended."""
        return torch.stack([self.value, self.elapsed, self.done.long()], dim=1)

    def set_state(self, state: torch.Tensor) -> None:
        """Restore a ``get_state`` result exactly (rows may come from other rows of the same
        instance: tree sampling continues one state in several rows)."""
        state = state.to(self.device, torch.long)
        self.value, self.elapsed = state[:, 0].clone(), state[:, 1].clone()
        self.done = state[:, 2] == 1

    # ------------------------------------------------------------------------- observations

    @property
    def n_actions(self) -> int:
        return self.n_tools

    @property
    def obs_dim(self) -> int:
        return 2 * (self.max_value + 1) + 2 + self.n_tools * (len(KINDS) + self.max_operand + 5)

    def outcomes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, tools) each: the value calling each tool gives now, and whether the call
        works (a failed call gives the value unchanged)."""
        v = self.value[:, None]
        p = self.operands
        quotient = torch.div(v, p, rounding_mode="floor")
        result = torch.where(self.kinds == 0, v + p, torch.where(
            self.kinds == 1, v - p, torch.where(self.kinds == 2, v * p, quotient)))
        works = (((self.kinds != 3) | (v % p == 0)) & (result >= 0)
                 & (result <= self.max_value))
        return torch.where(works, result, v), works

    def observe(self) -> torch.Tensor:
        """(N, obs_dim) float: the value and the target one-hot over 0 .. max_value, both
        again as fractions of max_value; then for each tool its kind one-hot over ``KINDS``,
        its parameter one-hot over 0 .. max_operand, and what calling it now gives: whether
        the call works, whether it reaches the target, the value it gives and its distance
        to the target (both as fractions of max_value)."""
        one_hot = torch.nn.functional.one_hot
        values, top = self.max_value + 1, float(self.max_value)
        scaled = torch.stack([self.value, self.target], dim=1).float() / top
        after, works = self.outcomes()
        target = self.target[:, None]
        look = torch.stack([works.float(), (after == target).float(), after.float() / top,
                            (after - target).float() / top], dim=2)
        tools = torch.cat([one_hot(self.kinds, len(KINDS)).float(),
                           one_hot(self.operands, self.max_operand + 1).float(), look], dim=2)
        return torch.cat([one_hot(self.value, values).float(),
                          one_hot(self.target, values).float(), scaled, tools.flatten(1)],
                         dim=1)

    def anchor_keys(self) -> torch.Tensor:
        """(N,) long: equal exactly where the instance and the value are equal (what a row
        observes; the call count is not part of it, so states recur)."""
        return self.instance_ids * (self.max_value + 1) + self.value

    def text(self, row: int) -> str:
        """Row ``row``'s observation as a short text for a language model."""
        tools = ", ".join(f"{kind} {p}" for kind, p in self.puzzles[row].tools)
        return f"value {int(self.value[row])}, target {int(self.target[row])}; tools: {tools}"

    def action_text(self, row: int, action: int) -> str:
        """The text that calls tool ``action`` of row ``row`` (``parse_action``'s inverse)."""
        kind, p = self.puzzles[row].tools[action]
        return f"{kind} {p}"

    def parse_action(self, row: int, text: str) -> int | None:
        """The index of the tool of row ``row`` that ``text`` calls (``"mul 2"``; case and
        surrounding spaces ignored), or None when ``text`` is no call of one of its tools."""
        match = _ACTION.fullmatch(text.lower())
        if match is None:
            return None
        tool = (match.group(1), int(match.group(2)))
        tools = self.puzzles[row].tools
        return tools.index(tool) if tool in tools else None

    def optimal_actions(self, row: int) -> list[int]:
        """A shortest sequence of calls from row ``row``'s current value to its target
        (``plan``)."""
        puzzle = self.puzzles[row]
        found = plan(int(self.value[row]), puzzle.target, puzzle.tools, puzzle.max_value)
        return found or []
