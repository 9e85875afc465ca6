"""Actor-critic networks for control tasks: separate policy and value MLPs, as CleanRL's
``ppo.py`` builds them (tanh hidden layers, orthogonal initialisation with gain sqrt(2), the
policy head at gain 0.01 and the value head at gain 1, biases 0).

Discrete actions: a categorical policy over logits. Continuous actions: a diagonal Gaussian with
a state-independent log standard deviation (initialised to 0), as CleanRL's
``ppo_continuous_action.py``; the environment clips the sampled action to its bounds.
Distributions are computed by hand (log-softmax / Gaussian log-density) rather than through
``torch.distributions``, which validates its arguments on every call.
"""

from __future__ import annotations

import math

import torch
from torch import nn

LOG_2PI = math.log(2.0 * math.pi)


def _layer(fan_in: int, fan_out: int, gain: float) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(fan_in: int, fan_out: int, hidden: int, layers: int, out_gain: float) -> nn.Sequential:
    """``layers`` tanh hidden layers of width ``hidden``, then a linear head."""
    modules: list[nn.Module] = []
    width = fan_in
    for _ in range(layers):
        modules += [_layer(width, hidden, math.sqrt(2.0)), nn.Tanh()]
        width = hidden
    modules.append(_layer(width, fan_out, out_gain))
    return nn.Sequential(*modules)


class ActorCritic(nn.Module):
    """``policy(obs)`` gives the action distribution's parameters, ``value(obs)`` V(s)."""

    def __init__(self, obs_dim: int, *, n_actions: int | None = None, act_dim: int | None = None,
                 hidden: int = 64, layers: int = 2):
        super().__init__()
        if (n_actions is None) == (act_dim is None):
            raise ValueError("give n_actions (discrete) or act_dim (continuous)")
        self.discrete = n_actions is not None
        self.actor = mlp(obs_dim, n_actions if self.discrete else act_dim, hidden, layers, 0.01)
        self.critic = mlp(obs_dim, 1, hidden, layers, 1.0)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.zeros(act_dim))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, its log-probability, the policy's entropy) at each observation; the action
        is drawn with ``generator`` (on ``obs``'s device; None: torch's global RNG)."""
        out = self.actor(obs)
        if self.discrete:
            log_p = torch.log_softmax(out, dim=-1)
            action = torch.multinomial(log_p.exp(), 1, generator=generator).squeeze(-1)
            return action, log_p.gather(-1, action[:, None]).squeeze(-1), _entropy(log_p)
        std = self.log_std.exp()
        noise = torch.randn(out.shape, generator=generator, dtype=out.dtype, device=out.device)
        action = out + std * noise
        return action, self._gauss_log_prob(out, action), self._gauss_entropy(out)

    def evaluate(self, obs: torch.Tensor,
                 actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probability of ``actions``, entropy) under the current policy."""
        out = self.actor(obs)
        if self.discrete:
            log_p = torch.log_softmax(out, dim=-1)
            return log_p.gather(-1, actions[:, None].long()).squeeze(-1), _entropy(log_p)
        return self._gauss_log_prob(out, actions), self._gauss_entropy(out)

    def _gauss_log_prob(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        z = (action - mean) * torch.exp(-self.log_std)
        return (-0.5 * z * z - self.log_std - 0.5 * LOG_2PI).sum(-1)

    def _gauss_entropy(self, mean: torch.Tensor) -> torch.Tensor:
        per_dim = 0.5 + 0.5 * LOG_2PI + self.log_std
        return per_dim.sum().expand(mean.shape[:-1])


def _entropy(log_p: torch.Tensor) -> torch.Tensor:
    return -(log_p.exp() * log_p).sum(-1)
