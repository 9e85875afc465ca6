"""The true advantage of a step, against which step-level estimators are measured.

For a fixed policy pi (a function of what a row observes) on one instance (key-door, tool-use
puzzle: any ``environment.AgentEnv``) with the undiscounted return and a ``max_steps`` limit,
the advantage of action a in state s after t moves is A_t(s, a) = Q_t(s, a) - V_t(s), with

    Q_t(s, a) = r(s, a) + [s' not terminal] V_{t+1}(s'),    V_t(s) = sum_a pi(a | s) Q_t(s, a),
    V_{max_steps}(s) = 0,

s' the state the move leads to and r = 1 where it reaches the goal.

- ``exact_advantages``: dynamic programming over (moves made, key held, cell), exact for a
  small key-door instance.
- ``exact_advantages_over``: the same for any environment, over a given list of its observed
  states (closed under its moves), the moves taken by the environment itself and the next
  state found by its anchor key.
- ``monte_carlo_advantages``: the protocol that works where no table fits. It restores each
  sampled state in ``n`` rows (``set_state``; ``make_env`` builds the environment), takes the
  action and follows pi to the episode's end for Q, and follows pi from the state for V:
  A = mean(Q) - mean(V) with its standard error sqrt(var(Q)/n + var(V)/n), the two sets
  independent.

- ``q_and_v_returns``: the returns behind it, (K, n) for Q and for V, for states of many
  instances at once (each state with its own instance and instance id), so a caller can average
  the first N <= n of them for several N (``workbench credit``).

tests/test_agent_ground_truth.py checks that the Monte Carlo protocol recovers the exact
advantages within its interval (key-door and tool-use), and that the two exact ones agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from workbench.testbeds.agent.environment import AgentEnv, EnvFactory, Instance
from workbench.testbeds.agent.keydoor import MOVES, KeyDoor, Layout

#: pi: the action probabilities (rows, actions) of every row of ``env`` in its current state
PolicyProbs = Callable[[AgentEnv], torch.Tensor]


def exact_advantages(layout: Layout, probs_of: PolicyProbs, max_steps: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(V, Q): V[t, key, row, col] and Q[t, key, row, col, action] for t = 0 .. max_steps
    (Q to max_steps - 1), on the cells the agent can stand on (others are 0)."""
    n = layout.size
    cells = [(r, c) for r in range(n) for c in range(n) if not layout.walls[r, c]]
    states = [(key, r, c) for key in (0, 1) for r, c in cells]
    env = KeyDoor([layout] * len(states), max_steps)
    env.set_state(torch.tensor([[r, c, key, 0, 0] for key, r, c in states]))
    pi = probs_of(env).double().numpy()
    policy = np.zeros((2, n, n, len(MOVES)))
    for (key, r, c), p in zip(states, pi, strict=True):
        policy[key, r, c] = p
    nxt = {}  # (key, r, c, a) -> (key', r', c', reward, terminal)
    for key, r, c in states:
        for a, (dr, dc) in enumerate(MOVES):
            cell = (r + dr, c + dc)
            if layout.walls[cell] or (cell == layout.door and not key):
                cell = (r, c)
            held = int(key or cell == layout.key)
            goal = cell == layout.goal
            nxt[key, r, c, a] = (held, *cell, float(goal), goal)
    value = np.zeros((max_steps + 1, 2, n, n))
    q = np.zeros((max_steps, 2, n, n, len(MOVES)))
    for t in range(max_steps - 1, -1, -1):
        for key, r, c in states:
            for a in range(len(MOVES)):
                held, r2, c2, reward, terminal = nxt[key, r, c, a]
                q[t, key, r, c, a] = reward + (0.0 if terminal else value[t + 1, held, r2, c2])
            value[t, key, r, c] = policy[key, r, c] @ q[t, key, r, c]
    return value, q


def exact_advantages_over(instance: Instance, states: torch.Tensor, probs_of: PolicyProbs,
                          max_steps: int, make_env: EnvFactory
                          ) -> tuple[np.ndarray, np.ndarray]:
    """(V, Q): V[t, s] and Q[t, s, a] for t = 0 .. max_steps (Q to max_steps - 1) over the S
    observed ``states`` of ``instance`` (``get_state`` rows, episodes not ended), which must
    hold every state their actions lead to (ValueError names one that is missing)."""
    count = len(states)
    probe = make_env([instance] * count, max_steps, instance_ids=[0] * count)
    probe.set_state(states)
    index = {key: i for i, key in enumerate(probe.anchor_keys().tolist())}
    if len(index) != count:
        raise ValueError("states must be distinct observed states (their anchor keys repeat)")
    pi = probs_of(probe).double().numpy()
    actions = probe.n_actions
    moved = make_env([instance] * count * actions, max_steps,
                     instance_ids=[0] * count * actions)
    moved.set_state(states.repeat_interleave(actions, dim=0))
    result = moved.step(torch.arange(actions).repeat(count))
    missing = [key for key in moved.anchor_keys().tolist() if key not in index]
    if missing:
        raise ValueError(f"states lack a state their moves lead to (anchor key {missing[0]})")
    following = np.array([index[key] for key in moved.anchor_keys().tolist()]).reshape(
        count, actions)
    reward = result.reward.double().numpy().reshape(count, actions)
    ends = result.terminated.numpy().reshape(count, actions)
    value = np.zeros((max_steps + 1, count))
    q = np.zeros((max_steps, count, actions))
    for t in range(max_steps - 1, -1, -1):
        q[t] = reward + np.where(ends, 0.0, value[t + 1][following])
        value[t] = (pi * q[t]).sum(axis=1)
    return value, q


def monte_carlo_advantages(layout: Instance, probs_of: PolicyProbs, max_steps: int,
                           states: torch.Tensor, actions: torch.Tensor, n: int,
                           generator: torch.Generator, make_env: EnvFactory = KeyDoor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, standard error), each (K,), for the K ``states`` (``get_state`` rows of
    ``layout``, episodes not ended) and ``actions``, from ``n`` continuations each for Q and
    for V (see the module docstring)."""
    q_returns, v_returns = q_and_v_returns([layout] * len(states), probs_of, max_steps, states,
                                           actions, n, generator, make_env=make_env)
    advantage = q_returns.mean(dim=1) - v_returns.mean(dim=1)
    stderr = torch.sqrt(q_returns.var(dim=1) / n + v_returns.var(dim=1) / n)
    return advantage, stderr


def q_and_v_returns(instances: Sequence[Instance], probs_of: PolicyProbs, max_steps: int,
                    states: torch.Tensor, actions: torch.Tensor, n: int,
                    generator: torch.Generator, instance_ids: Sequence[int] | None = None,
                    device: str | torch.device = "cpu", make_env: EnvFactory = KeyDoor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q returns, V returns), each (K, n) float64: for state k (of ``instances[k]``, named
    ``instance_ids[k]`` in the environment ``probs_of`` sees), ``n`` returns to the episode's
    end after taking ``actions[k]`` and ``n`` after following pi from the state; each set of
    K n continuations is stepped as one batch."""
    k = len(states)
    rows = [instance for instance in instances for _ in range(n)]
    ids = None if instance_ids is None else [i for i in instance_ids for _ in range(n)]
    repeated = states.repeat_interleave(n, dim=0)
    q_returns = _returns(rows, ids, probs_of, max_steps, repeated, actions.repeat_interleave(n),
                         generator, device, make_env).view(k, n)
    v_returns = _returns(rows, ids, probs_of, max_steps, repeated, None, generator, device,
                         make_env).view(k, n)
    return q_returns, v_returns


def _returns(instances: Sequence[Instance], instance_ids: Sequence[int] | None,
             probs_of: PolicyProbs, max_steps: int, states: torch.Tensor,
             first: torch.Tensor | None, generator: torch.Generator,
             device: str | torch.device, make_env: EnvFactory) -> torch.Tensor:
    """The return from each restored state to the episode's end: ``first`` as the first
    action where given, pi's samples after."""
    env = make_env(instances, max_steps, device, instance_ids=instance_ids)
    env.set_state(states)
    total = torch.zeros(len(states), dtype=torch.float64, device=env.device)
    with torch.no_grad():
        if first is not None:
            total += env.step(first).reward.double()
        while not bool(env.done.all()):
            total += env.step(_sample(probs_of(env), generator)).reward.double()
    return total.cpu()


def _sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One action per row drawn from its probabilities by the inverse of their cumulative
    sum (a uniform draw per row): the law of ``torch.multinomial``, ten times faster on
    many rows."""
    uniform = torch.rand(len(probs), 1, generator=generator, device=probs.device,
                         dtype=probs.dtype)
    return (probs.cumsum(dim=1)[:, :-1] < uniform).sum(dim=1)
