"""The agent testbed's small policy network: an MLP from the grid observation to the logits of
the four moves (no value head: the step-level estimators are critic-free)."""

from __future__ import annotations

import torch
from torch import nn


class Policy(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: int, layers: int):
        super().__init__()
        parts: list[nn.Module] = []
        width = obs_dim
        for _ in range(layers):
            parts += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        parts.append(nn.Linear(width, n_actions))
        self.net = nn.Sequential(*parts)

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.net(obs))

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probability of ``actions``, entropy) under the current policy."""
        dist = self.distribution(obs)
        return dist.log_prob(actions), dist.entropy()
