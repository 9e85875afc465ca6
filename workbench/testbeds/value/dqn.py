"""The pieces of DQN (Mnih et al. 2015, "Human-level control through deep reinforcement
learning"), each a small function or class the loop (``workbench.testbeds.value.loop``) calls.

- ``QNetwork``: an MLP from an observation to one value per discrete action, ReLU hidden
  layers (CleanRL's ``dqn.py``: widths 120 and 84, PyTorch's default initialisation).
- ``ReplayBuffer``: the last ``capacity`` transitions (s, a, r, s', terminated) in a ring;
  ``sample(b)`` draws b indices uniformly *with* replacement from those stored (as the replay
  buffer CleanRL uses, Stable-Baselines3's, does). s' is the episode's last observation where
  it ended, so a transition cut by the time limit (truncated, not terminated) bootstraps.
- ``td_target``: y = r + gamma (1 - terminated) Q_target(s', a*), with
  a* = argmax_a Q_target(s', a) (DQN), or a* = argmax_a Q_online(s', a) evaluated by the target
  network (double DQN: van Hasselt, Guez & Silver 2016, "Deep reinforcement learning with
  double Q-learning").
- ``td_loss``: mean over the batch of (Q(s, a) - y)^2 (``"mse"``, CleanRL's default) or of the
  Huber loss with threshold delta (``"huber"``: quadratic within |Q - y| <= delta, linear
  outside; the Nature paper's error clipping at delta = 1).
- ``epsilon_at``: epsilon falls linearly from ``start_e`` to ``end_e`` over ``duration``
  environment steps, then stays at ``end_e`` (CleanRL's ``linear_schedule``).
- ``update_target``: theta_target <- tau theta + (1 - tau) theta_target; tau = 1 (CleanRL's
  default) copies the online network (a hard update).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class QNetwork(nn.Module):
    """Q(s, .): ``obs_dim`` inputs, ReLU hidden layers of the widths in ``hidden``,
    ``n_actions`` outputs."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...] = (120, 84)):
        super().__init__()
        layers: list[nn.Module] = []
        width = obs_dim
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        layers.append(nn.Linear(width, n_actions))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class ReplayBuffer:
    """A ring of the last ``capacity`` transitions, stored as tensors on ``device``."""

    def __init__(self, capacity: int, obs_dim: int, *, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        kw = {"device": device}
        self.obs = torch.zeros((capacity, obs_dim), dtype=dtype, **kw)
        self.next_obs = torch.zeros((capacity, obs_dim), dtype=dtype, **kw)
        self.actions = torch.zeros(capacity, dtype=torch.long, **kw)
        self.rewards = torch.zeros(capacity, dtype=dtype, **kw)
        self.terminated = torch.zeros(capacity, dtype=dtype, **kw)
        self.position = 0  # where the next transition goes
        self.size = 0  # transitions stored

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
            next_obs: torch.Tensor, terminated: torch.Tensor) -> None:
        """Store a batch of n transitions (rows), overwriting the oldest once full."""
        n = obs.shape[0]
        if n > self.capacity:  # only the last ``capacity`` would survive
            obs, actions, rewards, next_obs, terminated = (
                t[n - self.capacity:] for t in (obs, actions, rewards, next_obs, terminated))
            n = self.capacity
        rows = (torch.arange(n, device=self.obs.device) + self.position) % self.capacity
        self.obs.index_copy_(0, rows, obs.to(self.obs.dtype))
        self.next_obs.index_copy_(0, rows, next_obs.to(self.obs.dtype))
        self.actions.index_copy_(0, rows, actions.to(torch.long).view(-1))
        self.rewards.index_copy_(0, rows, rewards.to(self.obs.dtype))
        self.terminated.index_copy_(0, rows, terminated.to(self.obs.dtype))
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, ...]:
        """(obs, actions, rewards, next_obs, terminated) of ``batch_size`` transitions drawn
        uniformly with replacement from the stored ones, with ``generator``."""
        if self.size == 0:
            raise ValueError("the replay buffer is empty")
        idx = torch.randint(0, self.size, (batch_size,), generator=generator,
                            device=self.obs.device)
        return (self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx],
                self.terminated[idx])


@torch.no_grad()
def td_target(rewards: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor, *,
              gamma: float, target: nn.Module, online: nn.Module | None = None) -> torch.Tensor:
    """y = r + gamma (1 - terminated) Q_target(s', a*) (the module docstring); ``online``
    given: double DQN's a* = argmax_a Q_online(s', a), else a* = argmax_a Q_target(s', a)."""
    next_q = target(next_obs)
    if online is None:
        bootstrap = next_q.max(dim=1).values
    else:
        best = online(next_obs).argmax(dim=1, keepdim=True)
        bootstrap = next_q.gather(1, best).squeeze(1)
    return rewards + gamma * (1.0 - terminated) * bootstrap


def td_loss(q: torch.Tensor, y: torch.Tensor, kind: str = "mse",
            delta: float = 1.0) -> torch.Tensor:
    """Mean over the batch of (q - y)^2 (``"mse"``) or of the Huber loss with threshold
    ``delta`` (``"huber"``: 0.5 (q - y)^2 where |q - y| <= delta, else
    delta (|q - y| - 0.5 delta))."""
    if kind == "mse":
        return F.mse_loss(q, y)
    if kind == "huber":
        return F.huber_loss(q, y, delta=delta)
    raise ValueError(f"loss must be 'mse' or 'huber', got {kind!r}")


def epsilon_at(env_steps: int, *, start_e: float, end_e: float, duration: float) -> float:
    """epsilon after ``env_steps`` environment steps: start_e + (end_e - start_e) t / duration
    for t < duration, end_e from then on (duration <= 0: end_e at once)."""
    if duration <= 0 or env_steps >= duration:
        return end_e
    return start_e + (end_e - start_e) * env_steps / duration


@torch.no_grad()
def update_target(target: nn.Module, online: nn.Module, tau: float) -> None:
    """theta_target <- tau theta_online + (1 - tau) theta_target, parameter by parameter."""
    for t, o in zip(target.parameters(), online.parameters(), strict=True):
        if tau == 1.0:
            t.copy_(o)
        else:
            t.lerp_(o, tau)


@torch.no_grad()
def act(q_net: nn.Module, obs: torch.Tensor, epsilon: float,
        generator: torch.Generator | None = None) -> torch.Tensor:
    """epsilon-greedy actions (n,): in each environment, with probability epsilon an action
    uniform over the n_actions, else argmax_a Q(s, a). Both draws are made at every call, so
    the random stream does not depend on epsilon."""
    q = q_net(obs)
    n, n_actions = q.shape
    explore = torch.rand(n, generator=generator, device=obs.device, dtype=q.dtype) < epsilon
    random = torch.randint(0, n_actions, (n,), generator=generator, device=obs.device)
    return torch.where(explore, random, q.argmax(dim=1))
