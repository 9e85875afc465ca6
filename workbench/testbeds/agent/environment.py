"""What the agent loop, the ground truth and tree sampling ask of an agent environment: N
generated instances stepped together as tensors, exact save and restore, observations as
vectors and as text, anchor keys. ``KeyDoor`` (keydoor.py) and ``ToolCalc`` (toolcalc.py)
implement it; ``EnvFactory`` is their constructor's shape, which the loop is given."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

NO_OP = -1  # an action that leaves a row as it is; its step still counts (a malformed text
# action of the language-model loop)


@dataclass
class Transition:
    """What an environment's ``step`` returns (tensors on the env's device)."""

    reward: torch.Tensor  # (N,) float: 1 where the goal was reached at this step
    terminated: torch.Tensor  # (N,) bool: the goal reached at this step
    truncated: torch.Tensor  # (N,) bool: ``max_steps`` moves made without reaching it
    active: torch.Tensor  # (N,) bool: the rows that moved (their episode had not ended)


class Instance(Protocol):
    """One generated task instance; ``optimal``: the fewest actions that solve it."""

    @property
    def optimal(self) -> int: ...


class AgentEnv(Protocol):
    """N instances stepped together; row i plays instance i; rows with one instance id play
    one instance (the anchor keys tell them apart)."""

    num_envs: int
    max_steps: int
    device: torch.device
    done: torch.Tensor  # (N,) bool: the row's episode has ended

    @property
    def obs_dim(self) -> int: ...

    @property
    def n_actions(self) -> int: ...

    def reset(self) -> None:
        """Every row back at its instance's start, at step 0."""

    def step(self, actions: torch.Tensor) -> Transition:
        """One action per row; rows whose episode has ended stay as they are, and so do rows
        given ``NO_OP`` (their step counts towards ``max_steps``)."""

    def get_state(self) -> torch.Tensor:
        """(N, S) long: the whole dynamic state."""

    def set_state(self, state: torch.Tensor) -> None:
        """Restore a ``get_state`` result exactly (rows may come from other rows of the same
        instance)."""

    def observe(self) -> torch.Tensor:
        """(N, obs_dim) float: what each row observes, for a small policy network."""

    def anchor_keys(self) -> torch.Tensor:
        """(N,) long: equal exactly where the instance and the observed state are equal."""

    def text(self, row: int) -> str:
        """Row ``row``'s observation as a short text for a language model."""

    def action_text(self, row: int, action: int) -> str:
        """The text of action ``action`` in row ``row`` (``parse_action``'s inverse)."""

    def parse_action(self, row: int, text: str) -> int | None:
        """The action that ``text`` names in row ``row``, or None when it names none."""

    def optimal_actions(self, row: int) -> list[int]:
        """A shortest action sequence from row ``row``'s current state to its goal."""


class EnvFactory(Protocol):
    """An environment class's constructor: ``KeyDoor`` or ``ToolCalc``."""

    def __call__(self, instances: Sequence, max_steps: int,
                 device: str | torch.device = "cpu",
                 instance_ids: Sequence[int] | None = None) -> AgentEnv: ...
