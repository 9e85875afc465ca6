"""The rubric and confidence step estimators (issue 17): ``sas`` against numbers derived from
its reference code, ``rubric_redistribution`` (DRACO-style, reconstructed) against numbers
worked by hand from its formula and its sign- and mean-preservation.

SAS: the expected advantages come from running the ``trainer.sas`` block of HanNight/SAS
``verl/verl/trainer/ppo/ray_trainer.py`` (and ``compute_grpo_outcome_advantage`` from the
same repository's ``core_algos.py``) on these episodes laid out as its token batches: one
token per step, every step but the last ending in a token that decodes with a blank line,
then ``</think>`` and one answer token; its advantages at the step tokens, rounded to 6
decimals. ``ratio`` cases ran the block with its two counts parenthesised as the paper
describes (``(len(split_pos_list)+1) * ratio``), ``as_released`` ones as written. Rows: group
0 holds two correct rows, a wrong one and one scored 0.5 (not correct: the reference's test is
score == 1), group 1 two wrong rows (equal scores: nothing to select), group 2 one correct row
alone; row 2 has a confidence tie (steps 0 and 1: the earlier step ranks first, as numpy's
sort of a short row); junk confidences and a junk reward sit at padded positions.
"""

from __future__ import annotations

import pytest
import torch

from workbench import registry

LENGTHS = [6, 7, 4, 7, 5, 3, 7]
MASK = (torch.arange(7) < torch.tensor(LENGTHS)[:, None]).to(torch.float64)
GROUPS = torch.tensor([0, 0, 0, 1, 1, 2, 0])
REWARDS = torch.zeros(7, 7, dtype=torch.float64)
REWARDS[0, 5] = REWARDS[2, 3] = REWARDS[5, 2] = 1.0
REWARDS[6, 6] = 0.5
REWARDS[4, 6] = 1.0  # padding
LOG_PROBS = torch.tensor([
    [-0.10, -1.20, -0.70, -0.05, -2.30, -0.40, -9.0],
    [-0.60, -0.02, -1.50, -0.30, -0.90, -0.01, -0.45],
    [-0.80, -0.80, -0.20, -1.10, -7.0, -7.0, -7.0],
    [-0.30, -0.70, -0.10, -1.40, -0.20, -0.50, -0.90],
    [-1.00, -0.40, -0.60, -0.05, -0.30, -5.0, -5.0],
    [-0.25, -0.75, -0.50, -3.0, -3.0, -3.0, -3.0],
    [-0.35, -0.15, -1.25, -0.55, -0.65, -0.05, -2.05]], dtype=torch.float64)

# (mask_steps_ratio, strategy, step_count) -> advantages from the reference's code (see above)
A, W, S, P = 0.783348, -1.305580, 0.999999, -0.261116  # GRPO: correct, wrong, alone, 0.5
FROM_SAS_CODE = {
    (0.3, "both", "ratio"): [
        [A, 0, A, A, 0, A, 0], [W, 0, W, W, W, 0, W], [0, A, A, 0, 0, 0, 0], [0] * 7, [0] * 7,
        [S, 0, S, 0, 0, 0, 0], [P, 0, P, P, P, 0, P]],
    (0.3, "both", "as_released"): [
        [0] * 7, [W] * 7, [0] * 7, [0] * 7, [0] * 7, [0] * 7, [P] * 7],
    (0.5, "correct_only", "ratio"): [
        [A, 0, 0, A, 0, A, 0], [W] * 7, [0, A, A, 0, 0, 0, 0], [0] * 7, [0] * 7,
        [S, 0, 0, 0, 0, 0, 0], [P] * 7],
    (0.5, "wrong_only", "ratio"): [
        [A, A, A, A, A, A, 0], [W, 0, W, 0, W, 0, W], [A, A, A, A, 0, 0, 0], [0] * 7, [0] * 7,
        [S, S, S, 0, 0, 0, 0], [0, 0, P, P, P, 0, P]],
    (1.0, "both", "as_released"): [
        [0] * 7, [W, W, W, W, W, 0, W], [0] * 7, [0] * 7, [0] * 7, [0] * 7,
        [P, P, P, P, P, 0, P]],
}


@pytest.mark.parametrize("case", sorted(FROM_SAS_CODE), ids=str)
def test_sas_matches_its_reference_code(case):
    ratio, strategy, count = case
    method = registry.get("advantage", "sas")(mask_steps_ratio=ratio, strategy=strategy,
                                              step_count=count)
    advantages, returns = method.compute(rewards=REWARDS, mask=MASK, group_ids=GROUPS,
                                         old_log_probs=LOG_PROBS)
    expected = torch.tensor(FROM_SAS_CODE[case], dtype=torch.float64)
    assert torch.allclose(advantages, expected, atol=2e-6), advantages - expected
    assert torch.equal(returns, advantages)


def test_sas_keeps_grpo_where_it_selects_nothing():
    grpo = registry.get("advantage", "grpo")().compute(rewards=REWARDS, mask=MASK,
                                                       group_ids=GROUPS)[0]
    for strategy in ("both", "correct_only", "wrong_only"):
        sas = registry.get("advantage", "sas")(mask_steps_ratio=0.0, strategy=strategy)
        out = sas.compute(rewards=REWARDS, mask=MASK, group_ids=GROUPS,
                          old_log_probs=LOG_PROBS)[0]
        assert torch.equal(out, grpo), strategy  # ratio 0: no step of any row is zeroed


# rubric_redistribution: two items in group 0 (weights 1/2, 1/2), two in group 1 (3/4, 1/4);
# junk annotations at padded positions (row 1 step 2, row 4 steps 1-2).
RUBRIC = torch.zeros(5, 3, 2, dtype=torch.float64)
RUBRIC[0, 0, 0], RUBRIC[0, 2, 1] = 1, -1  # s = (1, -1), R = 0
RUBRIC[1, 1, 1] = -1  # s = (0, -1), R = -1/2
RUBRIC[2, 0, 0], RUBRIC[2, 1, 1], RUBRIC[2, 2, 1] = 1, -1, -1  # s = (1, -2), R = 1/4
RUBRIC[3, 1, 0] = 1  # s = (1, 0), R = 3/4
RUBRIC[1, 2, 0] = RUBRIC[4, 1, 0] = RUBRIC[4, 2, 1] = 1  # padding
RUBRIC_MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0]],
                           dtype=torch.float64)  # row 4: s = (0, 0), R = 0
RUBRIC_GROUPS = torch.tensor([0, 0, 1, 1, 1])
WEIGHTS = torch.tensor([[0.5, 0.5]] * 2 + [[0.75, 0.25]] * 3, dtype=torch.float64)


def _rubric(**params):
    method = registry.get("advantage", "rubric_redistribution")(**params)
    return method.compute(mask=RUBRIC_MASK, group_ids=RUBRIC_GROUPS, rubric=RUBRIC,
                          rubric_weights=WEIGHTS)


def test_rubric_redistribution_matches_the_formula_worked_by_hand():
    # GRPO on R: group 0 (0, -1/2): +-0.25 / (std 0.353553 + 1e-6); group 1 (1/4, 3/4, 0):
    # mean 1/3, unbiased std sqrt(42 / 288) = 0.381881
    g0, g1 = 0.25 / (0.125 ** 0.5 + 1e-6), (42 / 288) ** 0.5 + 1e-6
    a = [g0, -g0, -1 / 12 / g1, 5 / 12 / g1, -1 / 3 / g1]
    # item deviations w |s - s_bar|: group 0 s_bar = (1/2, -1): rows 0 and 1 (1/4, 0);
    # group 1 s_bar = (2/3, -2/3): row 2 (1/4, 1/3), row 3 (1/4, 1/6), row 4 (1/2, 1/6).
    # annotated, eta 1/2: row 0 credits step 0 alone (1/4): weights (1 + 2 eta, 1 - eta,
    # 1 - eta); row 1's only annotated item does not deviate: A_1 everywhere; row 2 credits
    # 1/4, 1/6, 1/6 (total 7/12): shares 9/7, 6/7, 6/7 -> weights 8/7, 13/14, 13/14; row 3
    # credits step 1 alone: weights 1/2, 2, 1/2; row 4 has no annotated step: A_4.
    expected = torch.tensor([
        [2 * a[0], a[0] / 2, a[0] / 2], [a[1], a[1], 0], [8 / 7 * a[2], 13 / 14 * a[2],
                                                          13 / 14 * a[2]],
        [a[3] / 2, 2 * a[3], a[3] / 2], [a[4], 0, 0]], dtype=torch.float64)
    advantages, returns = _rubric(eta=0.5)
    assert torch.allclose(advantages, expected, atol=1e-12), advantages - expected
    assert torch.equal(returns, advantages)
    # agreeing: row 2 is below its group, so only its violations (steps 1 and 2, 1/6 each)
    # take credit: shares 0, 3/2, 3/2 -> weights 1/2, 5/4, 5/4; the other rows as above
    expected[2] = torch.tensor([a[2] / 2, 5 / 4 * a[2], 5 / 4 * a[2]], dtype=torch.float64)
    agreeing = _rubric(eta=0.5, attribution="agreeing")[0]
    assert torch.allclose(agreeing, expected, atol=1e-12), agreeing - expected


def test_rubric_redistribution_without_redistribution_is_grpo_on_the_judges_score():
    judged = (WEIGHTS * (RUBRIC * RUBRIC_MASK[:, :, None]).sum(dim=1)).sum(dim=1)
    rewards = torch.zeros_like(RUBRIC_MASK)
    rewards[:, 0] = judged  # the score anywhere on the row's valid steps
    grpo = registry.get("advantage", "grpo")().compute(rewards=rewards, mask=RUBRIC_MASK,
                                                       group_ids=RUBRIC_GROUPS)[0]
    for attribution in ("annotated", "agreeing"):
        out = _rubric(eta=0.0, attribution=attribution)[0]
        assert torch.allclose(out, grpo, atol=1e-12), attribution


def test_rubric_redistribution_gives_nothing_where_a_group_is_judged_alike():
    rubric = torch.zeros(2, 3, 2, dtype=torch.float64)
    rubric[0, 0, 0] = rubric[1, 2, 0] = 1.0  # the same score, met at different steps
    out = registry.get("advantage", "rubric_redistribution")(eta=1.0).compute(
        mask=torch.ones(2, 3), group_ids=torch.zeros(2, dtype=torch.long), rubric=rubric,
        rubric_weights=torch.ones(2, 2) / 2)[0]
    assert torch.equal(out, torch.zeros_like(out))


@pytest.mark.parametrize("attribution", ["annotated", "agreeing"])
def test_rubric_redistribution_keeps_each_episodes_sign_and_mean(attribution):
    gen = torch.Generator().manual_seed(0)
    rows, horizon, items = 24, 9, 4
    mask = (torch.arange(horizon) < torch.randint(1, horizon + 1, (rows, 1), generator=gen))
    rubric = torch.randint(-1, 2, (rows, horizon, items), generator=gen).to(torch.float64)
    rubric = rubric * (torch.rand(rows, horizon, items, generator=gen) < 0.3)
    weights = torch.rand(rows, items, generator=gen, dtype=torch.float64)
    groups = torch.arange(rows) // 4
    inputs = {"mask": mask.to(torch.float64), "group_ids": groups, "rubric": rubric,
              "rubric_weights": weights}
    method = registry.get("advantage", "rubric_redistribution")
    episode = method(eta=0.0).compute(**inputs)[0][:, 0]
    assert bool((episode != 0).sum() > rows // 2)  # the check below has signs to keep
    moved = 0
    for eta in (0.3, 1.0):
        out = method(eta=eta, attribution=attribution).compute(**inputs)[0]
        assert bool((out * episode[:, None] >= 0).all())
        assert bool((out[~mask] == 0).all())
        mean = out.sum(dim=1) / mask.sum(dim=1)
        assert torch.allclose(mean, episode, atol=1e-12)
        moved += int((out - episode[:, None] * mask).abs().gt(1e-9).sum())
    assert moved > 0  # and the steps do differ from the episode's advantage
