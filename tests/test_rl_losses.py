"""workbench.testbeds.shared.losses against hand-computed numbers and re-derivations of verl's
agg_loss, compute_policy_loss_vanilla, compute_policy_loss_gspo and kl_penalty
(``verl/trainer/ppo/core_algos.py``), written below in plain Python floats."""

import math

import pytest
import torch

from workbench.testbeds.shared.losses import (
    AGGREGATIONS,
    aggregate,
    approx_kl,
    kl_penalty,
    ppo_clip_loss,
)

LOSS = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
MASK = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # the third row is fully masked


def t(x):
    return torch.tensor(x, dtype=torch.float64)


# -- aggregation ------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", 7 / 3),                              # (1 + 2 + 4) / 3 tokens
    ("seq-mean-token-mean", (1.5 + 4.0) / 2),           # rows with a valid token only
    ("seq-mean-token-sum", (3.0 + 4.0) / 2),
    ("seq-mean-token-sum-norm", 7 / 3),                 # sum / T, not divided by the rows
])
def test_aggregate_by_hand(mode, expected):
    assert float(aggregate(t(LOSS), t(MASK), mode)) == pytest.approx(expected, rel=1e-7)


def test_seq_mean_token_sum_norm_constant_and_trl_scaling():
    assert float(aggregate(t(LOSS), t(MASK), "seq-mean-token-sum-norm", 10)) == pytest.approx(0.7)
    # TRL's loss_type="dr_grpo" divides by B * max_completion_length
    assert float(aggregate(t(LOSS), t(MASK), "seq-mean-token-sum-norm", 9)) == pytest.approx(7 / 9)


def test_token_mean_of_an_empty_mask_is_zero_and_padding_cannot_leak():
    assert float(aggregate(t(LOSS), torch.zeros(3, 3), "token-mean")) == 0.0
    poisoned = t(LOSS)
    poisoned[t(MASK) == 0] = float("nan")
    for mode in AGGREGATIONS:
        assert float(aggregate(poisoned, t(MASK), mode)) == float(aggregate(t(LOSS), t(MASK), mode))


def ref_agg(loss, mask, mode, constant=None):
    """verl agg_loss, loop by loop."""
    total = sum(v * m for row, mrow in zip(loss, mask, strict=True)
                for v, m in zip(row, mrow, strict=True))
    if mode == "token-mean":
        return total / sum(map(sum, mask))
    if mode == "seq-mean-token-sum-norm":
        return total / (len(loss[0]) if constant is None else constant)
    per_row = []
    for row, mrow in zip(loss, mask, strict=True):
        count = sum(mrow)
        if count == 0:
            continue
        row_sum = sum(v * m for v, m in zip(row, mrow, strict=True))
        per_row.append(row_sum / (count + 1e-8) if mode == "seq-mean-token-mean" else row_sum)
    return sum(per_row) / len(per_row)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregate_matches_verl(mode):
    gen = torch.Generator().manual_seed(0)
    loss = torch.randn(5, 7, generator=gen, dtype=torch.float64)
    mask = (torch.arange(7) < torch.tensor([[7], [3], [0], [1], [5]])).double()
    mask[0, 2] = 0
    expected = ref_agg(loss.tolist(), mask.tolist(), mode)
    assert float(aggregate(loss, mask, mode)) == pytest.approx(expected, rel=1e-12)


def test_unknown_aggregation_names_the_allowed_ones():
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        aggregate(t(LOSS), t(MASK), "mean")


# -- PPO clip, token level --------------------------------------------------------------------

# ratios 1.5 (A > 0: the high clip binds), 0.5 (A < 0: the low clip binds), 1.1 (inside),
# 0.7 with A > 0 (below 1 - eps but the clip does not bind), and a padded token
RATIOS = [[1.5, 0.5, 1.1, 0.7, math.exp(30.0)]]
ADVANTAGES = [[1.0, -1.0, 2.0, 1.0, 5.0]]
TOKEN_MASK = [[1.0, 1.0, 1.0, 1.0, 0.0]]


def hand_case(ratios=RATIOS, advantages=ADVANTAGES):
    old = torch.full((1, 5), -1.0, dtype=torch.float64)
    return old + torch.log(t(ratios)), old, t(advantages), t(TOKEN_MASK)


def test_ppo_clip_loss_by_hand():
    loss, metrics = ppo_clip_loss(*hand_case())
    # per token: max(-A r, -A clip(r)) = -1.2, 0.8, -2.2, -0.7
    assert float(loss) == pytest.approx((-1.2 + 0.8 - 2.2 - 0.7) / 4)
    assert metrics["clip_frac_low"] == pytest.approx(0.25)
    assert metrics["clip_frac_high"] == pytest.approx(0.25)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert metrics["dual_clip_frac"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.1 + 0.7) / 4)
    k3 = sum(r - 1 - math.log(r) for r in RATIOS[0][:4]) / 4  # the padded token is left out
    assert metrics["approx_kl"] == pytest.approx(k3)


def test_approx_kl_is_k3_on_the_log_ratio_clamped_to_20():
    """One definition in both RL loops (workbench/common/metrics.py): k3 with verl's +-20 clamp."""
    old = torch.zeros(1, 3, dtype=torch.float64)
    new = torch.tensor([[30.0, -30.0, 0.1]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    expected = (math.expm1(20.0) - 20.0 + math.expm1(-20.0) + 20.0 + math.expm1(0.1) - 0.1) / 3
    assert float(approx_kl(new, old, mask)) == pytest.approx(expected, rel=1e-8)  # the 1e-8 eps
    _, metrics = ppo_clip_loss(new, old, torch.ones_like(new), mask)
    assert metrics["approx_kl"] == pytest.approx(expected, rel=1e-8)
    assert float(approx_kl(old + 0.3, old, mask)) > 0  # never negative, unlike k1


def test_clip_higher_and_tensor_bounds():
    loss, metrics = ppo_clip_loss(*hand_case(), clip_low=0.2, clip_high=0.6)
    assert float(loss) == pytest.approx((-1.5 + 0.8 - 2.2 - 0.7) / 4)
    assert metrics["clip_frac_high"] == 0.0
    per_token = torch.tensor([[0.6, 0.2, 0.2, 0.2, 0.2]], dtype=torch.float64)
    same, _ = ppo_clip_loss(*hand_case(), clip_high=per_token)
    assert float(same) == pytest.approx(float(loss))


def test_dual_clip_bounds_the_loss_of_negative_advantages():
    ratios = [[1.5, 5.0, 1.1, 0.7, 1.0]]
    loss, metrics = ppo_clip_loss(*hand_case(ratios), dual_clip=3.0)
    # the second token: max(5, 0.8) = 5, bounded by -A c = 3
    assert float(loss) == pytest.approx((-1.2 + 3.0 - 2.2 - 0.7) / 4)
    assert metrics["dual_clip_frac"] == pytest.approx(0.25)
    plain, _ = ppo_clip_loss(*hand_case(ratios))
    assert float(plain) == pytest.approx((-1.2 + 5.0 - 2.2 - 0.7) / 4)
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(*hand_case(ratios), dual_clip=1.0)


def ref_vanilla(log_probs, old, adv, mask, low, high, c, mode):
    """verl compute_policy_loss_vanilla with clip_ratio_c = c, per token in floats."""
    loss, clipped, lower, kl = [], 0.0, 0.0, 0.0  # kl: k3 on verl's clamped log-ratio
    for lp_row, old_row, a_row, m_row in zip(log_probs, old, adv, mask, strict=True):
        row = []
        for lp, o, a, m in zip(lp_row, old_row, a_row, m_row, strict=True):
            log_ratio = min(max(lp - o, -20.0), 20.0)
            r = math.exp(log_ratio)
            first, second = -a * r, -a * min(max(r, 1 - low), 1 + high)
            value = max(first, second)
            clipped += m * (second > first)
            if a < 0:
                lower += m * (value > -a * c)
                value = min(value, -a * c)
            kl += m * (math.expm1(log_ratio) - log_ratio)  # verl's ppo_kl is k1: -log_ratio
            row.append(value)
        loss.append(row)
    count = sum(map(sum, mask)) + 1e-8
    return ref_agg(loss, mask, mode), clipped / count, lower / count, kl / count


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_ppo_clip_loss_matches_verl_vanilla(mode):
    gen = torch.Generator().manual_seed(1)
    old = torch.randn(4, 6, generator=gen, dtype=torch.float64) - 2
    new = old + 0.5 * torch.randn(4, 6, generator=gen, dtype=torch.float64)
    new[2, 1] = old[2, 1] + 2.0  # a large ratio with a negative advantage: the dual clip binds
    adv = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    adv[2, 1] = -1.0
    mask = (torch.arange(6) < torch.tensor([[6], [2], [5], [4]])).double()
    loss, metrics = ppo_clip_loss(new, old, adv, mask, 0.2, 0.28, dual_clip=3.0, agg=mode)
    expected, clip_frac, lower, kl = ref_vanilla(new.tolist(), old.tolist(), adv.tolist(),
                                                 mask.tolist(), 0.2, 0.28, 3.0, mode)
    assert float(loss) == pytest.approx(expected, rel=1e-12)
    assert metrics["clip_frac"] == pytest.approx(clip_frac, rel=1e-12)
    assert metrics["clip_frac_low"] + metrics["clip_frac_high"] == pytest.approx(clip_frac)
    assert metrics["dual_clip_frac"] == pytest.approx(lower, rel=1e-12) and lower > 0
    assert metrics["approx_kl"] == pytest.approx(kl, rel=1e-12)


# -- GSPO (sequence-level ratio) -------------------------------------------------------------

def gspo_case():
    old = torch.tensor([[-1.0, -2.0, -3.0], [-1.5, -1.0, -1.0]], dtype=torch.float64)
    log_ratio = torch.tensor([[0.05, 0.15, 5.0], [-0.5, 9.0, 9.0]], dtype=torch.float64)
    mask = t([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    advantages = t([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    return (old + log_ratio).requires_grad_(True), old, advantages, mask


def test_gspo_ratio_is_the_geometric_mean_per_sequence():
    log_probs, old, advantages, mask = gspo_case()
    loss, metrics = ppo_clip_loss(log_probs, old, advantages, mask, ratio_level="sequence")
    s0, s1 = math.exp(0.1), math.exp(-0.5)  # means of the valid log-ratios
    assert metrics["ratio_mean"] == pytest.approx((2 * s0 + s1) / 3)
    # row 0: inside the clip range, -A s0; row 1: A < 0 and s1 < 0.8, the clip binds at 0.8
    assert float(loss.detach()) == pytest.approx((-s0 + 0.8) / 2)  # seq-mean-token-mean default
    assert metrics["clip_frac_low"] == pytest.approx(1 / 3)
    assert metrics["clip_frac_high"] == 0.0


def test_gspo_token_form_has_the_gradient_of_the_sequence_ratio():
    """verl's GSPO-token (sg[s] pi / sg[pi]) against TRL's form, exp of the mean log-ratio
    differentiated directly, with sequence-constant advantages."""
    log_probs, old, advantages, mask = gspo_case()
    loss, _ = ppo_clip_loss(log_probs, old, advantages, mask, ratio_level="sequence")
    loss.backward()
    other = log_probs.detach().clone().requires_grad_(True)
    mean_log_ratio = ((other - old) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True)
    ratio = mean_log_ratio.exp()
    per_token = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(0.8, 1.2))
    aggregate(per_token.expand_as(mask), mask, "seq-mean-token-mean").backward()
    assert torch.allclose(log_probs.grad, other.grad, atol=1e-12)
    assert float(log_probs.grad[0, 0]) == pytest.approx(-math.exp(0.1) / 2 / 2)
    assert float(log_probs.grad[1].abs().sum()) == 0.0  # clipped: no gradient


def test_unknown_ratio_level_names_the_allowed_ones():
    with pytest.raises(ValueError, match="sequence"):
        ppo_clip_loss(*hand_case(), ratio_level="seq")


# -- KL estimators ----------------------------------------------------------------------------

def test_kl_kinds_by_hand():
    log_probs, ref = t([math.log(0.5)]), t([math.log(0.25)])  # d = log 2
    d = math.log(2)
    assert float(kl_penalty(log_probs, ref, "k1")) == pytest.approx(d)
    assert float(kl_penalty(log_probs, ref, "k2")) == pytest.approx(0.5 * d * d)
    assert float(kl_penalty(log_probs, ref, "k3")) == pytest.approx(0.5 - 1 + d)


def test_k3_clamp_as_verl_low_var_kl():
    far = t([-30.0, 30.0])  # log pi - log pi_ref
    clamped = kl_penalty(far, torch.zeros(2, dtype=torch.float64), "k3")
    assert clamped.tolist() == [10.0, 10.0]
    raw = kl_penalty(far, torch.zeros(2, dtype=torch.float64), "k3", clamp=None)
    assert raw.tolist() == pytest.approx([math.exp(30) - 31, math.exp(-30) + 29])
    with pytest.raises(ValueError, match="k3"):
        kl_penalty(far, far, "k4")


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_k1_and_k3_are_unbiased_for_the_kl(kind):
    """Their expectation under pi (exact, over a 4-way categorical) is KL(pi || pi_ref)."""
    pi = t([0.1, 0.2, 0.3, 0.4])
    ref = t([0.4, 0.3, 0.2, 0.1])
    kl = float((pi * (pi.log() - ref.log())).sum())
    estimate = float((pi * kl_penalty(pi.log(), ref.log(), kind)).sum())
    assert estimate == pytest.approx(kl, rel=1e-12)
