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
