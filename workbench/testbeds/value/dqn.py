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
- Multi-step targets (the task's ``target``): ``ReplayBuffer.sample_sequences`` returns, for
  each drawn transition, it and the following n - 1 transitions of the same environment (a
  ``valid`` mask stops at the episode's end: a terminated step does not bootstrap, a truncated
  one bootstraps from its final observation, as the one-step target) and the behaviour
  policy's probability mu of each taken action, stored at acting time (``act_with_probs``:
  epsilon-greedy, 1 - eps + eps/|A| for the greedy action, eps/|A| for another).
  ``n_step_target``: G = sum_{k<L} gamma^k r_k + gamma^L (1 - terminated_{L-1})
  Q_target(s_L, a*) over the L <= n valid steps, uncorrected (Rainbow's n-step return).
  ``retrace_target`` (Munos, Stepleton, Harutyunyan & Bellemare 2016, "Safe and efficient
  off-policy reinforcement learning"): Q_ret_k = r_k + gamma (1 - terminated_k)
  (E_pi Q_target(s_{k+1}, .) + c_{k+1} (Q_ret_{k+1} - Q_target(s_{k+1}, a_{k+1}))),
  c = lambda min(1, pi(a|s) / mu(a|s)), the correction dropped after the last valid step
  (that step bootstraps with E_pi Q_target alone); the loop's pi is the greedy policy of the
  target network (the evaluation policy of the paper's control setting), so c = lambda on a
  greedy action and 0 on another.
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
        self.done = torch.zeros(capacity, dtype=torch.bool, **kw)  # terminated or truncated
        self.behaviour_probs = torch.ones(capacity, dtype=dtype, **kw)  # mu(a|s) at acting
        self.stamp = torch.full((capacity,), -1, dtype=torch.long, **kw)  # the add() call
        self.adds = 0  # add() calls so far
        self.width: int | None = None  # rows per add() while every call adds the same number
        self.position = 0  # where the next transition goes
        self.size = 0  # transitions stored

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
            next_obs: torch.Tensor, terminated: torch.Tensor, *,
            truncated: torch.Tensor | None = None,
            behaviour_probs: torch.Tensor | None = None) -> None:
        """Store a batch of n transitions (rows), overwriting the oldest once full; row e of
        every call is the same environment's for ``sample_sequences`` (``truncated``: the
        episode ended by its time limit; ``behaviour_probs``: mu of each action, default 1)."""
        n = obs.shape[0]
        self.width = n if self.adds == 0 or self.width == n else None
        if truncated is None:
            truncated = torch.zeros(n, dtype=torch.bool, device=obs.device)
        if behaviour_probs is None:
            behaviour_probs = torch.ones(n, device=obs.device)
        done = terminated.to(torch.bool) | truncated.to(torch.bool)
        if n > self.capacity:  # only the last ``capacity`` would survive
            obs, actions, rewards, next_obs, terminated, done, behaviour_probs = (
                t[n - self.capacity:] for t in (obs, actions, rewards, next_obs, terminated,
                                                done, behaviour_probs))
            n = self.capacity
        rows = (torch.arange(n, device=self.obs.device) + self.position) % self.capacity
        self.obs.index_copy_(0, rows, obs.to(self.obs.dtype))
        self.next_obs.index_copy_(0, rows, next_obs.to(self.obs.dtype))
        self.actions.index_copy_(0, rows, actions.to(torch.long).view(-1))
        self.rewards.index_copy_(0, rows, rewards.to(self.obs.dtype))
        self.terminated.index_copy_(0, rows, terminated.to(self.obs.dtype))
        self.done.index_copy_(0, rows, done.view(-1))
        self.behaviour_probs.index_copy_(0, rows, behaviour_probs.to(self.obs.dtype).view(-1))
        self.stamp.index_fill_(0, rows, self.adds)
        self.adds += 1
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

    def sample_sequences(self, batch_size: int, n_steps: int,
                         generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn as ``sample`` draws them (the same indices from the
        same generator), each with the n_steps - 1 that followed it in its environment:
        tensors of shape (b, n_steps) (``obs`` and ``next_obs``: (b, n_steps, obs_dim)) under
        the keys obs, actions, rewards, next_obs, terminated, behaviour_probs and valid.
        Step k is valid where step k - 1 is, did not end its episode, and its follower is
        still stored; an invalid step's fields are unread."""
        if self.size == 0:
            raise ValueError("the replay buffer is empty")
        if self.width is None or self.width > self.capacity:
            raise ValueError("sequences need every add() to store the same number of rows, "
                             "at most the capacity")
        idx = torch.randint(0, self.size, (batch_size,), generator=generator,
                            device=self.obs.device)
        offsets = torch.arange(n_steps, device=idx.device) * self.width
        rows = (idx[:, None] + offsets) % self.capacity  # (b, n): the same environment's
        follows = self.stamp[rows] == self.stamp[idx][:, None] + torch.arange(
            n_steps, device=idx.device)
        not_ended = torch.ones_like(follows)
        not_ended[:, 1:] = ~self.done[rows[:, :-1]]
        valid = (follows & not_ended).long().cumprod(dim=1).to(torch.bool)
        return {"obs": self.obs[rows], "actions": self.actions[rows],
                "rewards": self.rewards[rows], "next_obs": self.next_obs[rows],
                "terminated": self.terminated[rows],
                "behaviour_probs": self.behaviour_probs[rows], "valid": valid}


def n_step_target(rewards: torch.Tensor, terminated: torch.Tensor, valid: torch.Tensor,
                  bootstrap: torch.Tensor, *, gamma: float) -> torch.Tensor:
    """G = sum_{k<L} gamma^k r_k + gamma^L (1 - terminated_{L-1}) bootstrap_{L-1} (module
    docstring), all (b, n): ``bootstrap[:, k]`` the value of s_{k+1} (max_a Q_target), L the
    valid steps of each row (a prefix, the first always valid)."""
    n = rewards.shape[1]
    g = torch.zeros_like(rewards[:, 0])
    for k in reversed(range(n)):
        more = valid[:, k + 1] if k + 1 < n else torch.zeros_like(valid[:, k])
        tail = torch.where(more, g, bootstrap[:, k])
        g = rewards[:, k] + gamma * (1.0 - terminated[:, k]) * tail
    return g


def retrace_target(rewards: torch.Tensor, terminated: torch.Tensor, valid: torch.Tensor,
                   next_q: torch.Tensor, next_pi: torch.Tensor, next_actions: torch.Tensor,
                   next_mu: torch.Tensor, *, gamma: float, lam: float) -> torch.Tensor:
    """Retrace(lambda)'s Q_ret_0 (module docstring), computed backward over the n steps:
    ``next_q[:, k]`` and ``next_pi[:, k]`` (b, n, |A|) are Q_target(s_{k+1}, .) and
    pi(. | s_{k+1}); ``next_actions[:, k]`` and ``next_mu[:, k]`` (b, n) are a_{k+1} and
    mu(a_{k+1} | s_{k+1}) (the last column unread); rewards, terminated, valid as
    ``n_step_target``'s."""
    n = rewards.shape[1]
    expected = (next_pi * next_q).sum(dim=-1)  # E_pi Q_target(s_{k+1}, .)
    g = torch.zeros_like(rewards[:, 0])
    for k in reversed(range(n)):
        tail = expected[:, k]
        if k + 1 < n:
            a = next_actions[:, k].unsqueeze(1)
            q_taken = next_q[:, k].gather(1, a).squeeze(1)
            c = lam * torch.clamp(next_pi[:, k].gather(1, a).squeeze(1) / next_mu[:, k],
                                  max=1.0)
            tail = torch.where(valid[:, k + 1], tail + c * (g - q_taken), tail)
        g = rewards[:, k] + gamma * (1.0 - terminated[:, k]) * tail
    return g


@torch.no_grad()
def multi_step_target(batch: dict[str, torch.Tensor], *, kind: str, gamma: float,
                      target: nn.Module, online: nn.Module | None = None,
                      lam: float = 1.0) -> torch.Tensor:
    """The ``n_step`` or ``retrace`` target of a ``sample_sequences`` batch: Q_target at every
    s_{k+1}; ``n_step`` bootstraps with max_a Q_target (``online`` given: double DQN's
    a* = argmax_a Q_online); ``retrace`` with pi the target network's greedy policy."""
    next_obs = batch["next_obs"]
    b, n, _ = next_obs.shape
    flat = next_obs.reshape(b * n, -1)
    next_q = target(flat).reshape(b, n, -1)
    if kind == "n_step":
        if online is None:
            bootstrap = next_q.max(dim=-1).values
        else:
            best = online(flat).reshape(b, n, -1).argmax(dim=-1, keepdim=True)
            bootstrap = next_q.gather(-1, best).squeeze(-1)
        return n_step_target(batch["rewards"], batch["terminated"], batch["valid"],
                             bootstrap, gamma=gamma)
    if kind == "retrace":
        greedy = F.one_hot(next_q.argmax(dim=-1), next_q.shape[-1]).to(next_q.dtype)
        next_actions = torch.zeros_like(batch["actions"])
        next_actions[:, :-1] = batch["actions"][:, 1:]
        next_mu = torch.ones_like(batch["behaviour_probs"])
        next_mu[:, :-1] = batch["behaviour_probs"][:, 1:]
        return retrace_target(batch["rewards"], batch["terminated"], batch["valid"], next_q,
                              greedy, next_actions, next_mu, gamma=gamma, lam=lam)
    raise ValueError(f"target must be 'n_step' or 'retrace', got {kind!r}")


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
    return act_with_probs(q_net, obs, epsilon, generator)[0]


@torch.no_grad()
def act_with_probs(q_net: nn.Module, obs: torch.Tensor, epsilon: float,
                   generator: torch.Generator | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``act``'s actions (the same draws) and the probability mu(a|s) the epsilon-greedy
    policy gave each: 1 - epsilon + epsilon / n_actions for the greedy action, else
    epsilon / n_actions."""
    q = q_net(obs)
    n, n_actions = q.shape
    explore = torch.rand(n, generator=generator, device=obs.device, dtype=q.dtype) < epsilon
    random = torch.randint(0, n_actions, (n,), generator=generator, device=obs.device)
    greedy = q.argmax(dim=1)
    actions = torch.where(explore, random, greedy)
    probs = torch.where(actions == greedy, 1.0 - epsilon + epsilon / n_actions,
                        epsilon / n_actions).to(q.dtype)
    return actions, probs
