"""The length-aware outcome advantages ``ddca`` and ``laser``: numbers worked by hand from their
formulas (explicit arithmetic, independent of the implementation), a plain-loop re-derivation
on a batch of shuffled groups with padding, their edge groups (all correct, none correct, one
correct, a group of one) and their family contract (what ``workbench check`` runs).
"""

import math
import statistics

import pytest
import torch

from workbench import families, registry
from workbench.cli import main as cli

GARBAGE = 100.0  # written at padded positions: must never reach a result


def inputs(scores, lengths, width=None):
    """rewards (score at the last valid token, garbage at padding) and a right-padded mask."""
    width = width or max(lengths)
    mask = [[1.0 if t < n else 0.0 for t in range(width)] for n in lengths]
    rewards = [[(s if t == n - 1 else 0.0) if t < n else GARBAGE for t in range(width)]
               for s, n in zip(scores, lengths, strict=True)]
    return rewards, mask


def run(name, scores, lengths, group_ids=None, dtype=torch.float64, **params):
    rewards, mask = inputs(scores, lengths)
    group_ids = [0] * len(scores) if group_ids is None else group_ids
    method = registry.get("advantage", name)(**params)
    advantages, returns = method.compute(rewards=torch.tensor(rewards, dtype=dtype),
                                         mask=torch.tensor(mask, dtype=dtype),
                                         group_ids=torch.tensor(group_ids))
    assert torch.equal(advantages, returns)
    valid = torch.tensor(mask) != 0
    assert bool((advantages[~valid] == 0).all())
    per_row = [row[ok].tolist() for row, ok in zip(advantages, valid, strict=True)]
    for values in per_row:  # one number on every valid token of a row
        assert values == [values[0]] * len(values)
    return [values[0] for values in per_row]


def close(got, want, tol=1e-9):
    assert got == pytest.approx(want, rel=tol, abs=tol)


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# -- contracts -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["ddca", "laser"])
def test_meets_the_advantage_contract(name, capsys):
    cls = registry.get("advantage", name)
    assert cls.fidelity == "reconstructed"
    assert families.check(cls) == []
    assert cli.main(["check", f"advantage/{name}"]) == 0
    assert f"ok   advantage/{name}: meets the advantage contract" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["ddca", "laser"])
def test_float32_in_float32_out(name):
    rewards, mask = inputs([1.0, 1.0, 0.0, 1.0], [2, 5, 3, 4])
    advantages, _ = registry.get("advantage", name)().compute(
        rewards=torch.tensor(rewards), mask=torch.tensor(mask),
        group_ids=torch.tensor([0, 0, 0, 0]))
    assert advantages.dtype == torch.float32 and bool(torch.isfinite(advantages).all())


# -- DDCA ------------------------------------------------------------------------------------

EPS = 1e-12  # the smallest epsilon ddca accepts: the hand-worked numbers leave it out


def test_ddca_three_correct_of_four_by_hand():
    """c = (1, 1, 1, 0), L = (2, 4, 6, 3). Accuracy: mean 3/4, biased std sqrt(3)/4, so
    A_corr = 1/sqrt(3) (correct) and -sqrt(3) (wrong). Correct lengths 2, 4, 6: mean 4,
    biased std sqrt(8/3), z = -+sqrt(3/2) and 0; sigmoid(z) averages to 1/2 (symmetric), so
    A_len = 1/2 - sigmoid(z) = (sigmoid(sqrt(1.5)) - 1/2, 0, 1/2 - sigmoid(sqrt(1.5))).
    Pass rate 3/4, lambda = 0.2 * 3/4 = 0.15."""
    got = run("ddca", [1.0, 1.0, 1.0, 0.0], [2, 4, 6, 3], epsilon=EPS)
    a_corr = 1 / math.sqrt(3)
    a_len = sigmoid(math.sqrt(1.5)) - 0.5
    close(got, [a_corr + 0.15 * a_len, a_corr, a_corr - 0.15 * a_len, -math.sqrt(3)])
    # the catalogue's reading: A_len = -z; and DCA (dynamic=False): lambda = length_weight
    got = run("ddca", [1.0, 1.0, 1.0, 0.0], [2, 4, 6, 3], epsilon=EPS, length_score="z",
              length_weight=0.5)
    close(got, [a_corr + 0.375 * math.sqrt(1.5), a_corr, a_corr - 0.375 * math.sqrt(1.5),
                -math.sqrt(3)])
    got = run("ddca", [1.0, 1.0, 1.0, 0.0], [2, 4, 6, 3], epsilon=EPS, length_score="z",
              length_weight=0.5, dynamic=False)
    close(got, [a_corr + 0.5 * math.sqrt(1.5), a_corr, a_corr - 0.5 * math.sqrt(1.5),
                -math.sqrt(3)])


def test_ddca_unbiased_std_by_hand():
    """As above with n - 1: accuracy std sqrt(1/4) = 1/2, so A_corr = 1/2 and -3/2; the
    correct lengths' std is 2, z = -1, 0, 1."""
    got = run("ddca", [1.0, 1.0, 1.0, 0.0], [2, 4, 6, 3], epsilon=EPS, std="unbiased",
              length_score="z", length_weight=0.4)
    close(got, [0.5 + 0.3, 0.5, 0.5 - 0.3, -1.5])


def test_ddca_all_correct_is_length_only():
    """L = (2, 4, 6, 8): A_corr = 0, pass rate 1; mean 5, biased var 5, z = (L - 5)/sqrt(5)."""
    lengths = [2, 4, 6, 8]
    got = run("ddca", [1.0] * 4, lengths, epsilon=EPS)
    squashed = [sigmoid((n - 5) / math.sqrt(5)) for n in lengths]
    close(got, [-0.2 * (s - sum(squashed) / 4) for s in squashed])
    assert got[0] > got[1] > 0 > got[2] > got[3]  # shorter correct answers gain
    close(run("ddca", [1.0] * 4, lengths, epsilon=EPS, length_score="z", length_weight=1.0),
          [-(n - 5) / math.sqrt(5) for n in lengths])


def test_ddca_none_correct_and_one_correct():
    assert run("ddca", [0.0] * 4, [2, 4, 6, 3]) == [0.0] * 4
    # one correct row: |C| = 1, no length term whatever the lengths; c mean 1/4, biased std
    # sqrt(3)/4: A = sqrt(3) and -1/sqrt(3)
    for lengths in ([2, 4, 6, 3], [9, 1, 1, 1]):
        for score in ("sigmoid", "z"):
            got = run("ddca", [1.0, 0.0, 0.0, 0.0], lengths, epsilon=EPS, length_score=score)
            close(got, [math.sqrt(3)] + [-1 / math.sqrt(3)] * 3)


def test_ddca_equal_correct_lengths_and_a_group_of_one():
    got = run("ddca", [1.0, 0.0, 1.0], [4, 2, 4], epsilon=EPS)  # std_C(L) = 0: no length term
    close(got, [1 / math.sqrt(2), -math.sqrt(2), 1 / math.sqrt(2)])
    assert run("ddca", [1.0], [3]) == [0.0]
    assert run("ddca", [0.0], [3]) == [0.0]


def test_ddca_reads_correctness_not_the_score_and_respects_the_threshold():
    """A partial reward below the threshold is wrong (the accuracy term sees 0/1 only)."""
    plain = run("ddca", [1.0, 1.0, 0.0, 0.0], [2, 4, 6, 3])
    close(run("ddca", [1.0, 1.0, 0.1, 0.3], [2, 4, 6, 3]), plain)
    close(run("ddca", [0.6, 0.6, 0.1, 0.3], [2, 4, 6, 3], success_threshold=0.5), plain)


def test_ddca_without_length_weight_is_grpo_on_correctness():
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    lengths = [3, 5, 2, 6, 1, 4, 4, 2, 5]
    ids = [4, 2, 4, 2, 2, 4, 9, 9, 4]  # group 9: all wrong
    got = run("ddca", scores, lengths, ids, length_weight=0.0)
    grpo = run("grpo", scores, lengths, ids, std="biased", epsilon=1e-8)
    close(got, grpo)


def ref_ddca(scores, lengths, group_ids, weight=0.2, dynamic=True, score="sigmoid",
             unbiased=False, eps=1e-8, threshold=1.0):
    """A plain-loop re-derivation of the formula in methods/advantage/ddca.py."""
    def spread(values):
        if len(values) < 2:
            return 0.0
        return statistics.stdev(values) if unbiased else statistics.pstdev(values)

    out = [0.0] * len(scores)
    for gid in set(group_ids):
        rows = [i for i, g in enumerate(group_ids) if g == gid]
        c = {i: 1.0 if scores[i] >= threshold else 0.0 for i in rows}
        mean_c, std_c = statistics.fmean(c.values()), spread(list(c.values()))
        good = [i for i in rows if c[i]]
        length_adv = dict.fromkeys(rows, 0.0)
        if good:
            mean_l = statistics.fmean(lengths[i] for i in good)
            std_l = spread([lengths[i] for i in good])
            z = {i: (lengths[i] - mean_l) / (max(std_l, eps) + eps) for i in good}
            if score == "z":
                length_adv.update({i: -z[i] for i in good})
            else:
                s = {i: sigmoid(min(max(z[i], -20.0), 20.0)) for i in good}
                mean_s = statistics.fmean(s.values())
                length_adv.update({i: -(s[i] - mean_s) for i in good})
        lam = weight * (len(good) / len(rows) if dynamic else 1.0)
        for i in rows:
            out[i] = (c[i] - mean_c) / (max(std_c, eps) + eps) + lam * length_adv[i]
    return out


@pytest.mark.parametrize("options", [
    {},
    {"length_score": "z"},
    {"dynamic": False, "length_weight": 0.7},
    {"std": "unbiased", "epsilon": 1e-6},
    {"success_threshold": 0.5},
])
def test_ddca_matches_a_loop_over_shuffled_groups(options):
    scores = [1.0, 0.0, 1.0, 1.0, 0.6, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    lengths = [3, 5, 2, 6, 1, 4, 4, 2, 5, 7, 6, 3, 6]
    ids = [4, 2, 4, 2, 2, 4, 9, 8, 4, 9, 2, 5, 2]  # 9: all wrong; 8 and 5: one row each
    got = run("ddca", scores, lengths, ids, **options)
    want = ref_ddca(scores, lengths, ids, weight=options.get("length_weight", 0.2),
                    dynamic=options.get("dynamic", True),
                    score=options.get("length_score", "sigmoid"),
                    unbiased=options.get("std") == "unbiased",
                    eps=options.get("epsilon", 1e-8),
                    threshold=options.get("success_threshold", 1.0))
    close(got, want)


# -- LASER -----------------------------------------------------------------------------------

def test_laser_three_correct_of_four_by_hand():
    """Scores (1, 1, 1, 0), L = (2, 4, 9, 3), L_T = 5, alpha = 0.5: shaped rewards
    (1.5, 1.5, 1, 0) (the long correct answer and the wrong one get no bonus); mean 1,
    unbiased std sqrt((0.25 + 0.25 + 0 + 1) / 3) = 1/sqrt(2)."""
    got = run("laser", [1.0, 1.0, 1.0, 0.0], [2, 4, 9, 3], target_length=5, epsilon=0.0)
    r = math.sqrt(2)
    close(got, [0.5 * r, 0.5 * r, 0.0, -r])


def test_laser_target_is_inclusive_and_biased_std_is_an_option():
    """L_T = 4: L = 4 earns the bonus; shaped (1.5, 1.5, 1, 0) as above; biased std
    sqrt(1.5 / 4)."""
    got = run("laser", [1.0, 1.0, 1.0, 0.0], [2, 4, 9, 3], target_length=4, std="biased",
              epsilon=0.0)
    s = math.sqrt(1.5 / 4)
    close(got, [0.5 / s, 0.5 / s, 0.0, -1 / s])


def test_laser_edge_groups():
    # all correct, lengths on both sides of L_T = 5: shaped (1.5, 1, 1.5, 1); mean 1.25,
    # unbiased std sqrt(4 * 0.0625 / 3)
    got = run("laser", [1.0] * 4, [2, 8, 5, 6], target_length=5, epsilon=0.0)
    a = 0.25 / math.sqrt(0.25 / 3)
    close(got, [a, -a, a, -a])
    # all correct and all within L_T, or none correct however short: no signal
    assert run("laser", [1.0] * 4, [2, 3, 5, 4], target_length=5) == [0.0] * 4
    assert run("laser", [0.0] * 4, [1, 2, 3, 4], target_length=5) == [0.0] * 4
    # one correct and short: shaped (1.5, 0, 0, 0); mean 0.375, unbiased std
    # sqrt((1.125^2 + 3 * 0.375^2) / 3) = 0.75
    close(run("laser", [1.0, 0.0, 0.0, 0.0], [2, 3, 1, 4], target_length=5, epsilon=0.0),
          [1.5, -0.5, -0.5, -0.5])
    # a group of one: verl's rule (mean 0, std 1) or 0
    close(run("laser", [1.0], [2], target_length=5, epsilon=0.0), [1.5])
    assert run("laser", [1.0], [2], target_length=5, singleton="zero") == [0.0]


def test_laser_without_alpha_or_with_no_short_answer_is_grpo():
    scores = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    lengths = [3, 5, 2, 6, 1, 4, 4, 2, 5, 2]
    ids = [4, 2, 4, 2, 2, 4, 9, 9, 4, 7]
    for options in ({"alpha": 0.0}, {"target_length": 0}, {"singleton": "zero", "alpha": 0.0},
                    {"std": "biased", "alpha": 0.0}):
        got = run("laser", scores, lengths, ids, **options)
        grpo_options = {k: v for k, v in options.items() if k in ("singleton", "std")}
        close(got, run("grpo", scores, lengths, ids, **grpo_options))


def test_laser_bonus_needs_the_threshold():
    """A partial reward of 0.3 stays 0.3 (no bonus, however short); with threshold 0.25 it
    earns one: shaped (1.5, 0.8, 0) and (1.5, 0.3, 0)."""
    got = run("laser", [1.0, 0.3, 0.0], [2, 2, 2], target_length=5, epsilon=0.0)
    mean, std = 0.6, statistics.stdev([1.5, 0.3, 0.0])
    close(got, [(1.5 - mean) / std, (0.3 - mean) / std, -mean / std])
    got = run("laser", [1.0, 0.3, 0.0], [2, 2, 2], target_length=5, epsilon=0.0,
              success_threshold=0.25)
    mean, std = 2.3 / 3, statistics.stdev([1.5, 0.8, 0.0])
    close(got, [(1.5 - mean) / std, (0.8 - mean) / std, -mean / std])
