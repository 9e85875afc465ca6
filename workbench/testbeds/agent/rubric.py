"""Programmatic rubric judges of the agent tasks: per step, which rubric items it met or
violated, as (N, C) tensors for N rows stepped together (the inputs ``rubric`` and
``rubric_weights`` of the advantage family). ``Judge`` is what the loop asks of one,
``JudgeFactory`` its constructor's shape (given the environment right after its reset);
``KeyDoorJudge`` judges the key-door task.

Key-door items (``ITEMS``, weights ``WEIGHTS``; sub-goals are met once, violations at every
step that makes them):

    key      +1 at the step that picks the key up
    door     +1 at the first step onto the door cell (only possible with the key)
    goal     +1 at the step that reaches the goal
    blocked  -1 at a move into a wall, or into the door without the key (the agent stays)
    revisit  -1 at a move into a (cell, key held) state the episode has been in before

``KeyDoorJudge(env)`` keeps, per row, the states visited since the env's reset and whether
the door was passed; ``after(transition)`` reads the env after its ``step`` and returns that
step's annotations (0 for rows whose episode had ended). A sampler that copies rows with
``set_state`` must copy the judge's ``visited`` and ``passed`` rows with them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from workbench.testbeds.agent.environment import AgentEnv, Transition
from workbench.testbeds.agent.keydoor import KeyDoor

ITEMS = ("key", "door", "goal", "blocked", "revisit")
WEIGHTS = (0.25, 0.25, 0.4, 0.05, 0.05)


class Judge(Protocol):
    """A rubric judge of one environment's rows (built right after its reset)."""

    def after(self, moved: Transition) -> torch.Tensor:
        """(N, C) float in {-1, 0, 1}: the annotations of the step ``env.step`` just made."""

    def weights(self) -> torch.Tensor:
        """(N, C) float: every row's item weights."""


JudgeFactory = Callable[[AgentEnv], Judge]


class KeyDoorJudge:
    """The rubric of ``ITEMS`` judged on every row of ``env`` (call right after its reset)."""

    def __init__(self, env: KeyDoor):
        self.env = env
        cells = env.size * env.size
        self.visited = torch.zeros(env.num_envs, 2 * cells, dtype=torch.bool,
                                   device=env.device)
        self.passed = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
        self.pos, self.has_key = env.pos.clone(), env.has_key.clone()
        self.visited[env.rows, self._state()] = True

    def _state(self) -> torch.Tensor:
        env = self.env
        return (env.pos[:, 0] * env.size + env.pos[:, 1]) * 2 + env.has_key.long()

    def weights(self) -> torch.Tensor:
        """(N, C) float: every row's item weights."""
        return torch.tensor(WEIGHTS, device=self.env.device).expand(self.env.num_envs, -1)

    def after(self, moved: Transition) -> torch.Tensor:
        """(N, C) float in {-1, 0, 1}: the annotations of the step ``env.step`` just made."""
        env, active = self.env, moved.active
        stayed = (env.pos == self.pos).all(dim=1)
        key = active & env.has_key & ~self.has_key
        at_door = (env.pos == env.door).all(dim=1)
        door = active & at_door & ~self.passed
        state = self._state()
        seen = self.visited[env.rows, state]
        blocked = active & stayed
        revisit = active & ~stayed & seen
        self.visited[env.rows[active], state[active]] = True
        self.passed |= door
        self.pos, self.has_key = env.pos.clone(), env.has_key.clone()
        return torch.stack([key.float(), door.float(), moved.terminated.float(),
                            -blocked.float(), -revisit.float()], dim=1)
