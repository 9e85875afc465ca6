"""The RLVR advantage estimators against re-derivations of their reference implementations.

Each ``ref_*`` below re-derives, in plain Python floats and loops over rows, the logic of the
reference function named in its docstring (verl ``verl/trainer/ppo/core_algos.py``; TRL
``GRPOTrainer``; RUCAIBox/Passk_Training ``code/passk_adv.py``). The inputs cover a group whose
scores are all equal, a group of one row, a group of all-zero scores, masked tokens (right
padding and a gap inside a row, with garbage at padded positions) and non-contiguous groups.
"""

import math
import statistics

import pytest
import torch

from workbench import families, registry

METHODS = ["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "remax", "opo",
           "gpg", "pass_at_k"]
T = 6
LENGTHS = [6, 3, 5, 1, 6, 2, 4, 6, 3, 5, 2]
GROUP_IDS = [3, 1, 3, 7, 1, 3, 5, 5, 1, 9, 9]  # 7: one row; 5: equal scores; 9: all zero
SCORES = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5, 0.5, 1.0, 0.0, 0.0]
GARBAGE = 100.0  # written at padded positions: must never reach a result


def make_mask():
    mask = [[1.0 if t < n else 0.0 for t in range(T)] for n in LENGTHS]
    mask[7][2] = 0.0  # a gap inside a row
    return mask


def outcome_rewards(mask):
    """The score at the last valid token, zeros at other valid tokens, garbage at padding."""
    rows = []
    for score, m in zip(SCORES, mask, strict=True):
        last = max(t for t in range(T) if m[t])
        rows.append([(score if t == last else 0.0) if m[t] else GARBAGE for t in range(T)])
    return rows


def dense_rewards(mask, seed=0):
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(len(mask), T, generator=gen, dtype=torch.float64).tolist()
    return [[noise[i][t] if mask[i][t] else GARBAGE for t in range(T)]
            for i in range(len(mask))]


def run(name, rewards, mask, group_ids=GROUP_IDS, dtype=torch.float64, **params):
    inputs = {"rewards": torch.tensor(rewards, dtype=dtype),
              "mask": torch.tensor(mask, dtype=dtype),
              "group_ids": torch.tensor(group_ids),
              "reward_baselines": torch.linspace(-1.0, 1.0, len(mask), dtype=dtype)}
    method = registry.get("advantage", name)(**params)
    needs = method.requirements(method.params)
    return method.compute(**{k: v for k, v in inputs.items() if k in needs})


# -- re-derivations --------------------------------------------------------------------------

def ref_scores(rewards, mask):
    return [sum(r for r, m in zip(row, mrow, strict=True) if m)
            for row, mrow in zip(rewards, mask, strict=True)]


def ref_members(group_ids):
    members = {}
    for row, gid in enumerate(group_ids):
        members.setdefault(gid, []).append(row)
    return members


def ref_broadcast(per_row, mask):
    return [[a if m else 0.0 for m in mrow] for a, mrow in zip(per_row, mask, strict=True)]


def ref_std(values, unbiased):
    return statistics.stdev(values) if unbiased else statistics.pstdev(values)


def ref_grpo(scores, group_ids, epsilon=1e-6, norm=True, unbiased=True, singleton="score",
             scale="group"):
    """verl compute_grpo_outcome_advantage: per group mean and torch.std; a group of one has
    mean 0 and std 1. TRL: scale 'batch' divides by the std of all scores; a group of one has
    the score itself as mean ('zero')."""
    members = ref_members(group_ids)
    out = []
    for i, s in enumerate(scores):
        group = [scores[j] for j in members[group_ids[i]]]
        if len(group) == 1:
            mean, std = (0.0, 1.0) if singleton == "score" else (s, 1.0)
        else:
            mean, std = statistics.fmean(group), ref_std(group, unbiased)
        if scale == "batch":
            std = ref_std(scores, unbiased)
        out.append((s - mean) / (std + epsilon) if norm else s - mean)
    return out


def ref_rloo(scores, group_ids, singleton="score"):
    """verl compute_rloo_outcome_advantage: s n/(n-1) - mean n/(n-1); n = 1 keeps the score
    (rloo_vectorized: 0)."""
    members = ref_members(group_ids)
    out = []
    for i, s in enumerate(scores):
        group = [scores[j] for j in members[group_ids[i]]]
        n = len(group)
        if n == 1:
            out.append(s if singleton == "score" else 0.0)
        else:
            out.append(s * n / (n - 1) - statistics.fmean(group) * n / (n - 1))
    return out


def ref_whiten(values, mask, unbiased=True, scale=True):
    """verl masked_whiten over valid tokens (its masked_mean adds 1e-8 to the count)."""
    flat = [v for row, mrow in zip(values, mask, strict=True)
            for v, m in zip(row, mrow, strict=True) if m]
    n = len(flat)
    mean = sum(flat) / (n + 1e-8)
    var = sum((v - mean) ** 2 for v in flat) / (n + 1e-8)
    if unbiased:
        var *= n / (n - 1)
    factor = 1 / math.sqrt(var + 1e-8) if scale else 1.0
    return [[(v - mean) * factor if m else 0.0 for v, m in zip(row, mrow, strict=True)]
            for row, mrow in zip(values, mask, strict=True)]


def ref_discounted(rewards, mask, gamma):
    """verl's REINFORCE++ returns: running = r_t + gamma running; reset after a padded token."""
    out = []
    for row, mrow in zip(rewards, mask, strict=True):
        running, returns = 0.0, [0.0] * T
        for t in reversed(range(T)):
            running = (row[t] if mrow[t] else 0.0) + gamma * running
            returns[t] = running if mrow[t] else 0.0
            running = running if mrow[t] else 0.0
        out.append(returns)
    return out


def ref_opo(scores, lengths, group_ids):
    """verl compute_opo_outcome_advantage: baseline = sum(len s) / sum(len); n = 1: 0."""
    members = ref_members(group_ids)
    out = []
    for i, s in enumerate(scores):
        rows = members[group_ids[i]]
        if len(rows) == 1:
            out.append(s)
            continue
        baseline = sum(lengths[j] * scores[j] for j in rows) / sum(lengths[j] for j in rows)
        out.append(s - baseline)
    return out


def ref_gpg(scores, group_ids, f_norm=1.0, alpha_rule="nonzero_scores"):
    """verl compute_gpg_outcome_advantage: alpha = B / max(#nonzero scores, 1) times
    (s - group mean) / f_norm, a group of one with mean 0."""
    members = ref_members(group_ids)
    if alpha_rule == "nonzero_scores":
        alpha = len(scores) / max(sum(1 for s in scores if s != 0), 1)
    else:
        alpha = 1.0
    out = []
    for i, s in enumerate(scores):
        group = [scores[j] for j in members[group_ids[i]]]
        mean = 0.0 if len(group) == 1 else statistics.fmean(group)
        out.append(alpha * (s - mean) / f_norm)
    return out


def ref_pass_at_k(scores, group_ids, k, epsilon=1e-6):
    """RUCAIBox/Passk_Training calc_adv for 0/1 rewards and k <= n."""
    members = ref_members(group_ids)
    out = []
    for i, s in enumerate(scores):
        group = [scores[j] for j in members[group_ids[i]]]
        n, c = len(group), sum(1 for v in group if v == 1)
        rho = 1 - math.comb(n - c, k) / math.comb(n, k)
        sigma = math.sqrt(rho * (1 - rho))
        if s == 1:
            out.append((1 - rho) / (sigma + epsilon))
        else:
            tail = math.comb(n - c - 1, k - 1) / math.comb(n - 1, k - 1)
            out.append((1 - rho - tail) / (sigma + epsilon))
    return out


def close(tensor, expected, tol=1e-12):
    got = torch.as_tensor(tensor, dtype=torch.float64)
    want = torch.tensor(expected, dtype=torch.float64)
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=tol, atol=tol), (got - want).abs().max()


# -- every estimator -------------------------------------------------------------------------

@pytest.mark.parametrize("name", METHODS)
def test_meets_the_advantage_contract(name):
    assert families.check(registry.get("advantage", name)) == []


@pytest.mark.parametrize("name", METHODS)
def test_float32_in_float32_out_and_zero_at_padding(name):
    mask = make_mask()
    advantages, returns = run(name, outcome_rewards(mask), mask, dtype=torch.float32)
    padded = torch.tensor(mask) == 0
    for out in (advantages, returns):
        assert out.dtype == torch.float32
        assert bool(torch.isfinite(out).all())
        assert bool((out[padded] == 0).all())


# -- GRPO and Dr. GRPO -----------------------------------------------------------------------

@pytest.mark.parametrize("rewards_of", [outcome_rewards, dense_rewards])
@pytest.mark.parametrize("options", [
    {},
    {"epsilon": 1e-4},
    {"norm_by_std": False},
    {"std": "biased"},
    {"singleton": "zero"},
    {"scale": "batch"},
    {"scale": "batch", "std": "biased", "singleton": "zero", "epsilon": 0.0},
])
def test_grpo_matches_verl_and_trl(rewards_of, options):
    mask = make_mask()
    rewards = rewards_of(mask)
    expected = ref_grpo(ref_scores(rewards, mask), GROUP_IDS,
                        epsilon=options.get("epsilon", 1e-6),
                        norm=options.get("norm_by_std", True),
                        unbiased=options.get("std", "unbiased") == "unbiased",
                        singleton=options.get("singleton", "score"),
                        scale=options.get("scale", "group"))
    advantages, returns = run("grpo", rewards, mask, **options)
    close(advantages, ref_broadcast(expected, mask))
    assert torch.equal(advantages, returns)


def test_grpo_by_hand():
    """Group {1, 1, 0}: mean 2/3, unbiased std sqrt(1/3): A = 1/sqrt(3) and -2/sqrt(3)."""
    mask = [[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]]
    rewards = [[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    advantages, _ = run("grpo", rewards, mask, group_ids=[0, 0, 0], epsilon=0.0)
    a = 1 / math.sqrt(3)
    close(advantages, [[a, a], [a, 0.0], [-2 * a, -2 * a]])


def test_grpo_edge_groups():
    mask = make_mask()
    advantages, _ = run("grpo", outcome_rewards(mask), mask)
    rows = {gid: [i for i, g in enumerate(GROUP_IDS) if g == gid] for gid in GROUP_IDS}
    valid = torch.tensor(mask) != 0
    for gid in (5, 9):  # all scores equal: no signal
        assert bool((advantages[rows[gid]] == 0).all())
    lone = rows[7][0]
    assert advantages[lone][valid[lone]].tolist() == pytest.approx([1.0 / (1.0 + 1e-6)])
    zero, _ = run("grpo", outcome_rewards(mask), mask, singleton="zero")
    assert bool((zero[lone] == 0).all())


def test_dr_grpo_is_grpo_without_the_std():
    mask = make_mask()
    rewards = dense_rewards(mask, seed=1)
    for singleton in ("score", "zero"):
        expected = ref_grpo(ref_scores(rewards, mask), GROUP_IDS, norm=False, singleton=singleton)
        advantages, _ = run("dr_grpo", rewards, mask, singleton=singleton)
        close(advantages, ref_broadcast(expected, mask))
        same, _ = run("grpo", rewards, mask, norm_by_std=False, singleton=singleton)
        assert torch.equal(advantages, same)


# -- RLOO ------------------------------------------------------------------------------------

@pytest.mark.parametrize("singleton", ["score", "zero"])
@pytest.mark.parametrize("rewards_of", [outcome_rewards, dense_rewards])
def test_rloo_matches_verl(rewards_of, singleton):
    mask = make_mask()
    rewards = rewards_of(mask)
    expected = ref_rloo(ref_scores(rewards, mask), GROUP_IDS, singleton)
    advantages, _ = run("rloo", rewards, mask, singleton=singleton)
    close(advantages, ref_broadcast(expected, mask))


def test_rloo_by_hand():
    """Group {1, 1, 0}: 1 - (1 + 0)/2 = 0.5 and 0 - (1 + 1)/2 = -1."""
    mask = [[1.0]] * 3
    advantages, _ = run("rloo", [[1.0], [1.0], [0.0]], mask, group_ids=[4, 4, 4])
    close(advantages, [[0.5], [0.5], [-1.0]])


# -- REINFORCE++ and its baseline variant ----------------------------------------------------

@pytest.mark.parametrize("options", [
    {}, {"gamma": 0.9}, {"std": "biased"}, {"norm_by_std": False}, {"gamma": 0.5, "std": "biased"},
])
@pytest.mark.parametrize("rewards_of", [outcome_rewards, dense_rewards])
def test_reinforce_pp_matches_verl(rewards_of, options):
    mask = make_mask()
    rewards = rewards_of(mask)
    returns = ref_discounted(rewards, mask, options.get("gamma", 1.0))
    expected = ref_whiten(returns, mask, unbiased=options.get("std", "unbiased") == "unbiased",
                          scale=options.get("norm_by_std", True))
    advantages, got_returns = run("reinforce_pp", rewards, mask, **options)
    close(got_returns, returns)
    close(advantages, expected)


def test_reinforce_pp_returns_by_hand():
    """r = (1, 2, -, 4) with a padded third token, gamma 0.5: G = (1 + 0.5 * 2, 2, 0, 4)."""
    mask = [[1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]]
    rewards = [[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 1.0, 9.0]]
    _, returns = run("reinforce_pp", rewards, mask, gamma=0.5)
    close(returns, [[2.0, 2.0, 0.0, 4.0], [0.25, 0.5, 1.0, 0.0]])


@pytest.mark.parametrize("options", [{}, {"std": "biased"}, {"singleton": "zero"}])
@pytest.mark.parametrize("rewards_of", [outcome_rewards, dense_rewards])
def test_reinforce_pp_baseline_matches_verl(rewards_of, options):
    mask = make_mask()
    rewards = rewards_of(mask)
    centred = ref_grpo(ref_scores(rewards, mask), GROUP_IDS, norm=False,
                       singleton=options.get("singleton", "score"))
    expected = ref_whiten(ref_broadcast(centred, mask), mask,
                          unbiased=options.get("std", "unbiased") == "unbiased")
    advantages, _ = run("reinforce_pp_baseline", rewards, mask, **options)
    close(advantages, expected)


# -- ReMax, OPO, GPG -------------------------------------------------------------------------

@pytest.mark.parametrize("rewards_of", [outcome_rewards, dense_rewards])
def test_remax_matches_verl(rewards_of):
    mask = make_mask()
    rewards = rewards_of(mask)
    baselines = torch.linspace(-1.0, 1.0, len(mask), dtype=torch.float64).tolist()
    returns = [[sum(row[u] for u in range(t, T) if mrow[u]) if mrow[t] else 0.0
                for t in range(T)] for row, mrow in zip(rewards, mask, strict=True)]
    expected = [[g - b if m else 0.0 for g, m in zip(row, mrow, strict=True)]
                for row, mrow, b in zip(returns, mask, baselines, strict=True)]
    advantages, got_returns = run("remax", rewards, mask)
    close(got_returns, returns)
    close(advantages, expected)


@pytest.mark.parametrize("rewards_of", [outcome_rewards, dense_rewards])
def test_opo_matches_verl_and_centres_every_group_over_tokens(rewards_of):
    mask = make_mask()
    rewards = rewards_of(mask)
    lengths = [sum(m) for m in mask]
    expected = ref_opo(ref_scores(rewards, mask), lengths, GROUP_IDS)
    advantages, _ = run("opo", rewards, mask)
    close(advantages, ref_broadcast(expected, mask))
    valid = torch.tensor(mask) != 0
    ids = torch.tensor(GROUP_IDS)
    for gid in set(GROUP_IDS) - {7}:  # a group of two or more rows
        rows = ids == gid
        assert abs(float(advantages[rows][valid[rows]].mean())) < 1e-12


def test_opo_by_hand():
    """Lengths 1 and 3, scores 1 and 0: baseline 1/4, A = 3/4 and -1/4."""
    mask = [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    advantages, _ = run("opo", [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], mask, group_ids=[2, 2])
    close(advantages, [[0.75, 0.0, 0.0], [-0.25, -0.25, -0.25]])


@pytest.mark.parametrize("options", [{}, {"f_norm": 2.0}, {"alpha": "one"}])
@pytest.mark.parametrize("rewards_of", [outcome_rewards, dense_rewards])
def test_gpg_matches_verl(rewards_of, options):
    mask = make_mask()
    rewards = rewards_of(mask)
    expected = ref_gpg(ref_scores(rewards, mask), GROUP_IDS, f_norm=options.get("f_norm", 1.0),
                       alpha_rule=options.get("alpha", "nonzero_scores"))
    advantages, _ = run("gpg", rewards, mask, **options)
    close(advantages, ref_broadcast(expected, mask))


def test_gpg_valid_rows_alpha_counts_rows_of_groups_with_a_spread():
    """11 rows; groups 5 and 9 (4 rows) have equal scores, the lone row 3 counts as valid:
    alpha = 11 / 7."""
    mask = make_mask()
    rewards = outcome_rewards(mask)
    advantages, _ = run("gpg", rewards, mask, alpha="valid_rows")
    plain, _ = run("gpg", rewards, mask, alpha="one")
    close(advantages, (plain * 11 / 7).tolist())


# -- pass@k ----------------------------------------------------------------------------------

PASS_IDS = [0, 1, 0, 1, 0, 2, 2, 1, 0, 2, 3, 3, 4, 4, 4, 3]  # 3: all correct; 4: all wrong
PASS_SCORES = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_pass_at_k_matches_the_reference(k):
    lengths = [1 + i % 3 for i in range(len(PASS_IDS))]
    mask = [[1.0] * n + [0.0] * (3 - n) for n in lengths]
    rewards = [[0.0] * (n - 1) + [s] + [GARBAGE] * (3 - n)
               for n, s in zip(lengths, PASS_SCORES, strict=True)]
    expected = ref_pass_at_k(PASS_SCORES, PASS_IDS, k)
    advantages, _ = run("pass_at_k", rewards, mask, group_ids=PASS_IDS, k=k)
    close(advantages, ref_broadcast(expected, mask))
    ids = torch.tensor(PASS_IDS)
    for gid in (3, 4):  # all correct, all wrong: no signal
        assert bool((advantages[ids == gid] == 0).all())


def test_pass_at_k_by_hand_and_its_limits():
    """n = 4, c = 1, k = 2: rho = 1 - C(3,2)/C(4,2) = 1/2, sigma = 1/2,
    A_pos = 1, A_neg = (1/2 - C(2,1)/C(3,1)) / (1/2) = -1/3 (epsilon 0)."""
    mask = [[1.0]] * 4
    rewards = [[1.0], [0.0], [0.0], [0.0]]
    advantages, _ = run("pass_at_k", rewards, mask, group_ids=[0] * 4, k=2, epsilon=0.0)
    close(advantages, [[1.0], [-1 / 3], [-1 / 3], [-1 / 3]])
    # k = 1 is GRPO with the biased std
    one, _ = run("pass_at_k", rewards, mask, group_ids=[0] * 4, k=1)
    grpo, _ = run("grpo", rewards, mask, group_ids=[0] * 4, std="biased")
    close(one, grpo.tolist())
    # k above the group size is lowered to it; a group of one gets 0
    big, _ = run("pass_at_k", rewards, mask, group_ids=[0] * 4, k=8)
    same, _ = run("pass_at_k", rewards, mask, group_ids=[0] * 4, k=4)
    assert torch.equal(big, same)
    lone, _ = run("pass_at_k", [[1.0]], [[1.0]], group_ids=[0], k=4)
    assert lone.tolist() == [[0.0]]
