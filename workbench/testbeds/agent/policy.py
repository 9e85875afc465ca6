"""The agent testbed's small networks: the policy, an MLP from the observation vector to the
logits of the actions (the four moves, the instance's tools), and, for the estimators that
need one (GAE), a separate value MLP of the same shape (the step-level group estimators are
critic-free)."""

from __future__ import annotations

import torch
from torch import nn


def _mlp(inputs: int, outputs: int, hidden: int, layers: int) -> nn.Sequential:
    parts: list[nn.Module] = []
    width = inputs
    for _ in range(layers):
        parts += [nn.Linear(width, hidden), nn.Tanh()]
        width = hidden
    parts.append(nn.Linear(width, outputs))
    return nn.Sequential(*parts)


class Policy(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: int, layers: int,
                 critic: bool = False):
        super().__init__()
        self.net = _mlp(obs_dim, n_actions, hidden, layers)
        self.critic = _mlp(obs_dim, 1, hidden, layers) if critic else None

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """(N,) the value head's estimate of each observation's return."""
        return self.critic(obs).squeeze(-1)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """(..., hidden) the policy's last hidden layer at each observation (before the
        logits)."""
        return self.net[:-1](obs)

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.net(obs))

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probability of ``actions``, entropy) under the current policy."""
        dist = self.distribution(obs)
        return dist.log_prob(actions), dist.entropy()
