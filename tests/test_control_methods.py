"""The methods that plug into the control testbed's policy-gradient loops (issue 9).

- advantage/gae, advantage/reward_to_go: values derived by hand for short rollouts with a
  termination, a truncation (bootstrapped from the final observation's value, not at the
  termination), the rollout cut and padding; the lambda = 1 / lambda = 0 special cases; and
  independent re-derivations of CleanRL ppo.py's GAE loop, Stable-Baselines3's truncation
  bootstrap and Spinning Up's per-episode ``finish_path``.
- entropy/*: schedules at given steps, Skywork-OR1's EntController, SAC's temperature against
  torch.optim.Adam on CleanRL's and Stable-Baselines3's losses and by hand.
- step_size/kl_adaptive: rl_games' AdaptiveScheduler rule driving torch.optim.Adam;
  step_size/pg_polyak: the step formula, its cap and fallback; both step-size contracts on a
  task that provides rl_stats and return_upper_bound.
"""

import math

import pytest
import torch

from workbench import families, registry
from workbench.hyperparams import HyperparameterError

F64 = torch.float64


def method(family, name, **params):
    return registry.get(family, name)(**params)


def tensor(rows):
    return torch.tensor(rows, dtype=F64)


def flags(rows):
    return torch.tensor(rows, dtype=torch.bool)


# advantage: hand-derived values ----------------------------------------------------------------

def hand_rollout():
    """Three environments, T = 4, gamma = lambda = 0.5 (exact in binary).

    row 0: terminates at t = 1 (no bootstrap), then the rollout is cut after t = 3
           (bootstrap from values[0, 4] = 2.5).
    row 1: truncated at t = 2: the final observation's value is 10 (next_values[1, 2]), while
           values[1, 3] = 4 is the value of the reset state; cut after t = 3 (values[1, 4] = 5).
    row 2: three valid steps then padding (mask 0 at t = 3, with junk there); the last valid
           step is not done, so it is cut and bootstraps from next_values[2, 2] = values[2, 3].
    """
    return {
        "rewards": tensor([[1, 2, 3, 4], [1, 1, 1, 1], [2, 0, 1, 99]]),
        "values": tensor([[0.5, 1.0, 1.5, 2.0, 2.5], [1, 2, 3, 4, 5], [1, 1, 1, 4, -7]]),
        "dones": flags([[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]),
        "terminated": flags([[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]),
        "next_values": tensor([[1.0, 1.5, 2.0, 2.5], [2, 3, 10, 5], [1, 1, 4, 55]]),
        "mask": tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]]),
    }


def test_gae_matches_values_derived_by_hand():
    # delta_t = r_t + gamma (1 - terminated_t) next_values_t - values_t; A_t = delta_t +
    # gamma lambda (1 - dones_t) A_{t+1}; gamma = lambda = 0.5, so gamma lambda = 0.25.
    # row 0: delta = [1 + .5*1 - .5, 2 + 0 - 1, 3 + .5*2 - 1.5, 4 + .5*2.5 - 2]
    #              = [1, 1, 2.5, 3.25]
    #        A3 = 3.25; A2 = 2.5 + .25*3.25 = 3.3125; A1 = 1 (terminated: cut);
    #        A0 = 1 + .25*1 = 1.25.  returns = A + V = [1.75, 2, 4.8125, 5.25]
    # row 1: delta = [1 + .5*2 - 1, 1 + .5*3 - 2, 1 + .5*10 - 3, 1 + .5*5 - 4]
    #              = [1, .5, 3, -.5]     (t = 2 bootstraps from 10, the final observation)
    #        A3 = -.5; A2 = 3 (truncated: cut); A1 = .5 + .25*3 = 1.25;
    #        A0 = 1 + .25*1.25 = 1.3125.  returns = [2.3125, 3.25, 6, 3.5]
    # row 2: delta = [2 + .5*1 - 1, 0 + .5*1 - 1, 1 + .5*4 - 1] = [1.5, -.5, 2], t = 3 padded
    #        A2 = 2; A1 = -.5 + .25*2 = 0; A0 = 1.5 + 0 = 1.5.  returns = [2.5, 1, 3, 0]
    advantages, returns = method("advantage", "gae", gamma=0.5, lam=0.5).compute(
        **hand_rollout())
    assert torch.equal(advantages, tensor([[1.25, 1, 3.3125, 3.25], [1.3125, 1.25, 3, -0.5],
                                           [1.5, 0, 2, 0]]))
    assert torch.equal(returns, tensor([[1.75, 2, 4.8125, 5.25], [2.3125, 3.25, 6, 3.5],
                                        [2.5, 1, 3, 0]]))


def test_reward_to_go_matches_values_derived_by_hand():
    # G_t = r_t + gamma (1 - dones_t) G_{t+1} + gamma [cut, not terminal]_t next_values_t
    # with gamma = 0.5.
    # row 0: G3 = 4 + .5*2.5 = 5.25 (cut); G2 = 3 + .5*5.25 = 5.625; G1 = 2 (terminated);
    #        G0 = 1 + .5*2 = 2.        A = G - V = [1.5, 1, 4.125, 3.25]
    # row 1: G3 = 1 + .5*5 = 3.5 (cut); G2 = 1 + .5*10 = 6 (truncated: final obs value 10);
    #        G1 = 1 + .5*6 = 4; G0 = 1 + .5*4 = 3.   A = [2, 2, 3, -.5]
    # row 2: G2 = 1 + .5*4 = 3 (last valid step, cut); G1 = 0 + .5*3 = 1.5;
    #        G0 = 2 + .5*1.5 = 2.75; padded t = 3 -> 0.   A = [1.75, .5, 2, 0]
    rollout = hand_rollout()
    returns_by_hand = tensor([[2, 2, 5.625, 5.25], [3, 4, 6, 3.5], [2.75, 1.5, 3, 0]])
    advantages, returns = method("advantage", "reward_to_go", gamma=0.5).compute(**rollout)
    assert torch.equal(returns, returns_by_hand)
    assert torch.equal(advantages, tensor([[1.5, 1, 4.125, 3.25], [2, 2, 3, -0.5],
                                           [1.75, 0.5, 2, 0]]))
    advantages, returns = method("advantage", "reward_to_go", gamma=0.5,
                                 baseline="none").compute(**rollout)
    assert torch.equal(advantages, returns_by_hand) and torch.equal(returns, returns_by_hand)
    # bootstrap=False: cut-off futures count 0 (textbook REINFORCE).
    # row 0: G3 = 4; G2 = 3 + .5*4 = 5; G1 = 2; G0 = 1 + .5*2 = 2
    # row 1: G3 = 1; G2 = 1 (truncated, no bootstrap); G1 = 1 + .5 = 1.5; G0 = 1 + .75 = 1.75
    # row 2: G2 = 1; G1 = .5; G0 = 2.25
    advantages, returns = method("advantage", "reward_to_go", gamma=0.5, bootstrap=False,
                                 baseline="none").compute(**rollout)
    assert torch.equal(returns, tensor([[2, 2, 5, 4], [1.75, 1.5, 1, 1], [2.25, 0.5, 1, 0]]))


def test_gamma_one_lambda_one_by_hand():
    # One row, no episode end, gamma = lambda = 1: rewards [1, 2, 3], values [1, 1, 1, 10].
    # reward-to-go with the bootstrap: G2 = 3 + 10 = 13, G1 = 2 + 13 = 15, G0 = 1 + 15 = 16.
    # GAE: delta = [1 + 1 - 1, 2 + 1 - 1, 3 + 10 - 1] = [1, 2, 12]; A = [15, 14, 12] = G - V.
    rollout = {"rewards": tensor([[1, 2, 3]]), "values": tensor([[1, 1, 1, 10]]),
               "dones": flags([[0, 0, 0]]), "terminated": flags([[0, 0, 0]]),
               "next_values": tensor([[1, 1, 10]])}
    advantages, returns = method("advantage", "gae", gamma=1.0, lam=1.0).compute(**rollout)
    assert torch.equal(advantages, tensor([[15, 14, 12]]))
    assert torch.equal(returns, tensor([[16, 15, 13]]))
    advantages, returns = method("advantage", "reward_to_go", gamma=1.0).compute(**rollout)
    assert torch.equal(returns, tensor([[16, 15, 13]]))
    assert torch.equal(advantages, tensor([[15, 14, 12]]))


@pytest.mark.parametrize("name", ["gae", "reward_to_go"])
def test_padding_never_reaches_valid_steps(name):
    rollout = hand_rollout()
    advantages, returns = method("advantage", name, gamma=0.5).compute(**rollout)
    junk = {k: v.clone() for k, v in rollout.items()}
    junk["rewards"][2, 3] = math.nan
    junk["values"][2, 4] = math.inf
    junk["next_values"][2, 3] = -math.inf
    junk["dones"][2, 3] = junk["terminated"][2, 3] = False
    moved_advantages, moved_returns = method("advantage", name, gamma=0.5).compute(**junk)
    assert torch.equal(moved_advantages, advantages) and torch.equal(moved_returns, returns)


def random_rollout(seed, rows=3, horizon=32, truncations=True, dtype=F64):
    """Seeded rollout: episode ends with probability 0.15 per step, half of them truncations
    (whose final-observation value differs from the next value in the row)."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(rows, horizon + 1, generator=gen, dtype=dtype)
    dones = torch.rand(rows, horizon, generator=gen) < 0.15
    terminated = dones & (torch.rand(rows, horizon, generator=gen) < 0.5) if truncations \
        else dones.clone()
    next_values = values[:, 1:].clone()
    truncated = dones & ~terminated
    next_values[truncated] = 5.0 * torch.randn(int(truncated.sum()), generator=gen, dtype=dtype)
    return {"rewards": torch.randn(rows, horizon, generator=gen, dtype=dtype), "values": values,
            "dones": dones, "terminated": terminated, "next_values": next_values}


@pytest.mark.parametrize("seed", range(4))
def test_gae_lambda_one_is_reward_to_go_minus_value_and_lambda_zero_the_td_error(seed):
    rollout = random_rollout(seed)
    rollout["mask"] = (torch.arange(32) < torch.tensor([[32], [20], [27]])).to(F64)
    for gamma in (1.0, 0.9):
        gae_one, gae_returns = method("advantage", "gae", gamma=gamma, lam=1.0).compute(
            **rollout)
        rtg, rtg_returns = method("advantage", "reward_to_go", gamma=gamma).compute(**rollout)
        assert torch.allclose(gae_one, rtg, rtol=0, atol=1e-12)
        assert torch.allclose(gae_returns, rtg_returns, rtol=0, atol=1e-12)
        td, _ = method("advantage", "gae", gamma=gamma, lam=0.0).compute(**rollout)
        bootstrap = torch.where(rollout["terminated"], 0.0, rollout["next_values"])
        delta = (rollout["rewards"] + gamma * bootstrap - rollout["values"][:, :-1])
        assert torch.allclose(td, delta * rollout["mask"], rtol=0, atol=1e-12)
    assert gae_one.abs().sum() > 0 and not torch.allclose(gae_one, td)


# advantage: the reference implementations' conventions, re-derived ---------------------------

def cleanrl_style_gae(rewards, values, step_dones, next_value, next_done, gamma, lam):
    """CleanRL ppo.py's GAE loop, in its own layout: (T, N) tensors, ``step_dones[t]`` flags
    that the observation of step t starts a new episode (the previous step was done, by
    termination or truncation alike), ``next_done`` that the last step was done,
    ``next_value`` the value of the observation after the last step. Stable-Baselines3's
    ``RolloutBuffer.compute_returns_and_advantage`` runs the same recursion (its
    ``episode_starts`` are these flags)."""
    horizon = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(next_value)
    for t in reversed(range(horizon)):
        if t == horizon - 1:
            alive, following = 1.0 - next_done, next_value
        else:
            alive, following = 1.0 - step_dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * following * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
    return advantages, advantages + values


def to_cleanrl_layout(rollout):
    """(rewards, values, step_dones, next_value, next_done) in CleanRL's (T, N) layout."""
    dones = rollout["dones"].to(F64)
    step_dones = torch.cat([torch.zeros_like(dones[:, :1]), dones[:, :-1]], dim=1)
    return (rollout["rewards"].T, rollout["values"][:, :-1].T, step_dones.T,
            rollout["values"][:, -1], dones[:, -1])


@pytest.mark.parametrize("seed", range(5))
def test_gae_matches_cleanrl_ppo_when_no_episode_is_truncated(seed):
    rollout = random_rollout(seed, truncations=False)
    ours, our_returns = method("advantage", "gae").compute(**rollout)
    theirs, their_returns = cleanrl_style_gae(*to_cleanrl_layout(rollout), 0.99, 0.95)
    assert torch.allclose(ours, theirs.T, rtol=0, atol=1e-12)
    assert torch.allclose(our_returns, their_returns.T, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_gae_with_truncations(seed):
    """CleanRL treats a truncation as a termination: passing terminated = dones gives its
    numbers exactly. Our default bootstraps from the final observation's value instead, which
    is Stable-Baselines3's fix (add gamma * V(final observation) to that step's reward, then
    the same recursion)."""
    rollout = random_rollout(seed)
    truncated = rollout["dones"] & ~rollout["terminated"]
    assert truncated.any()
    as_cleanrl = dict(rollout, terminated=rollout["dones"])
    ours, _ = method("advantage", "gae").compute(**as_cleanrl)
    theirs, _ = cleanrl_style_gae(*to_cleanrl_layout(rollout), 0.99, 0.95)
    assert torch.allclose(ours, theirs.T, rtol=0, atol=1e-12)

    bootstrapped = method("advantage", "gae").compute(**rollout)[0]
    assert not torch.allclose(bootstrapped, ours)
    sb3_rewards = rollout["rewards"] + 0.99 * torch.where(truncated, rollout["next_values"], 0.0)
    sb3, _ = cleanrl_style_gae(*to_cleanrl_layout(dict(rollout, rewards=sb3_rewards)),
                               0.99, 0.95)
    assert torch.allclose(bootstrapped, sb3.T, rtol=0, atol=1e-12)


def discount_cumsum(values, discount):
    out, running = [], 0.0
    for value in reversed(values):
        running = value + discount * running
        out.append(running)
    return out[::-1]


def spinning_up_style(rollout, gamma, lam, bootstrap=True):
    """Spinning Up's VPGBuffer.finish_path, one episode segment at a time: a segment ends
    where the episode ends or the rollout does; last_val = V(s_T) unless the segment ended in
    a terminal state (then 0); rewards and values get last_val appended; advantages are the
    discounted (gamma * lambda) sums of the TD errors, returns the discounted sums of the
    rewards without the appended last entry."""
    rows, horizon = rollout["rewards"].shape
    advantages = torch.zeros(rows, horizon, dtype=F64)
    returns = torch.zeros(rows, horizon, dtype=F64)
    for row in range(rows):
        begin = 0
        for t in range(horizon):
            if not (rollout["dones"][row, t] or t == horizon - 1):
                continue
            terminal = bool(rollout["terminated"][row, t])
            last_val = 0.0 if terminal or not bootstrap else float(rollout["next_values"][row, t])
            rews = rollout["rewards"][row, begin:t + 1].tolist() + [last_val]
            vals = rollout["values"][row, begin:t + 1].tolist() + [last_val]
            deltas = [rews[i] + gamma * vals[i + 1] - vals[i] for i in range(len(rews) - 1)]
            advantages[row, begin:t + 1] = tensor(discount_cumsum(deltas, gamma * lam))
            returns[row, begin:t + 1] = tensor(discount_cumsum(rews, gamma)[:-1])
            begin = t + 1
    return advantages, returns


@pytest.mark.parametrize("seed", range(4))
def test_gae_and_reward_to_go_match_spinning_up_finish_path(seed):
    rollout = random_rollout(seed)
    theirs, their_returns = spinning_up_style(rollout, 0.99, 0.95)
    ours, _ = method("advantage", "gae").compute(**rollout)
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    _, rtg = method("advantage", "reward_to_go").compute(**rollout)
    assert torch.allclose(rtg, their_returns, rtol=0, atol=1e-12)
    _, textbook = spinning_up_style(rollout, 0.99, 1.0, bootstrap=False)
    _, ours_textbook = method("advantage", "reward_to_go", bootstrap=False).compute(**rollout)
    assert torch.allclose(ours_textbook, textbook, rtol=0, atol=1e-12)


def test_reward_to_go_requirements_follow_its_settings():
    cls = registry.get("advantage", "reward_to_go")
    assert cls.requirements(cls().params) == {"rewards", "dones", "terminated", "next_values",
                                              "values"}
    textbook = cls(bootstrap=False, baseline="none")
    assert cls.requirements(textbook.params) == {"rewards", "dones"}
    rollout = random_rollout(0)
    _, returns = textbook.compute(rewards=rollout["rewards"], dones=rollout["dones"])
    assert returns.shape == rollout["rewards"].shape


def test_advantages_keep_the_dtype_of_the_rollout():
    rollout = random_rollout(1, dtype=torch.float32)
    for name in ("gae", "reward_to_go"):
        advantages, returns = method("advantage", name).compute(**rollout)
        assert advantages.dtype == returns.dtype == torch.float32


# entropy ---------------------------------------------------------------------------------------

def coefficients(entropy_method, entropies, total_steps=100):
    entropy_method.start({"total_steps": total_steps})
    return [entropy_method.coefficient(step, h) for step, h in enumerate(entropies)]


def test_none_and_constant_coefficients():
    assert coefficients(method("entropy", "none"), [0.5] * 5) == [0.0] * 5
    assert coefficients(method("entropy", "constant", coef=0.03), [0.1, 2.0, 0.0]) == [0.03] * 3


def test_linear_decay_at_given_steps():
    # T = 100, fraction 0.5: D = 50; coef = 0.002 + 0.008 * max(0, 1 - k / 50)
    schedule = method("entropy", "linear_decay", initial=0.01, final=0.002, fraction=0.5)
    values = coefficients(schedule, [1.0] * 81)
    assert values[0] == 0.01
    assert values[25] == pytest.approx(0.006, abs=1e-15)  # 0.002 + 0.008 * 0.5
    assert values[40] == pytest.approx(0.0036, abs=1e-15)  # 0.002 + 0.008 * 0.2
    assert values[50] == values[80] == 0.002
    assert all(a >= b for a, b in zip(values[:-1], values[1:], strict=True))
    assert coefficients(schedule, [1.0])[0] == 0.01  # start() resets


def test_exp_decay_at_given_steps():
    # T = 100, fraction 0.5: D = 50; coef = 0.01 * (1e-4 / 0.01) ** min(k / 50, 1)
    schedule = method("entropy", "exp_decay", initial=0.01, final=1e-4, fraction=0.5)
    values = coefficients(schedule, [1.0] * 61)
    assert values[0] == 0.01
    assert values[10] == pytest.approx(0.01 * 10 ** -0.4, rel=1e-12)  # 0.01 * 0.01 ** 0.2
    assert values[25] == pytest.approx(1e-3, rel=1e-12)  # halfway in log space
    assert values[50] == pytest.approx(1e-4, rel=1e-12) and values[60] == values[50]
    ratios = [values[k + 1] / values[k] for k in range(49)]
    assert max(ratios) == pytest.approx(min(ratios), rel=1e-9)  # a constant rate per update


def test_target_entropy_moves_the_coefficient_towards_the_target():
    controller = method("entropy", "target_entropy", target=0.5, delta=0.001, initial=0.002,
                        max_coef=0.004)
    # entropy below the target: the coefficient rises by delta per update, up to max_coef
    low = coefficients(controller, [0.2] * 5)
    assert low == pytest.approx([0.002, 0.003, 0.004, 0.004, 0.004], abs=1e-15)
    # entropy above the target: the bonus is switched off (gate) and the value falls
    controller.start({"total_steps": 100})
    high = [controller.coefficient(k, 0.9) for k in range(3)]
    assert high[0] == 0.002 and high[1:] == [0.0, 0.0]
    # the value went 0.002 -> 0.001 -> 0 -> 0 (clipped at min_coef 0); update 3 is still gated
    # by the entropy of update 2, then one entropy below the target raises it to 0.001
    assert controller.coefficient(3, 0.2) == 0.0
    assert controller.coefficient(4, 0.2) == pytest.approx(0.001, abs=1e-15)
    ungated = method("entropy", "target_entropy", target=0.5, delta=0.001, initial=0.002,
                     gate=False)
    assert coefficients(ungated, [0.9] * 4) == pytest.approx([0.002, 0.001, 0.0, 0.0])


class SkyworkEntController:
    """Skywork-OR1's EntController (verl/trainer/ppo/core_algos.py), re-derived: after each
    training step, the value moves by +delta if that step's entropy is below the target and
    by -delta otherwise, clipped to [min, max], and the entropy loss is enabled for the next
    step only if the entropy was below the target; a step's realised coefficient is
    value * enabled (dp_actor.py)."""

    def __init__(self, initial, max_coef, min_coef, delta, target):
        self.value, self.enabled = initial, 1
        self.max_coef, self.min_coef, self.delta, self.target = max_coef, min_coef, delta, target

    def realised(self):
        return self.value * self.enabled

    def update(self, entropy):
        self.value += self.delta if entropy < self.target else -self.delta
        self.value = min(max(self.value, self.min_coef), self.max_coef)
        self.enabled = int(entropy < self.target)


@pytest.mark.parametrize("gate", [True, False])
def test_target_entropy_matches_skywork_or1_controller(gate):
    entropies = [0.5 + 0.4 * math.sin(k / 3.0) for k in range(40)]
    ours = method("entropy", "target_entropy", target=0.45, delta=3e-4, initial=0.0,
                  min_coef=0.0, max_coef=0.002, gate=gate)
    reference = SkyworkEntController(0.0, 0.002, 0.0, 3e-4, 0.45)
    got = coefficients(ours, entropies)
    expected = []
    for entropy in entropies:
        expected.append(reference.realised() if gate else reference.value)
        reference.update(entropy)
    assert got == expected
    assert min(got) == 0.0 and max(got) == pytest.approx(0.002)  # both clips reached


def test_target_entropy_rejects_min_above_max():
    with pytest.raises(HyperparameterError, match="min_coef"):
        method("entropy", "target_entropy", min_coef=0.1, max_coef=0.01)


def test_sac_temperature_two_adam_steps_by_hand():
    # lr = 0.1, betas (0.9, 0.999), eps = 1e-8, log_alpha_0 = 0, target 0.5; CleanRL's loss
    # -alpha (log pi + target) with log pi = -H has d/dlog_alpha = alpha (H - target).
    # update 0: H = 1.0, returns alpha_0 = 1; g = 1 * 0.5 = 0.5
    #   m = 0.1 * 0.5 = 0.05, v = 0.001 * 0.25 = 0.00025
    #   log_alpha_1 = 0 - (0.1 / 0.1) * 0.05 / (sqrt(0.00025) / sqrt(0.001) + 1e-8)
    #               = -0.05 / (0.5 + 1e-8)
    # update 1: H = 0.2, returns alpha_1 = exp(log_alpha_1); g = alpha_1 * (0.2 - 0.5)
    #   m = 0.9 * 0.05 + 0.1 g, v = 0.999 * 0.00025 + 0.001 g^2
    #   log_alpha_2 = log_alpha_1 - (0.1 / 0.19) m / (sqrt(v) / sqrt(0.001999) + 1e-8)
    log_alpha_1 = -0.05 / (0.5 + 1e-8)
    alpha_1 = math.exp(log_alpha_1)
    g = alpha_1 * -0.3
    m, v = 0.045 + 0.1 * g, 0.999 * 0.00025 + 0.001 * g * g
    log_alpha_2 = log_alpha_1 - (0.1 / 0.19) * m / (math.sqrt(v) / math.sqrt(0.001999) + 1e-8)
    temperature = method("entropy", "sac_temperature", target=0.5, lr=0.1, initial_alpha=1.0)
    assert coefficients(temperature, [1.0, 0.2, 0.0]) == pytest.approx(
        [1.0, alpha_1, math.exp(log_alpha_2)], rel=1e-14)
    # the momentum of the first update still lowers alpha, by less: -0.0999 then -0.0234
    assert log_alpha_1 - 0.0 < log_alpha_2 - log_alpha_1 < 0
    rising = coefficients(temperature, [0.2] * 10)  # entropy below the target raises alpha
    falling = coefficients(temperature, [1.0] * 10)  # above it lowers alpha
    assert all(a < b for a, b in zip(rising[:-1], rising[1:], strict=True))
    assert all(a > b for a, b in zip(falling[:-1], falling[1:], strict=True))


@pytest.mark.parametrize("loss", ["alpha", "log_alpha"])
def test_sac_temperature_matches_torch_adam_on_the_reference_losses(loss):
    """CleanRL sac_continuous_action.py: alpha_loss = (-log_alpha.exp() * (log_pi + target))
    .mean(); Stable-Baselines3 sac.py: ent_coef_loss = -(log_ent_coef * (log_prob + target))
    .mean(); each minimised by torch.optim.Adam, with log_pi = -H."""
    entropies = [1.2 - 0.04 * k for k in range(30)]
    target, lr, initial = 0.6, 0.01, 0.5
    log_alpha = torch.full((1,), math.log(initial), dtype=F64, requires_grad=True)
    adam = torch.optim.Adam([log_alpha], lr=lr)
    expected = []
    for entropy in entropies:
        expected.append(float(log_alpha.detach().exp()))
        log_pi = torch.tensor([-entropy], dtype=F64)
        if loss == "alpha":
            objective = (-log_alpha.exp() * (log_pi + target)).mean()
        else:
            objective = -(log_alpha * (log_pi + target)).mean()
        adam.zero_grad()
        objective.backward()
        adam.step()
    ours = method("entropy", "sac_temperature", target=target, lr=lr, initial_alpha=initial,
                  loss=loss)
    assert coefficients(ours, entropies) == pytest.approx(expected, rel=1e-12)
    assert coefficients(ours, entropies)[0] == initial  # start() resets


# step_size/kl_adaptive -------------------------------------------------------------------------

def quadratic(dim=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(dim, dim, generator=gen, dtype=F64)
    a = a @ a.T / dim + 0.1 * torch.eye(dim, dtype=F64)
    b = torch.randn(dim, generator=gen, dtype=F64)
    x = torch.randn(dim, generator=gen, dtype=F64).requires_grad_(True)

    def loss(z):
        return 0.5 * z @ (a @ z) - b @ z

    def closure(backward=True):
        x.grad = None
        value = loss(x)
        if backward:
            value.backward()
        return value.detach()

    return x, loss, closure


def rl_games_adaptive(lr, kl, threshold, multiplier, min_lr, max_lr):
    """rl_games AdaptiveScheduler.update, re-derived."""
    if kl > 2.0 * threshold:
        lr = max(lr / multiplier, min_lr)
    if kl < 0.5 * threshold:
        lr = min(lr * multiplier, max_lr)
    return lr


def test_kl_adaptive_lr_moves_by_its_factor_at_the_thresholds_and_is_clamped():
    x, _, closure = quadratic()
    opt = method("step_size", "kl_adaptive", lr=1e-3, kl_target=0.01, factor=2.0, lr_min=2e-4,
                 lr_max=4e-3).build([x], {})
    seen = []
    for kl in (0.02, 0.0201, 0.005) + (0.0049,) * 4 + (0.1,) * 5 + (math.nan,):
        opt.step(closure)
        opt.observe({"approx_kl": kl, "episodic_return": 0.0, "update": 0})
        seen.append(opt.last_step_size)
    # 0.02 is not above 2 * 0.01; 0.0201 is: halve. 0.005 is not below 0.01 / 2; 0.0049 is:
    # double, up to lr_max = 4e-3; then halve down to lr_min = 2e-4; a NaN KL changes nothing.
    assert seen == pytest.approx([1e-3, 5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 4e-3, 2e-3, 1e-3, 5e-4,
                                  2.5e-4, 2e-4, 2e-4], rel=1e-15)
    assert max(seen) <= opt.param_groups[0]["lr_max"]


def test_kl_adaptive_matches_rl_games_scheduler_driving_torch_adam():
    kls = [0.001] * 5 + [0.05] * 9 + [0.008] * 3 + [0.003, 0.02, 0.012, 0.0] * 3 + [0.03]
    x, loss, closure = quadratic()
    y = x.detach().clone().requires_grad_(True)
    ours = method("step_size", "kl_adaptive", lr=3e-4, lr_min=1e-4, lr_max=1e-3).build([x], {})
    reference = torch.optim.Adam([y], lr=3e-4, betas=(0.9, 0.999), eps=1e-8)
    lr, hit = 3e-4, set()
    for kl in kls:
        ours.step(closure)
        reference.zero_grad()
        loss(y).backward()
        reference.step()
        ours.observe({"approx_kl": kl})
        lr = rl_games_adaptive(lr, kl, 0.008, 1.5, 1e-4, 1e-3)
        reference.param_groups[0]["lr"] = lr
        hit |= {lr} & {1e-4, 1e-3}
        assert ours.last_step_size == lr
        assert torch.equal(x.detach(), y.detach())
    assert hit == {1e-4, 1e-3} and len(kls) >= 30


def test_kl_adaptive_keeps_its_lr_across_state_dict_and_rejects_min_above_max():
    x, _, closure = quadratic()
    built = method("step_size", "kl_adaptive", lr=1e-3)
    opt = built.build([x], {})
    opt.step(closure)
    opt.observe({"approx_kl": 1.0})
    fresh = built.build([x], {})
    fresh.load_state_dict(opt.state_dict())
    assert fresh.last_step_size == pytest.approx(1e-3 / 1.5)
    with pytest.raises(HyperparameterError, match="lr_min"):
        method("step_size", "kl_adaptive", lr_min=0.1, lr_max=0.01)


# step_size/pg_polyak ---------------------------------------------------------------------------

def half_square(start):
    """f(x) = ||x||^2 / 2 from ``start``: the gradient is x itself."""
    x = torch.tensor(start, dtype=F64, requires_grad=True)

    def closure(backward=True):
        x.grad = None
        value = 0.5 * (x * x).sum()
        if backward:
            value.backward()
        return value.detach()

    return x, closure


def test_pg_polyak_step_is_the_formula_and_respects_its_cap():
    # J* = 500, J_hat = 100: gap 400; g = x = (30, 40), ||g||^2 = 2500, c = 0.5:
    # gamma = 400 / (0.5 * 2500 + 1e-8) = 0.32 (below the cap 1), x <- x - 0.32 x = (20.4, 27.2)
    x, closure = half_square([30.0, 40.0])
    opt = method("step_size", "pg_polyak", gamma_max=1.0).build(
        [x], {"return_upper_bound": 500.0})
    opt.step(closure)  # no return known yet: the default first step is gamma_max
    assert opt.last_step_size == 1.0 and torch.equal(x.detach(), torch.zeros(2, dtype=F64))
    x.data = tensor([30.0, 40.0])
    opt.observe({"approx_kl": 0.0, "episodic_return": 100.0, "update": 0})
    opt.step(closure)
    assert opt.last_step_size == pytest.approx(400 / (1250 + 1e-8), rel=1e-14)
    assert torch.allclose(x.detach(), tensor([20.4, 27.2]), rtol=0, atol=1e-7)
    # a NaN return (no episode finished in the rollout) keeps the estimate 100
    opt.observe({"episodic_return": math.nan})
    x.data = tensor([0.3, 0.4])  # ||g||^2 = 0.25: 400 / 0.125 = 3200, capped at 1
    opt.step(closure)
    assert opt.last_step_size == 1.0
    # a return at (or above) the bound: no gap, no step
    opt.observe({"episodic_return": 500.0})
    opt.step(closure)
    assert opt.last_step_size == 0.0 and torch.equal(x.detach(), torch.zeros(2, dtype=F64))


def test_pg_polyak_zero_first_step_and_state_round_trip():
    x, closure = half_square([3.0, 4.0])
    built = method("step_size", "pg_polyak", first_step="zero", c=1.0, eps=0.0, gamma_max=1.0)
    opt = built.build([x], {"return_upper_bound": 10.0})
    opt.step(closure)
    assert opt.last_step_size == 0.0 and torch.equal(x.detach(), tensor([3.0, 4.0]))
    opt.observe({"episodic_return": 5.0})
    fresh = built.build([x], {"return_upper_bound": 10.0})
    fresh.load_state_dict(opt.state_dict())
    fresh.step(closure)
    assert fresh.last_step_size == pytest.approx(5.0 / 25.0, rel=1e-15)  # gap / ||g||^2


def test_pg_polyak_running_max_estimates_the_optimum_from_the_returns_seen():
    """optimum: running_max: J*_k = best return so far + delta; no return bound needed."""
    built = method("step_size", "pg_polyak", optimum="running_max", delta=2.0, c=1.0, eps=0.0,
                   gamma_max=100.0)
    assert built.requirements(built.params) == {"rl_stats"}
    x, closure = half_square([3.0, 4.0])  # ||g||^2 = 25
    opt = built.build([x], {})
    # (return seen, best so far, the estimate J_hat: a NaN keeps the previous one)
    for seen, best, latest in [(10.0, 10.0, 10.0), (30.0, 30.0, 30.0), (math.nan, 30.0, 30.0),
                               (20.0, 30.0, 20.0)]:
        opt.observe({"episodic_return": seen})
        x.data = tensor([3.0, 4.0])
        opt.step(closure)
        assert opt.last_step_size == pytest.approx((best + 2.0 - latest) / 25.0, rel=1e-15)
    fresh = built.build([x], {})
    fresh.load_state_dict(opt.state_dict())
    x.data = tensor([3.0, 4.0])
    fresh.step(closure)
    assert fresh.last_step_size == pytest.approx(12.0 / 25.0, rel=1e-15)


@pytest.fixture
def rl_contract(monkeypatch):
    """The step-size contract on a task that also provides rl_stats and return_upper_bound."""
    original = families.step_size._quadratic

    def with_return_bound(seed=0):
        params, closure, calls, info, *pure = original(seed)
        return params, closure, calls, dict(info, return_upper_bound=500.0), *pure

    monkeypatch.setattr(families.step_size, "_quadratic", with_return_bound)
    assert {"rl_stats", "return_upper_bound"} <= families.step_size.REQUIRABLE.keys()


@pytest.mark.parametrize("name", ["kl_adaptive", "pg_polyak"])
def test_policy_gradient_step_sizes_meet_the_step_size_contract(rl_contract, name):
    assert families.check(registry.get("step_size", name)) == []
