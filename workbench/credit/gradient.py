"""The bias of the policy gradient an advantage estimator gives, against the exact gradient.

For a policy pi_theta (``Policy``: its action network's parameters theta, P of them) on I
instances of an agent testbed whose states can be enumerated (key-door, tool-use puzzle), with
the undiscounted return J_i = E[sum_t r_t] of instance i within ``max_steps`` moves:

- the true gradient, by dynamic programming (``exact_gradient``): the reachable observed
  states s of each instance (breadth first from its start, by anchor key), the time-indexed
  tables Q_t(s, a), V_t(s) = sum_a pi(a | s) Q_t(s, a) of ``ground_truth``, the probability
  d_t(s) of standing in s before move t (d_0 the start; mass moves on by pi and stops at the
  goal), and

      g = (1 / I) sum_i sum_t sum_s d_t(s) sum_a pi(a | s) A_t(s, a) grad log pi(a | s),
      A_t = Q_t - V_t

  (the policy gradient theorem for a finite horizon: an exact expectation, nothing sampled);
- a batch's estimate (``batch_gradient``), over its R = I x G rows (G per instance) with an
  estimator's step advantages Â:

      ĝ = (1 / R) sum_rows sum_t mask_t Â_t grad log pi(a_t | s_t);

- B independent batches give ĝ_1 .. ĝ_B, their mean ḡ and the spread
  s² = sum_b ‖ĝ_b − ḡ‖² / (B − 1); ``measure`` reports, each against g:

  * ``grad_cosine`` = ⟨ḡ, g⟩ / (‖ḡ‖ ‖g‖): whether the expected update points the true way
    (below 1 also from ḡ's own noise at small B);
  * ``grad_rel_bias`` = sign(b²) sqrt(|b²|), b² = (‖ḡ − g‖² − s² / B) / ‖g‖²: the relative
    norm ‖E[ĝ] − g‖ / ‖g‖ of the bias, its square estimated without bias (E‖ḡ − g‖² is the
    squared bias plus tr Cov(ĝ) / B, and s² / B estimates the second term), so an unbiased
    estimator's is about 0 either side and its interval covers 0;
  * ``grad_scale`` = ⟨ḡ, g⟩ / ‖g‖²: the length of E[ĝ] along g (1 without bias; a method
    that divides by a group's standard deviation or shrinks its baseline is off 1 by that).

  * ``grad_turn_bias`` = ⟨ḡ, u⟩ / ‖u‖², u = ∇T − (⟨∇T, g⟩ / ‖g‖²) g, where ∇T is the exact
    gradient of the expected turn count T = E[L] (L: the moves an episode plays, at most
    ``max_steps``; ``turn_gradient``: the same dynamic programming with a reward of 1 per
    move, Q^L_t(s, a) = 1 + V^L_{t+1}(s') unless the move reaches the goal) and u is its part
    orthogonal to the true gradient: the turn-count bias, the coefficient of the expected
    update along the turn-count direction the true gradient does not have. Its unit is reward
    per turn: an estimator that adds to the exact advantage the reward-to-go of a constant
    reward c per turn, Â_t = A_t + c (L − t) (t counted from 0), has E[ĝ] = g + c ∇T (the
    policy gradient theorem for the return sum_t c), hence grad_turn_bias = c exactly; a
    constant added to every step (Â_t = A_t + c) or any baseline b(s_t) adds nothing
    (E[grad log pi(a_t | s_t) | s_t] = 0), and a uniform scale (E[ĝ] = k g) has no part along
    u, so an unbiased estimator and Dr. GRPO's (G − 1) / G give about 0, and a per-turn
    construction that pays (or charges) turns gives its rate. GRPO's division by each group's
    std is not a uniform scale (each instance's term weighed by its own 1 / std, which depends
    on how often, so how soon, its rollouts succeed) and can have a turn-count bias. Not
    defined (nan) when ∇T is parallel to g (u = 0). It is linear in ḡ, so without bias in the
    estimate; one direction of the bias, not all of it (grad_rel_bias is all of it).

  Intervals: the B batches resampled with replacement (``stats.resample_indices``) and each
  statistic recomputed, the (1 − c)/2 and (1 + c)/2 quantiles (percentile bootstrap). A
  resample's mean is noisier than ḡ, so the resampled cosines run lower than the point, whose
  interval can end just below it (and grad_rel_bias's can start just above it): read the
  interval's width, not its exact position.

An unbiased estimator (the exact advantage A_t(s_t, a_t): ``exact_step_advantages``, or the
undiscounted reward-to-go without a bootstrap, a baseline that does not depend on the action)
has grad_rel_bias about 0 and grad_scale about 1; tests/test_credit_gradient_bias.py checks
that, and that a biased one is told apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from workbench.common import seeds
from workbench.credit.checkpoint import agent_task
from workbench.credit.plan import INDEPENDENT, RUBRIC_INPUTS, CreditPlan
from workbench.credit.sampling import _advantages
from workbench.stats import aggregates as stats
from workbench.testbeds.agent.environment import EnvFactory, Instance
from workbench.testbeds.agent.episodes import play
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.shared.advantage_batch import episode_batch

METRICS = {
    "grad_cosine": "cosine(E[ĝ], ∇J)",
    "grad_rel_bias": "‖E[ĝ] − ∇J‖ / ‖∇J‖",
    "grad_scale": "⟨E[ĝ], ∇J⟩ / ‖∇J‖²",
    "grad_turn_bias": "turn-count bias ⟨E[ĝ], u⟩ / ‖u‖²",
}
MAX_STATES = 100_000  # reachable states of one instance the exact gradient enumerates
_UNLIMITED = 10**9  # the horizon the enumeration steps under (no move is cut short there)


@dataclass
class InstanceTables:
    """One instance's enumerated states and their time-indexed tables."""

    states: torch.Tensor  # (S, state) get_state rows, the start first
    keys: dict[int, int]  # anchor key -> index into states
    probs: np.ndarray  # (S, A) pi(a | s)
    following: np.ndarray  # (S, A) the state each move leads to
    ends: np.ndarray  # (S, A) bool: the move reaches the goal
    value: np.ndarray  # (T + 1, S) V_t(s)
    q: np.ndarray  # (T, S, A) Q_t(s, a)
    visits: np.ndarray  # (T, S) d_t(s)
    turns_value: np.ndarray  # (T + 1, S) V^L_t(s): the expected moves still to play from s
    turns_q: np.ndarray  # (T, S, A) Q^L_t(s, a) = 1 + V^L_{t+1}(s') (the move itself counts)


def reachable_states(instance: Instance, make_env: EnvFactory) -> torch.Tensor:
    """(S, state) the ``get_state`` rows of every observed state reachable from the
    instance's start (one per anchor key, the first found breadth first; the start first);
    a ValueError past ``MAX_STATES``."""
    env = make_env([instance], _UNLIMITED, instance_ids=[0])
    env.reset()
    found = [env.get_state()]
    seen = set(env.anchor_keys().tolist())
    frontier = found[0]
    actions = env.n_actions
    while len(frontier):
        moved = make_env([instance] * len(frontier) * actions, _UNLIMITED,
                         instance_ids=[0] * len(frontier) * actions)
        moved.set_state(frontier.repeat_interleave(actions, dim=0))
        moved.step(torch.arange(actions).repeat(len(frontier)))
        keys, states = moved.anchor_keys().tolist(), moved.get_state()
        fresh = []
        for row, key in enumerate(keys):
            if key not in seen:
                seen.add(key)
                fresh.append(row)
        frontier = states[fresh]
        found.append(frontier)
        if len(seen) > MAX_STATES:
            raise ValueError(f"more than {MAX_STATES} reachable states: too large for the "
                             "exact gradient")
    return torch.cat(found)


def instance_tables(instance: Instance, policy: Policy, max_steps: int, make_env: EnvFactory,
                    device: torch.device | str = "cpu") -> InstanceTables:
    """The enumerated states of ``instance``, pi on them, and V, Q and d by dynamic
    programming (the module docstring)."""
    states = reachable_states(instance, make_env)
    count = len(states)
    probe = make_env([instance] * count, max_steps, device, instance_ids=[0] * count)
    probe.set_state(states)
    keys = {key: i for i, key in enumerate(probe.anchor_keys().tolist())}
    with torch.no_grad():
        probs = torch.softmax(policy.net(probe.observe()).double(), dim=1).cpu().numpy()
    actions = probe.n_actions
    moved = make_env([instance] * count * actions, _UNLIMITED,
                     instance_ids=[0] * count * actions)
    moved.set_state(states.repeat_interleave(actions, dim=0))
    result = moved.step(torch.arange(actions).repeat(count))
    following = np.array([keys[key] for key in moved.anchor_keys().tolist()]).reshape(
        count, actions)
    reward = result.reward.double().cpu().numpy().reshape(count, actions)
    ends = result.terminated.cpu().numpy().reshape(count, actions)
    # the goal, reached only by ending, is never stood on (its row moves nothing, gains 0)
    value = np.zeros((max_steps + 1, count))
    q = np.zeros((max_steps, count, actions))
    for t in range(max_steps - 1, -1, -1):
        q[t] = reward + np.where(ends, 0.0, value[t + 1][following])
        value[t] = (probs * q[t]).sum(axis=1)
    turns_value = np.zeros((max_steps + 1, count))
    turns_q = np.zeros((max_steps, count, actions))
    for t in range(max_steps - 1, -1, -1):  # a reward of 1 per move: the turn count
        turns_q[t] = 1.0 + np.where(ends, 0.0, turns_value[t + 1][following])
        turns_value[t] = (probs * turns_q[t]).sum(axis=1)
    visits = np.zeros((max_steps, count))
    visits[0, 0] = 1.0
    for t in range(max_steps - 1):
        flow = visits[t][:, None] * probs * ~ends
        visits[t + 1] = np.bincount(following.ravel(), weights=flow.ravel(), minlength=count)
    return InstanceTables(states, keys, probs, following, ends, value, q, visits, turns_value,
                          turns_q)


def parameters(policy: Policy) -> list[torch.nn.Parameter]:
    """theta: the action network's parameters (not a value head's)."""
    return list(policy.net.parameters())


def _flat_grad(objective: torch.Tensor, policy: Policy) -> np.ndarray:
    grads = torch.autograd.grad(objective, parameters(policy))
    return torch.cat([g.reshape(-1) for g in grads]).double().cpu().numpy()


def _theorem(policy: Policy, instance: Instance, table: InstanceTables, q: np.ndarray,
             value: np.ndarray, max_steps: int, make_env: EnvFactory,
             device: torch.device | str) -> np.ndarray:
    """sum_t sum_s d_t(s) sum_a pi(a | s) (q_t(s, a) − value_t(s)) grad log pi(a | s)."""
    advantage = q - value[:-1, :, None]
    weight = (table.visits[:, :, None] * table.probs[None] * advantage).sum(axis=0)
    probe = make_env([instance] * len(table.states), max_steps, device,
                     instance_ids=[0] * len(table.states))
    probe.set_state(table.states)
    log_probs = torch.log_softmax(policy.net(probe.observe()), dim=1)
    objective = (torch.as_tensor(weight, dtype=log_probs.dtype, device=log_probs.device)
                 * log_probs).sum()
    return _flat_grad(objective, policy)


def exact_gradient(policy: Policy, instances: Sequence[Instance], max_steps: int,
                   make_env: EnvFactory, device: torch.device | str = "cpu"
                   ) -> tuple[np.ndarray, list[InstanceTables]]:
    """(g, each instance's tables): g = (1 / I) sum_i grad J_i (the module docstring)."""
    total, tables = None, []
    for instance in instances:
        table = instance_tables(instance, policy, max_steps, make_env, device)
        grad = _theorem(policy, instance, table, table.q, table.value, max_steps, make_env,
                        device)
        total = grad if total is None else total + grad
        tables.append(table)
    return total / len(instances), tables


def turn_gradient(policy: Policy, instances: Sequence[Instance],
                  tables: Sequence[InstanceTables], max_steps: int, make_env: EnvFactory,
                  device: torch.device | str = "cpu") -> np.ndarray:
    """∇T = (1 / I) sum_i grad E[L_i]: the exact gradient of the expected turn count (moves
    played, at most ``max_steps``) by the policy gradient theorem on the tables' Q^L, V^L."""
    total = sum(_theorem(policy, instance, table, table.turns_q, table.turns_value, max_steps,
                         make_env, device) for instance, table in zip(instances, tables,
                                                                     strict=True))
    return total / len(instances)


def exact_step_advantages(states: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor,
                          row_instance: Sequence[int], tables: Sequence[InstanceTables],
                          make_env: EnvFactory, instances: Sequence[Instance],
                          max_steps: int, turns: bool = False) -> torch.Tensor:
    """(B, T) the exact A_t(s_t, a_t) of every played step of a batch (``Episodes.states``,
    ``actions``, ``mask``; row b plays ``instances[row_instance[b]]``), 0 elsewhere; with
    ``turns``, the turn count's Q^L_t − V^L_t instead (the advantage of 1 per move)."""
    rows, steps = actions.shape
    out = np.zeros((rows, steps))
    played = mask.cpu().numpy() != 0
    of_row = np.asarray(row_instance)
    for i in np.unique(of_row).tolist():
        r, t = np.nonzero(played & (of_row == i)[:, None])
        if len(r) == 0:
            continue
        probe = make_env([instances[i]] * len(r), max_steps, instance_ids=[0] * len(r))
        probe.set_state(states.cpu()[torch.as_tensor(r), torch.as_tensor(t)])
        index = np.array([tables[i].keys[key] for key in probe.anchor_keys().tolist()])
        a = actions.cpu().numpy()[r, t]
        q, value = ((tables[i].turns_q, tables[i].turns_value) if turns
                    else (tables[i].q, tables[i].value))
        out[r, t] = q[t, index, a] - value[t, index]
    return torch.as_tensor(out)


def batch_gradient(policy: Policy, obs: torch.Tensor, actions: torch.Tensor,
                   mask: torch.Tensor, advantages: torch.Tensor) -> np.ndarray:
    """ĝ = (1 / R) sum_rows sum_t mask Â grad log pi(a_t | s_t) of a batch's (R, T) steps."""
    log_probs = torch.log_softmax(policy.net(obs), dim=-1).gather(
        -1, actions.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    weight = (advantages.to(log_probs) * mask.to(log_probs)).detach()
    return _flat_grad((weight * log_probs).sum() / len(actions), policy)


def turn_direction(truth: np.ndarray, turns: np.ndarray | None) -> np.ndarray | None:
    """u = ∇T − (⟨∇T, g⟩ / ‖g‖²) g: the turn-count gradient's part orthogonal to the truth
    (None without ∇T or when that part vanishes)."""
    if turns is None:
        return None
    norm2 = float(truth @ truth)
    u = turns - (float(turns @ truth) / norm2) * truth if norm2 > 0 else turns
    return u if float(u @ u) > 1e-12 * max(float(turns @ turns), 1e-300) else None


def statistics(estimates: np.ndarray, counts: np.ndarray, truth: np.ndarray,
               turns: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """metric -> (R,) for R weightings ``counts`` (R, B) of the B batch estimates (B, P):
    each a multiset of the batches (every row sums to B); ``turns`` the turn-count gradient
    ∇T (P,) (without it grad_turn_bias is nan)."""
    size = estimates.shape[0]
    mean = counts @ estimates / size  # (R, P)
    squares = counts @ np.einsum("bp,bp->b", estimates, estimates)  # sum_b c_b ‖ĝ_b‖²
    spread = (squares - size * np.einsum("rp,rp->r", mean, mean)) / (size - 1)
    norm2 = float(truth @ truth)
    along = mean @ truth
    error2 = np.einsum("rp,rp->r", mean - truth, mean - truth)
    bias2 = (error2 - spread / size) / norm2
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = along / (np.sqrt(np.einsum("rp,rp->r", mean, mean)) * np.sqrt(norm2))
    u = turn_direction(truth, turns)
    turn_bias = (mean @ u / float(u @ u) if u is not None
                 else np.full(len(mean), np.nan))
    return {"grad_cosine": cosine, "grad_rel_bias": np.sign(bias2) * np.sqrt(np.abs(bias2)),
            "grad_scale": along / norm2, "grad_turn_bias": turn_bias}


def measure(estimates: np.ndarray, truth: np.ndarray, confidence: float, resamples: int,
            rng: np.random.Generator, turns: np.ndarray | None = None
            ) -> dict[str, tuple[float, float, float]]:
    """metric -> (point estimate, low, high) for B >= 2 batch estimates (B, P) against the
    true gradient (P,) and, for grad_turn_bias, the turn-count gradient ``turns`` (P,) (the
    module docstring)."""
    size = estimates.shape[0]
    if size < 2:
        raise ValueError("the bias needs two batches or more")
    picks = stats.resample_indices(size, resamples, rng)
    counts = np.stack([np.bincount(row, minlength=size) for row in picks]).astype(float)
    point = statistics(estimates, np.ones((1, size)), truth, turns)
    boot = statistics(estimates, counts, truth, turns)
    alpha = (1.0 - confidence) / 2.0
    out = {}
    for name in METRICS:
        values = boot[name][np.isfinite(boot[name])]
        low, high = ((float(v) for v in np.quantile(values, [alpha, 1.0 - alpha]))
                     if values.size else (float("nan"),) * 2)
        out[name] = (float(point[name][0]), low, high)
    return out


# ------------------------------------------------------------------------- the credit study

EXACT = "(exact A_t)"  # the control row: the exact advantage (no estimator's label can be it)
BATCHES, BOOTSTRAP = 12, 13  # stream(seed, "rollouts", G, 12, b): batch b; 13: the bootstrap
COLUMNS = ["estimator", "G", "sampler", "instances", "batches",
           *(f"{m}{end}" for m in METRICS for end in ("", "_low", "_high")),
           "true_grad_norm", "rollout_success", "mean_turns"]


def study_rows(plan: CreditPlan, policy: Policy, instances: list[Instance], group_size: int,
               device: torch.device, truth: tuple[np.ndarray, list[InstanceTables]] | None
               = None) -> tuple[list[dict], tuple[np.ndarray, list[InstanceTables]]]:
    """A row per estimator measured on independent rollouts (and one for the exact advantage,
    ``EXACT``) at G = ``group_size``: the three measures over ``plan.spec.gradient_batches``
    batches of G rollouts of each instance, with their intervals; and the exact gradient
    (computed once, then passed back in). Estimators measured on trees are left out (their
    rows are not independent trajectories)."""
    s, g, count = plan.spec, group_size, len(instances)
    task, max_steps = agent_task(plan), plan.task_params.max_steps
    if truth is None:
        truth = exact_gradient(policy, instances, max_steps, task.environment, device)
    exact, tables = truth
    turns = turn_gradient(policy, instances, tables, max_steps, task.environment, device)
    mine = [(e, i) for i, e in enumerate(plan.estimators) if e.sampler == INDEPENDENT]
    judged = any(RUBRIC_INPUTS & e.method.requirements(e.method.params) for e, _ in mine)
    row_instance = [i for i in range(count) for _ in range(g)]
    estimates: dict[str, list[np.ndarray]] = {EXACT: [], **{e.label: [] for e, _ in mine}}
    success, lengths = [], []
    for b in range(s.gradient_batches):
        env = task.environment([instances[i] for i in row_instance], max_steps, device,
                               instance_ids=row_instance)
        generator = seeds.torch_generator(s.seed, "rollouts", g, BATCHES, b, device=device)
        episodes = play(env, policy, generator, values=plan.critic,
                        judge=task.judge if judged else None)
        success.append(float(episodes.success.float().mean()))
        lengths.append(float(episodes.mask.sum(dim=1).float().mean()))
        groups = torch.as_tensor(row_instance, device=device)
        batch = episode_batch(episodes, groups)

        found = {EXACT: exact_step_advantages(episodes.states, episodes.actions, episodes.mask,
                                              row_instance, tables, task.environment,
                                              instances, max_steps)}
        for estimator, position in mine:
            found[estimator.label], _ = _advantages(plan, estimator, position, episodes, batch,
                                                    instances, policy, g, device,
                                                    keys=(BATCHES, b))
        for label, advantages in found.items():
            estimates[label].append(batch_gradient(policy, episodes.obs, episodes.actions,
                                                   episodes.mask,
                                                   advantages.to(episodes.mask.device)))
    rows = []
    for label, batches in estimates.items():
        rng = seeds.numpy_generator(s.seed, "rollouts", g, BOOTSTRAP)  # same per estimator
        measured = measure(np.stack(batches), exact, s.confidence, s.resamples, rng, turns)
        row = {"estimator": label, "G": g, "sampler": INDEPENDENT, "instances": count,
               "batches": s.gradient_batches, "true_grad_norm": float(np.linalg.norm(exact)),
               "rollout_success": float(np.mean(success)),
               "mean_turns": float(np.mean(lengths))}
        for metric, (point, low, high) in measured.items():
            row |= {metric: point, f"{metric}_low": low, f"{metric}_high": high}
        rows.append(row)
    return rows, truth
