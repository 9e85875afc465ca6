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

import copy
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
        return gauss_log_prob(mean, action, self.log_std)

    def _gauss_entropy(self, mean: torch.Tensor) -> torch.Tensor:
        return gauss_entropy(mean, self.log_std)


def gauss_log_prob(mean: torch.Tensor, action: torch.Tensor,
                   log_std: torch.Tensor) -> torch.Tensor:
    """log N(action; mean, diag(exp(log_std))^2), summed over the action dimensions
    (``log_std`` broadcast over the leading axes)."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std - 0.5 * LOG_2PI).sum(-1)


def gauss_entropy(mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """The diagonal Gaussian's entropy, sum of 0.5 + 0.5 log(2 pi) + log_std, at each row."""
    return (0.5 + 0.5 * LOG_2PI + log_std).sum(-1).expand(mean.shape[:-1])


def _entropy(log_p: torch.Tensor) -> torch.Tensor:
    return -(log_p.exp() * log_p).sum(-1)


class SeedAxisActorCritic:
    """The S seeds' ``ActorCritic`` networks of a trial as one: each parameter stacked on a
    leading seed axis (in ``ActorCritic.parameters()`` order), each linear layer a batched
    matrix product ``y_s = x_s W_s^T + b_s``; observations and outputs are (S, M, ...)."""

    def __init__(self, agents: list[ActorCritic]):
        first = agents[0]
        self.seeds = len(agents)
        self.discrete = first.discrete
        self.parameters = [torch.stack([p.detach() for p in ps]).requires_grad_(True)
                           for ps in zip(*(a.parameters() for a in agents), strict=True)]
        self._names = [name for name, _ in first.named_parameters()]
        self._modules = (len(first.actor), len(first.critic))
        self._wire()
        self._live: torch.Tensor | None = None

    def _wire(self) -> None:
        """The layers and ``log_std`` as views of ``parameters``."""
        stacked = dict(zip(self._names, self.parameters, strict=True))
        self._actor = _layers(stacked, "actor", self._modules[0])
        self._critic = _layers(stacked, "critic", self._modules[1])
        self.log_std = stacked.get("log_std")  # (S, act_dim)

    def frozen_copy(self) -> SeedAxisActorCritic:
        """A copy holding detached clones of the parameters (no gradient, ``freeze`` off):
        a lagged behaviour policy's network, loaded with ``load``."""
        clone = copy.copy(self)
        clone.parameters = [p.detach().clone() for p in self.parameters]
        clone._live = None
        clone._wire()
        return clone

    def snapshot(self) -> list[torch.Tensor]:
        """Detached clones of the parameters, for ``load``."""
        return [p.detach().clone() for p in self.parameters]

    def load(self, values: list[torch.Tensor]) -> None:
        """Copy ``values`` (a ``snapshot``) into the parameters, in place."""
        with torch.no_grad():
            for p, v in zip(self.parameters, values, strict=True):
                p.copy_(v)

    def freeze(self, live: torch.Tensor) -> None:
        """Forward passes from now on treat the seeds where ``live`` is False as constants
        (no gradient reaches their parameters, whatever their values)."""
        self._live = None if bool(live.all()) else live

    def _kept(self, layers):
        if self._live is None:
            return layers
        keep = self._live.view(-1, 1, 1)
        return [(torch.where(keep, w, w.detach()), torch.where(keep[:, 0], b, b.detach()))
                for w, b in layers]

    def actor(self, obs: torch.Tensor) -> torch.Tensor:
        return _forward(self._kept(self._actor), obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return _forward(self._kept(self._critic), obs).squeeze(-1)

    def sample(self, obs: torch.Tensor, generators: list[torch.Generator], live: list[bool],
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``ActorCritic.sample`` for each seed, seed s's actions drawn with
        ``generators[s]`` exactly as its own run draws them (a stopped seed draws nothing and
        takes action 0)."""
        out = self.actor(obs)
        if self.discrete:
            log_p = torch.log_softmax(out, dim=-1)
            probs = log_p.exp()
            action = torch.zeros(out.shape[:-1], dtype=torch.long, device=out.device)
            for s, generator in enumerate(generators):
                if live[s]:
                    action[s] = torch.multinomial(probs[s], 1, generator=generator).squeeze(-1)
            return action, log_p.gather(-1, action[..., None]).squeeze(-1), _entropy(log_p)
        noise = torch.zeros_like(out)
        for s, generator in enumerate(generators):
            if live[s]:
                noise[s] = torch.randn(out.shape[1:], generator=generator, dtype=out.dtype,
                                       device=out.device)
        log_std = self.log_std.detach()[:, None]
        action = out + log_std.exp() * noise
        return action, self._gauss_log_prob(out, action), self._gauss_entropy(out)

    def evaluate(self, obs: torch.Tensor,
                 actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``ActorCritic.evaluate`` of each seed's rows."""
        out = self.actor(obs)
        if self.discrete:
            log_p = torch.log_softmax(out, dim=-1)
            return log_p.gather(-1, actions[..., None].long()).squeeze(-1), _entropy(log_p)
        return self._gauss_log_prob(out, actions), self._gauss_entropy(out)

    def _kept_log_std(self) -> torch.Tensor:
        if self._live is None:
            return self.log_std
        return torch.where(self._live[:, None], self.log_std, self.log_std.detach())

    def _gauss_log_prob(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return gauss_log_prob(mean, action, self._kept_log_std()[:, None])

    def _gauss_entropy(self, mean: torch.Tensor) -> torch.Tensor:
        return gauss_entropy(mean, self._kept_log_std()[:, None])


def _layers(stacked: dict[str, torch.Tensor], net: str, modules: int):
    """(weight, bias) of each linear layer of ``net`` (every other module: tanh between)."""
    return [(stacked[f"{net}.{i}.weight"], stacked[f"{net}.{i}.bias"])
            for i in range(0, modules, 2)]


def _forward(layers, x: torch.Tensor) -> torch.Tensor:
    for i, (weight, bias) in enumerate(layers):
        x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
        if i < len(layers) - 1:
            x = torch.tanh(x)
    return x
