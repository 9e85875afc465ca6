"""Step-level advantages of issue 35 on the agent testbed's (episodes x steps) layout, against
numbers worked by hand from their formulas: ``prorl_centering`` (stepwise reward centering and
a position-specific baseline, with its length-bias property), ``stamp`` (first-exposure credit
over the shared redistribution primitive), ``step_opsd`` (sign-preserving clipped shaping by a
log-probability gap) and ``swap`` (excess-length penalty spread over low-importance steps)."""

from __future__ import annotations

import torch

from workbench import registry


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
