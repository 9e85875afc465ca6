"""Step-level advantages of issue 35 on the agent testbed's (episodes x steps) layout, against
numbers worked by hand from their formulas: ``prorl_centering`` (stepwise reward centering and
a position-specific baseline, with its length-bias property), ``stamp`` (first-exposure credit
over the shared redistribution primitive), ``step_opsd`` (sign-preserving clipped shaping by a
log-probability gap) and ``swap`` (excess-length penalty spread over low-importance steps)."""

from __future__ import annotations

import pytest
import torch

from workbench import registry
from workbench.testbeds import TASKS, Budget


def _mask(lengths, width):
    return (torch.arange(width) < torch.tensor(lengths)[:, None]).to(torch.float64)


def _method(name, **params):
    return registry.get("advantage", name)(**params)


# ---------------------------------------------------------------------------- prorl_centering
# rows of 2, 3 and 1 valid steps (junk at padding)
PRORL_MASK = _mask([2, 3, 1], 3)


def _prorl(rewards, **params):
    rewards = torch.tensor(rewards, dtype=torch.float64)
    return _method("prorl_centering", **params).compute(rewards=rewards, mask=PRORL_MASK)


def test_prorl_centering_global_mean_and_position_baseline_by_hand():
    # rewards [1, 3 | 2, 1, 0 | 5]; the mean over the 6 valid steps is 12 / 6 = 2
    # centred: [-1, 1 | 0, -1, -2 | 3]; to go: [0, 1 | -3, -3, -2 | 3]
    # position baseline: b0 = (0 - 3 + 3) / 3 = 0, b1 = (1 - 3) / 2 = -1, b2 = -2
    # advantages: [0, 2 | -3, -2, 0 | 3]; returns (uncentred to go): [4, 3 | 3, 1, 0 | 5]
    adv, ret = _prorl([[1, 3, 9], [2, 1, 0], [5, 9, 9]], centering="global")
    expected = torch.tensor([[0, 2, 0], [-3, -2, 0], [3, 0, 0]], dtype=torch.float64)
    assert torch.allclose(adv, expected)
    assert torch.allclose(ret, torch.tensor([[4, 3, 0], [3, 1, 0], [5, 0, 0]],
                                            dtype=torch.float64))


def test_prorl_centering_by_position_by_hand():
    # rewards [1, 3 | 2, 1, 0 | 3]; position means m0 = (1 + 2 + 3) / 3 = 2, m1 = (3 + 1) / 2
    # = 2, m2 = 0; centred [-1, 1 | 0, -1, 0 | 1]; to go [0, 1 | -1, -1, 0 | 1]. The position
    # baseline is then 0 at every position (the rows valid at k are valid at every earlier
    # position, and each position's centred rewards sum to 0): the advantages are the to-go.
    rewards = [[1, 3, 7], [2, 1, 0], [3, 7, 7]]
    adv, _ = _prorl(rewards)
    expected = torch.tensor([[0, 1, 0], [-1, -1, 0], [1, 0, 0]], dtype=torch.float64)
    assert torch.allclose(adv, expected)
    assert torch.allclose(_prorl(rewards, baseline="none")[0], expected)


def test_prorl_centering_none_none_is_plain_reward_to_go():
    adv, ret = _prorl([[1, 3, 9], [2, 1, 0], [5, 9, 9]], centering="none", baseline="none")
    assert torch.allclose(adv, ret)
    assert adv[0, 0] == 4 and adv[1, 0] == 3 and adv[2, 0] == 5 and adv[0, 2] == 0


def test_prorl_centering_removes_the_length_bias_of_reward_to_go():
    # two paths of the same per-step reward (1 a step) and lengths 2 and 4: plain reward to go
    # gives the first step 2 and 4 (the longer path is favoured for being longer); a position
    # baseline alone still does (-1 and 1); centering gives both 0
    rewards = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.float64)
    mask = _mask([2, 4], 4)
    first = {}
    for centering, baseline in [("none", "none"), ("none", "position"), ("position", "none"),
                                ("position", "position"), ("global", "position")]:
        adv, _ = _method("prorl_centering", centering=centering, baseline=baseline).compute(
            rewards=rewards, mask=mask)
        first[centering, baseline] = adv[:, 0].tolist()
    assert first["none", "none"] == [2.0, 4.0]
    assert first["none", "position"] == [-1.0, 1.0]
    assert first["position", "none"] == [0.0, 0.0]
    assert first["position", "position"] == [0.0, 0.0]
    assert first["global", "position"] == [0.0, 0.0]
    # at scale: i.i.d. step rewards of mean 0.5 on paths of random lengths 1..12; the first
    # step's plain reward to go grows with the length, the centred one does not
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 13, (4000,), generator=gen)
    mask = (torch.arange(12) < lengths[:, None]).to(torch.float64)
    rewards = torch.rand(4000, 12, generator=gen, dtype=torch.float64) * mask
    length = lengths.to(torch.float64)

    def corr(x):
        return float(torch.corrcoef(torch.stack([x, length]))[0, 1])

    plain = _method("prorl_centering", centering="none", baseline="none").compute(
        rewards=rewards, mask=mask)[0][:, 0]
    centred = _method("prorl_centering").compute(rewards=rewards, mask=mask)[0][:, 0]
    assert corr(plain) > 0.8
    assert abs(corr(centred)) < 0.1


# -------------------------------------------------------------------------------------- stamp
# group 0: rows 0 (4 steps, goal at step 3) and 1 (3 steps, failed); group 1: rows 2 (4 steps,
# goal) and 3 (2 steps, failed). GRPO with epsilon 0: scores (1, 0) in each group, mean 1/2,
# unbiased std sqrt(1/2): A = +-1/sqrt(2).
STAMP_MASK = _mask([4, 3, 4, 2], 4)
STAMP_GROUPS = torch.tensor([0, 0, 1, 1])
STAMP_REWARDS = torch.zeros(4, 4, dtype=torch.float64)
STAMP_REWARDS[0, 3] = STAMP_REWARDS[2, 3] = 1.0
STAMP_REWARDS[3, 3] = 5.0  # padding
STAMP_RUBRIC = torch.zeros(4, 4, 2, dtype=torch.float64)
STAMP_RUBRIC[0, 1, 0] = STAMP_RUBRIC[0, 2, 0] = 1.0  # item 0 met at steps 1 and 2: first is 1
STAMP_RUBRIC[0, 3, 1] = 1.0
STAMP_RUBRIC[0, 0, 1] = -1.0  # a violation: no credit
STAMP_RUBRIC[1, 0, 0] = STAMP_RUBRIC[1, 0, 1] = 1.0  # two items first met at step 0
STAMP_RUBRIC[1, 2, 0] = 1.0  # item 0 again: not a first exposure
STAMP_RUBRIC[1, 3, 1] = 1.0  # padding
STAMP_RUBRIC[3, 1, 0] = 1.0
STAMP_RUBRIC[2, 0, 0] = -1.0


def _stamp(**params):
    params = {"epsilon": 0.0} | params
    return _method("stamp", **params).compute(rewards=STAMP_REWARDS, mask=STAMP_MASK,
                                              group_ids=STAMP_GROUPS, rubric=STAMP_RUBRIC)


def test_stamp_matches_the_formula_worked_by_hand():
    # floor 0.5, eta 0.5, a = 1/sqrt(2):
    # row 0: first exposures (0, 1, 0, 1) + 0.5 = (.5, 1.5, .5, 1.5), sum 4, K 4: shares
    #        (.5, 1.5, .5, 1.5), weights 0.5 + 0.5 share = (.75, 1.25, .75, 1.25), times +a
    # row 1: (2, 0, 0) + 0.5 = (2.5, .5, .5), sum 3.5, K 3: shares (15/7, 3/7, 3/7), weights
    #        (11/7, 5/7, 5/7), times -a
    # row 2: nothing first met: (.5, .5, .5, .5): weights 1, +a everywhere
    # row 3: (0, 1) + 0.5 = (.5, 1.5), sum 2, K 2: weights (.75, 1.25), times -a
    adv, ret = _stamp(floor=0.5)
    a = 2 ** -0.5
    expected = torch.tensor([[0.75 * a, 1.25 * a, 0.75 * a, 1.25 * a],
                             [-11 / 7 * a, -5 / 7 * a, -5 / 7 * a, 0.0],
                             [a, a, a, a],
                             [-0.75 * a, -1.25 * a, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(adv, expected)
    assert torch.equal(adv, ret)


def test_stamp_without_a_floor_gives_the_credit_to_first_exposures_only():
    # floor 0, eta 1: row 0's credit (0, 1, 0, 1): weights (0, 2, 0, 2); row 2 has none: a
    adv, _ = _stamp(floor=0.0, eta=1.0)
    a = 2 ** -0.5
    assert torch.allclose(adv[0], torch.tensor([0.0, 2 * a, 0.0, 2 * a], dtype=torch.float64))
    assert torch.allclose(adv[1], torch.tensor([-3 * a, 0.0, 0.0, 0.0], dtype=torch.float64))
    assert torch.allclose(adv[2], torch.full((4,), a, dtype=torch.float64))


def test_stamp_without_redistribution_is_grpo_on_the_outcome():
    adv, _ = _stamp(eta=0.0, epsilon=1e-6)
    grpo, _ = _method("grpo").compute(rewards=STAMP_REWARDS, mask=STAMP_MASK,
                                      group_ids=STAMP_GROUPS)
    assert torch.allclose(adv, grpo * STAMP_MASK)


def test_stamp_keeps_each_episodes_sign_and_mean():
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 9, (12,), generator=gen)
    mask = _mask(lengths.tolist(), 8)
    rewards = (torch.rand(12, 8, generator=gen, dtype=torch.float64) < 0.2).to(torch.float64)
    rubric = torch.randint(-1, 2, (12, 8, 3), generator=gen).to(torch.float64)
    groups = torch.arange(3).repeat_interleave(4)
    base, _ = _method("grpo").compute(rewards=rewards, mask=mask, group_ids=groups)
    adv, _ = _method("stamp", eta=0.8).compute(rewards=rewards, mask=mask, group_ids=groups,
                                               rubric=rubric)
    ok = mask != 0
    episode = base[:, 0]
    assert torch.allclose((adv * mask).sum(dim=1) / mask.sum(dim=1), episode)
    assert torch.all((adv * episode[:, None])[ok] >= 0)
    assert torch.all(adv[~ok] == 0)
    assert not torch.allclose(adv, base * mask)  # the credit moved something


# ---------------------------------------------------------------------------------- step_opsd
# group 0: row 0 (3 steps, goal) and row 1 (2 steps, failed): A = +-a, a = 0.5 / (sqrt(1/2)
# + 1e-6) (verl's epsilon); group 1: rows 2 and 3 both failed (equal scores): A = 0
A_OPSD = 0.5 / (0.5 ** 0.5 + 1e-6)
OPSD_MASK = _mask([3, 2, 3, 3], 3)
OPSD_GROUPS = torch.tensor([0, 0, 1, 1])
OPSD_REWARDS = torch.zeros(4, 3, dtype=torch.float64)
OPSD_REWARDS[0, 2] = 1.0
OPSD_REF = torch.tensor([[-1.0, -0.5, -2.0], [-1.0, -1.0, -9.0], [-1.0, -1.0, -1.0],
                         [-0.5, -0.5, -0.5]], dtype=torch.float64)
# gaps old - ref: row 0 (0.2, -0.1, 0.3), row 1 (0.4, -0.2), rows 2, 3 anything
OPSD_OLD = OPSD_REF + torch.tensor([[0.2, -0.1, 0.3], [0.4, -0.2, 5.0], [0.1, 0.2, 0.3],
                                    [0.3, 0.2, 0.1]], dtype=torch.float64)


def _opsd(old=OPSD_OLD, **params):
    return _method("step_opsd", **params).compute(
        rewards=OPSD_REWARDS, mask=OPSD_MASK, group_ids=OPSD_GROUPS, old_log_probs=old,
        ref_log_probs=OPSD_REF)


def test_step_opsd_matches_the_formula_worked_by_hand():
    # lambda 0.5, alpha 1, l1 budget:
    # row 0 (A = +a): c^ = 3 (0.2, -0.1, 0.3) / 0.6 = (1, -0.5, 1.5); clipped (1, -0.5, 1);
    #        factors 1 + 0.5 c = (1.5, 0.75, 1.5)
    # row 1 (A = -a): c^ = 2 (0.4, -0.2) / 0.6 = (4/3, -2/3); sign -: (-4/3, 2/3), clipped
    #        (-1, 2/3); factors (0.5, 4/3): advantages (-a/2, -4a/3)
    # rows 2, 3: A = 0 whatever the gaps
    adv, ret = _opsd()
    a = A_OPSD
    expected = torch.tensor([[1.5 * a, 0.75 * a, 1.5 * a], [-0.5 * a, -4 / 3 * a, 0.0],
                             [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    assert torch.allclose(adv, expected)
    assert torch.equal(adv, ret)


def test_step_opsd_zscore_budget_and_a_tighter_clip_by_hand():
    # row 0: gaps (0.2, -0.1, 0.3), mean 0.4 / 3 = 2/15, deviations (1/15, -7/30, 1/6);
    # population variance (1/225 + 49/900 + 1/36) / 3 = (4 + 49 + 25) / 2700 = 78 / 2700,
    # std = sqrt(78) / sqrt(2700); z = deviations / std. Clip 0.5, lambda 0.8.
    adv, _ = _opsd(budget="zscore", alpha_clip=0.5, lambda_mix=0.8)
    a = A_OPSD
    dev = torch.tensor([1 / 15, -7 / 30, 1 / 6], dtype=torch.float64)
    z = dev / (78 / 2700) ** 0.5  # about (0.392, -1.373, 0.981)
    assert torch.allclose(adv[0], a * (1 + 0.8 * z.clamp(-0.5, 0.5)))
    assert torch.allclose(adv[0], a * torch.tensor([1 + 0.8 * 0.392232, 0.6, 1.4],
                                                   dtype=torch.float64), atol=1e-6)
    # row 1: gaps (0.4, -0.2): z = (1, -1); sign -: (-1, 1) clipped (-0.5, 0.5): (0.6, 1.4)
    assert torch.allclose(adv[1, :2], -a * torch.tensor([0.6, 1.4], dtype=torch.float64))


def test_step_opsd_without_a_gap_is_grpo_on_the_outcome():
    # the policy still its reference (gaps at float noise, as at the first update): GRPO
    noisy = OPSD_REF + 1e-8 * torch.tensor([[1.0, -1.0, 0.5]]).to(torch.float64)
    adv, _ = _opsd(old=noisy)
    grpo, _ = _method("grpo").compute(rewards=OPSD_REWARDS, mask=OPSD_MASK,
                                      group_ids=OPSD_GROUPS)
    assert torch.allclose(adv, grpo * OPSD_MASK)
    assert torch.allclose(_opsd(lambda_mix=0.0)[0], grpo * OPSD_MASK)


def test_step_opsd_with_the_reference_as_teacher_reverses_the_gap():
    # the reference's gap ref - old is the policy's gap with the two inputs swapped
    swapped = _method("step_opsd").compute(
        rewards=OPSD_REWARDS, mask=OPSD_MASK, group_ids=OPSD_GROUPS, old_log_probs=OPSD_REF,
        ref_log_probs=OPSD_OLD)[0]
    adv = _opsd(teacher="reference")[0]
    assert torch.allclose(adv, swapped)
    # row 0 (A = +a): c^ = (-1, 0.5, -1.5) clipped (-1, 0.5, -1): factors (0.5, 1.25, 0.5)
    assert torch.allclose(adv[0], A_OPSD * torch.tensor([0.5, 1.25, 0.5], dtype=torch.float64))


# --------------------------------------------------------------------------------------- swap
# group 0: rows 0 (2 steps, goal), 1 (4 steps, goal), 2 (4 steps, failed); group 1: rows 3, 4
# (2 steps each, failed: equal scores, A = 0). GRPO in group 0: scores (1, 1, 0), mean 2/3,
# unbiased std sqrt((1/9 + 1/9 + 4/9) / 2) = 1/sqrt(3): A = (1/3, 1/3, -2/3) / (1/sqrt(3) +
# 1e-6). L_ref = 2 (row 0): excess E = (0, 2, 2); row 2 is penalised only with penalize = all.
SWAP_MASK = _mask([2, 4, 4, 2, 2], 4)
SWAP_GROUPS = torch.tensor([0, 0, 0, 1, 1])
SWAP_REWARDS = torch.zeros(5, 4, dtype=torch.float64)
SWAP_REWARDS[0, 1] = SWAP_REWARDS[1, 3] = 1.0
# V^ (B, T + 1), column k the state step k starts from; after the last step V = 0 is implied
SWAP_VALUES = torch.tensor([[0.5, 1.0, 9.0, 9.0, 9.0],
                            [0.5, 0.5, 1.0, 1.0, 9.0],
                            [0.2, 0.2, 0.2, 0.2, 9.0],
                            [0.0, 0.0, 9.0, 9.0, 9.0],
                            [0.3, 0.1, 9.0, 9.0, 9.0]], dtype=torch.float64)
SWAP_A = (1 / 3) / (3 ** -0.5 + 1e-6)
LN3 = torch.log(torch.tensor(3.0, dtype=torch.float64))


def _swap(**params):
    return _method("swap", **params).compute(rewards=SWAP_REWARDS, mask=SWAP_MASK,
                                             group_ids=SWAP_GROUPS, mc_values=SWAP_VALUES)


def test_swap_matches_the_formula_worked_by_hand():
    # row 1's importance (progress r + V(next) - V): (0 + .5 - .5, 0 + 1 - .5, 0 + 1 - 1,
    # 1 + 0 - 1) = (0, 0.5, 0, 0). tau = 0.5 / ln 3: -I / tau = (0, -ln 3, 0, 0), softmax
    # (1, 1/3, 1, 1) / (10/3) = (0.3, 0.1, 0.3, 0.3); beta 1, E 2: penalties (.6, .2, .6, .6)
    tau = float(0.5 / LN3)
    adv, ret = _swap(beta=1.0, tau=tau)
    a = SWAP_A
    expected = torch.tensor([[a, a, 0, 0],
                             [a - 0.6, a - 0.2, a - 0.6, a - 0.6],
                             [-2 * a] * 4,
                             [0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)
    assert torch.allclose(adv, expected)
    assert torch.allclose(ret, torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0] * 4, [0] * 4,
                                             [0] * 4], dtype=torch.float64))


def test_swap_penalizing_every_row_and_a_flat_temperature_by_hand():
    # penalize = all: row 2 (failed, 4 steps) has E = 2 too; its importance (0, 0, 0, 0 + 0 -
    # 0.2) = (0, 0, 0, -0.2): -I / tau = (0, 0, 0, 0.4 ln 3): weights (1, 1, 1, 3^0.4) / (3 +
    # 3^0.4); beta 0.5: penalties 0.5 * 2 * weights. Rows 3, 4 (2 steps, no correct row in
    # their group) have no reference length: no penalty.
    tau = float(0.5 / LN3)
    adv, _ = _swap(beta=0.5, tau=tau, penalize="all")
    w = torch.tensor([1.0, 1.0, 1.0, 3 ** 0.4], dtype=torch.float64) / (3 + 3 ** 0.4)
    assert torch.allclose(adv[2], -2 * SWAP_A - 1.0 * w)
    assert torch.allclose(adv[1], torch.tensor([SWAP_A - 0.3, SWAP_A - 0.1, SWAP_A - 0.3,
                                                SWAP_A - 0.3], dtype=torch.float64))
    assert torch.all(adv[3:] == 0)
    # a very high temperature spreads the penalty evenly: beta * E / L = 0.5 * 2 / 4 a step
    even, _ = _swap(beta=0.5, tau=1e9)
    assert torch.allclose(even[1], torch.full((4,), SWAP_A - 0.25, dtype=torch.float64))
    # beta = 0 is GRPO on the outcome
    grpo, _ = _method("grpo").compute(rewards=SWAP_REWARDS, mask=SWAP_MASK,
                                      group_ids=SWAP_GROUPS)
    assert torch.allclose(_swap(beta=0.0)[0], grpo * SWAP_MASK)


# ------------------------------------------------------------------------ in the key-door loop
@pytest.mark.parametrize("name", ["prorl_centering", "stamp", "step_opsd", "swap"])
def test_each_method_runs_in_the_key_door_loop(name):
    task = TASKS["keydoor"]
    methods = {slot: registry.get(slot, m)() for slot, m in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", name)()
    logged: list[dict] = []
    params = task.Params(train_instances=8, eval_instances=4, instances_per_update=4,
                         group_size=4, max_steps=30)
    task().run(params, methods, seed=0, device=torch.device("cpu"), budget=Budget(steps=3),
               log=lambda step, m: logged.append(dict(m)))
    assert len(logged) == 3
    assert all(torch.isfinite(torch.tensor(m["train/policy_loss"])) for m in logged)
    assert min(m["adv/zero_fraction"] for m in logged) < 1.0  # some group told rows apart
    played = [m["train/episode_length"] * 4 * 4 for m in logged]
    if name == "swap":  # every step's state continued 4 times for its Monte Carlo value
        assert logged[0]["cost/env_steps"] > played[0] * 1.5
    else:
        assert logged[0]["cost/env_steps"] == pytest.approx(played[0])
