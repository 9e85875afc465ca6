"""The RLVR entropy methods (clip_higher, clip_cov, kl_cov, top_entropy_tokens): hand-made cases
whose selected tokens are known, the fractions, padding, determinism, gradients, and each
method against an independent re-derivation of its reference implementation's logic (verl
``core_algos`` for the first three, the 80/20 authors' verl fork for the last)."""

import math

import pytest
import torch

from workbench import registry
from workbench.testbeds.shared.losses import ppo_clip_loss

F64 = torch.float64


def method(name, **params):
    return registry.get("entropy", name)(**params)


def random_batch(seed, rows=16, horizon=48, log_ratio_scale=0.3, empty_row=False):
    """Seeded float64 hook inputs with right-padded rows (row 0 full; optionally a last row
    with no valid token)."""
    gen = torch.Generator().manual_seed(seed)
    shape = (rows, horizon)
    log_probs = -torch.rand(shape, generator=gen, dtype=F64) * 5.0 - 0.01
    lengths = torch.randint(horizon // 4, horizon + 1, (rows,), generator=gen)
    lengths[0] = horizon
    if empty_row:
        lengths[-1] = 0
    return {
        "log_probs": log_probs,
        "old_log_probs": log_probs + log_ratio_scale * torch.randn(shape, generator=gen,
                                                                   dtype=F64),
        "advantages": 1.5 * torch.randn(shape, generator=gen, dtype=F64),
        "mask": (torch.arange(horizon) < lengths[:, None]).to(F64),
        "entropy": 2.0 * torch.rand(shape, generator=gen, dtype=F64),
    }


# independent re-derivations of the references' logic ------------------------------------------

def reference_masked_mean(x, mask):
    return (x * mask).sum() / (mask.sum() + 1e-8)


def reference_agg(loss_mat, mask, mode):
    """verl agg_loss, one process: per-token losses times the mask, then the mode's normaliser."""
    weighted = loss_mat * mask
    if mode == "token-mean":
        return weighted.sum() / mask.sum()
    if mode == "seq-mean-token-sum-norm":
        return weighted.sum() / mask.shape[-1]
    per_row = weighted.sum(-1)
    if mode == "seq-mean-token-mean":
        per_row = per_row / (mask.sum(-1) + 1e-8)
    rows = (mask.sum(-1) > 0).to(loss_mat.dtype)
    return (per_row * rows).sum() / rows.sum()


def reference_ppo_loss(batch, clip_ratio_low, clip_ratio_high, clip_ratio_c=3.0):
    """verl's vanilla clipped loss (log-ratio clamped to +-20, dual clip for A < 0, token-mean)
    and its pg_clipfrac."""
    adv, mask = batch["advantages"], batch["mask"]
    ratio = (batch["log_probs"] - batch["old_log_probs"]).clamp(-20.0, 20.0).exp()
    plain, clipped = -adv * ratio, -adv * ratio.clamp(1 - clip_ratio_low, 1 + clip_ratio_high)
    pessimistic = torch.maximum(plain, clipped)
    per_token = torch.where(adv < 0, torch.minimum(-adv * clip_ratio_c, pessimistic),
                            pessimistic)
    clipfrac = reference_masked_mean((clipped > plain).to(F64), mask)
    return reference_agg(per_token, mask, "token-mean"), clipfrac


def reference_clip_cov(batch, generator, clip_low, clip_high, ratio_param, lb, ub,
                       mode="token-mean"):
    """verl's compute_policy_loss_clip_cov: (loss, corr) with its randperm drawn from
    ``generator``; the loss aggregated by ``mode`` over the full response mask."""
    adv, mask, logp = batch["advantages"], batch["mask"], batch["log_probs"]
    ratio = (logp - batch["old_log_probs"]).exp()
    plain, clipped = -adv * ratio, -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    by_origin = (clipped > plain) & (mask > 0)
    cov = (adv - reference_masked_mean(adv, mask)) * (logp - reference_masked_mean(logp, mask))
    cov[mask == 0] = -math.inf
    cov[by_origin] = -math.inf
    n_clip = max(int(ratio_param * mask.sum().item()), 1)
    where = torch.nonzero((cov < ub) & (cov > lb) & (mask > 0))
    corr = torch.ones_like(adv)
    if len(where) > 0:
        where = where[torch.randperm(len(where), generator=generator)[:min(n_clip, len(where))]]
        corr[where[:, 0], where[:, 1]] = 0
    return reference_agg(torch.maximum(plain, clipped) * corr, mask, mode), corr


def reference_kl_cov(batch, log_probs, ratio_param, coef, mode):
    """verl's compute_policy_loss_kl_cov (unclipped surrogate, |log-ratio| penalty on the top
    covariance tokens); ``log_probs`` carries the graph."""
    adv, mask = batch["advantages"], batch["mask"]
    log_ratio = log_probs - batch["old_log_probs"]
    losses = -adv * log_ratio.exp()
    penalised = losses + coef * log_ratio.abs()
    valid = mask > 0
    flat_valid = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    a, lp = adv[valid].detach(), log_probs[valid].detach()
    if len(a) > 0:
        cov = (a - a.mean()) * (lp - lp.mean())
        top = flat_valid[torch.topk(cov, max(1, int(len(cov) * ratio_param))).indices]
        rows, cols = top // adv.shape[1], top % adv.shape[1]
        losses = losses.index_put((rows, cols), penalised[rows, cols])
    return reference_agg(losses, mask, mode)


def reference_top_entropy_mask(entropy, mask, top_ratio):
    """The 80/20 fork's get_global_entropy_top_mask."""
    flat_valid = mask.flatten().bool()
    values = entropy.flatten()[flat_valid]
    out = torch.zeros(entropy.numel(), dtype=torch.long)
    if values.numel() == 0:
        return out.view_as(entropy)
    k = max(1, int(len(values) * top_ratio + 0.9999))
    out[flat_valid.nonzero().squeeze(1)[torch.topk(values, k=k).indices]] = 1
    return out.view_as(entropy)


def loop_loss(batch, hook, log_probs=None):
    """A policy loss as the hook contract defines it: ratio clipped to the hook's bounds, the
    per-token term times loss_mask, token-mean over mask, plus extra_loss."""
    log_probs = batch["log_probs"] if log_probs is None else log_probs
    adv, mask = batch["advantages"], batch["mask"]
    ratio = (log_probs - batch["old_log_probs"]).exp()
    clipped = ratio.clamp(1 - float(hook.get("clip_low", 0.2)),
                          1 + float(hook.get("clip_high", 0.2)))
    per_token = (torch.maximum(-adv * ratio, -adv * clipped) * hook.get("loss_mask", 1.0)
                 * hook.get("loss_weight", 1.0))
    return (per_token * mask).sum() / mask.sum() + hook.get("extra_loss", 0.0)


# reference checks -------------------------------------------------------------------------------

def test_clip_higher_matches_verl_asymmetric_clip_over_20_batches():
    ours = method("clip_higher")
    for seed in range(20):
        batch = random_batch(seed, log_ratio_scale=0.2)  # ratios stay below the dual clip (3)
        hook = ours.policy_loss_hook(**batch)
        expected, clipfrac = reference_ppo_loss(batch, 0.2, 0.28)
        assert float(loop_loss(batch, hook)) == pytest.approx(float(expected), rel=1e-12)
        metrics = hook["metrics"]
        assert metrics["clipped_low_frac"] > 0 and metrics["clipped_high_frac"] > 0
        assert metrics["clipped_low_frac"] + metrics["clipped_high_frac"] == pytest.approx(
            float(clipfrac), rel=1e-9)
    # the asymmetry matters: symmetric 0.2 clipping gives another loss on the same batch
    symmetric, _ = reference_ppo_loss(batch, 0.2, 0.2)
    assert float(loop_loss(batch, hook)) != pytest.approx(float(symmetric), rel=1e-6)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_clip_cov_matches_verl_selection_and_loss_over_20_batches(mode):
    params = dict(clip_cov_ratio=0.01, clip_cov_lb=1.0, clip_cov_ub=5.0, clip_low=0.2,
                  clip_high=0.28, seed=7)
    ours = method("clip_cov", **params)
    ours.start({"total_steps": 20})
    generator = torch.Generator().manual_seed(7)
    dropped_total = 0
    for seed in range(20):
        batch = random_batch(seed)
        hook = ours.policy_loss_hook(**batch)
        expected, corr = reference_clip_cov(batch, generator, 0.2, 0.28, 0.01, 1.0, 5.0, mode)
        valid = batch["mask"] > 0
        assert torch.equal(hook["loss_weight"][valid], corr[valid])
        assert "loss_mask" not in hook
        assert (hook["clip_low"], hook["clip_high"]) == (0.2, 0.28)
        # the loops' loss: verl keeps the dropped tokens in the aggregation's count
        loss, _ = ppo_clip_loss(batch["log_probs"], batch["old_log_probs"],
                                batch["advantages"], batch["mask"], hook["clip_low"],
                                hook["clip_high"], agg=mode, weight=hook["loss_weight"])
        assert float(loss) == pytest.approx(float(expected), rel=1e-12)
        if mode == "seq-mean-token-mean":  # dropping them from the mask gives another loss
            as_mask, _ = ppo_clip_loss(batch["log_probs"], batch["old_log_probs"],
                                       batch["advantages"], batch["mask"] * hook["loss_weight"],
                                       hook["clip_low"], hook["clip_high"], agg=mode)
            assert float(as_mask) != pytest.approx(float(expected), rel=1e-9)
        dropped = int((corr[valid] == 0).sum())
        assert dropped == max(int(0.01 * int(valid.sum())), 1)
        assert hook["metrics"]["cov_clipped_frac"] == pytest.approx(dropped / int(valid.sum()))
        assert hook["metrics"]["cov_candidate_frac"] * int(valid.sum()) > dropped
        dropped_total += dropped
    assert dropped_total > 20


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                  "seq-mean-token-sum-norm"])
def test_kl_cov_matches_verl_loss_and_gradient_over_20_batches(mode):
    ours = method("kl_cov", kl_cov_ratio=0.02, kl_coef=0.7, loss_agg_mode=mode)
    for seed in range(20):
        batch = random_batch(seed, empty_row=seed % 2 == 1)
        mine = batch["log_probs"].clone().requires_grad_(True)
        theirs = batch["log_probs"].clone().requires_grad_(True)
        hook = ours.policy_loss_hook(**{**batch, "log_probs": mine})
        surrogate = torch.maximum(
            -batch["advantages"] * (mine - batch["old_log_probs"]).exp(),
            -batch["advantages"] * (mine - batch["old_log_probs"]).exp().clamp(
                1 - hook["clip_low"], 1 + hook["clip_high"]))
        loss = reference_agg(surrogate, batch["mask"], mode) + hook["extra_loss"]
        expected = reference_kl_cov(batch, theirs, 0.02, 0.7, mode)
        assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-12)
        loss.backward()
        expected.backward()
        assert torch.allclose(mine.grad, theirs.grad, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("rho", [0.2, 0.05, 0.5, 1.0])
def test_top_entropy_tokens_matches_the_80_20_reference_mask_over_20_batches(rho):
    ours = method("top_entropy_tokens", rho=rho)
    for seed in range(20):
        batch = random_batch(seed, rows=4 + seed % 5, horizon=8 + 3 * seed)
        hook = ours.policy_loss_hook(**batch)
        expected = reference_top_entropy_mask(batch["entropy"], batch["mask"], rho)
        assert torch.equal(hook["loss_mask"].long(), expected)
        assert hook["metrics"]["top_entropy_selected_frac"] == pytest.approx(
            float(expected.sum()) / float(batch["mask"].sum()))
        chosen = batch["entropy"][expected.bool()]
        assert hook["metrics"]["top_entropy_threshold"] == float(chosen.min())


# hand-made cases --------------------------------------------------------------------------------

def hand_batch():
    """One row of four valid tokens and one padded one whose values would win if it leaked.

    A = [2, -1, 0.5, -1.5] (mean 0), logp = [-0.5, -3, -2.5, -1] (mean -1.75): the centred
    covariances are [2.5, 1.25, -0.375, -1.125]."""
    return {
        "log_probs": torch.tensor([[-0.5, -3.0, -2.5, -1.0, -0.01]], dtype=F64),
        "old_log_probs": torch.tensor([[-0.6, -2.9, -2.5, -1.2, -3.0]], dtype=F64),
        "advantages": torch.tensor([[2.0, -1.0, 0.5, -1.5, 2.0]], dtype=F64),
        "mask": torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]], dtype=F64),
        "entropy": torch.tensor([[0.1, 0.9, 0.5, 0.3, 9.0]], dtype=F64),
    }


@pytest.mark.parametrize("ratio, expected", [(0.1, [1, 0, 0, 0, 0]),   # floor 0.4 -> at least 1
                                             (0.3, [1, 0, 0, 0, 0]),   # floor 1.2 = 1
                                             (0.5, [1, 1, 0, 0, 0]),   # 2
                                             (0.99, [1, 1, 1, 0, 0])])  # floor 3.96 = 3
def test_kl_cov_penalises_the_top_covariance_tokens_and_only_them(ratio, expected):
    batch = hand_batch()
    log_probs = batch["log_probs"].clone().requires_grad_(True)
    hook = method("kl_cov", kl_cov_ratio=ratio, kl_coef=2.0).policy_loss_hook(
        **{**batch, "log_probs": log_probs})
    hook["extra_loss"].backward()
    chosen = torch.tensor([expected], dtype=torch.bool)
    sign = (batch["log_probs"] - batch["old_log_probs"]).sign()
    assert torch.equal(log_probs.grad, torch.where(chosen, 2.0 * sign / 4, 0.0))
    abs_kl = (batch["log_probs"] - batch["old_log_probs"]).abs()
    penalty = 2.0 * float(abs_kl[chosen].sum()) / 4
    assert float(hook["extra_loss"].detach()) == pytest.approx(penalty)
    assert hook["metrics"]["kl_cov_selected_frac"] == sum(expected) / 4
    assert "loss_mask" not in hook


def test_kl_cov_clip_surrogate_option_keeps_the_loops_clip():
    batch = hand_batch()
    assert "clip_high" not in method("kl_cov", clip_surrogate=True).policy_loss_hook(**batch)
    hook = method("kl_cov").policy_loss_hook(**batch)
    ratio = torch.tensor([0.0, 1e-300, 0.5, 1e300, torch.finfo(F64).max], dtype=F64)
    assert torch.equal(ratio.clamp(1 - hook["clip_low"], 1 + hook["clip_high"]), ratio)
    float32_hook = method("kl_cov").policy_loss_hook(
        **{k: v.float() for k, v in batch.items()})
    assert math.isfinite(float32_hook["clip_high"])
    assert torch.isfinite(torch.ones(1).clamp(0.0, 1 + float32_hook["clip_high"])).all()


def test_clip_cov_drops_in_range_tokens_not_already_clipped_nor_padding():
    batch = hand_batch()  # covariances [2.5, 1.25, -0.375, -1.125]; the padded one would be 2.5
    hook = method("clip_cov", clip_cov_ratio=1.0).policy_loss_hook(**batch)
    assert hook["loss_weight"].tolist() == [[0.0, 0.0, 1.0, 1.0, 0.0]]
    # token 1 (A < 0) with ratio exp(-0.5) < 1 - 0.2 is clipped by PPO already: not a candidate
    clipped = {**batch, "old_log_probs": batch["old_log_probs"] + torch.tensor(
        [[0.0, 0.4, 0.0, 0.0, 0.0]], dtype=F64)}
    hook = method("clip_cov", clip_cov_ratio=1.0).policy_loss_hook(**clipped)
    assert hook["loss_weight"].tolist() == [[0.0, 1.0, 1.0, 1.0, 0.0]]
    # bounds: with lb = 2 only token 0 is in range; with ub = 2 only token 1
    only_first = method("clip_cov", clip_cov_ratio=1.0, clip_cov_lb=2.0).policy_loss_hook(
        **batch)
    assert only_first["loss_weight"].tolist() == [[0.0, 1.0, 1.0, 1.0, 0.0]]
    only_second = method("clip_cov", clip_cov_ratio=1.0, clip_cov_ub=2.0).policy_loss_hook(
        **batch)
    assert only_second["loss_weight"].tolist() == [[1.0, 0.0, 1.0, 1.0, 0.0]]
    assert only_second["metrics"] == {"cov_clipped_frac": 0.25, "cov_candidate_frac": 0.25}


def test_clip_cov_drops_one_token_at_the_default_ratio():
    hook = method("clip_cov").policy_loss_hook(**hand_batch())  # floor(2e-4 * 4) = 0 -> 1
    assert float((1 - hook["loss_weight"])[0, :4].sum()) == 1
    assert float(hook["loss_weight"][0, 2:4].sum()) == 2  # the out-of-range ones are kept


@pytest.mark.parametrize("rho, expected", [(0.25, [0, 1, 0, 0, 0]),     # ceil(1.0) = 1
                                           (0.3, [0, 1, 1, 0, 0]),      # ceil(1.2) = 2
                                           (0.5, [0, 1, 1, 0, 0]),      # 2
                                           (0.0, [0, 1, 0, 0, 0]),      # at least one
                                           (1.0, [1, 1, 1, 1, 0])])     # never the padding
def test_top_entropy_tokens_keeps_the_highest_entropy_valid_tokens(rho, expected):
    hook = method("top_entropy_tokens", rho=rho).policy_loss_hook(**hand_batch())
    assert hook["loss_mask"].tolist() == [[float(e) for e in expected]]
    assert hook["metrics"]["top_entropy_selected_frac"] == sum(expected) / 4


def test_top_entropy_tokens_breaks_ties_by_position():
    batch = random_batch(3, rows=4, horizon=10)
    batch["entropy"] = torch.ones_like(batch["entropy"])
    hook = method("top_entropy_tokens", rho=0.2).policy_loss_hook(**batch)
    valid = batch["mask"].reshape(-1) > 0
    k = max(1, int(int(valid.sum()) * 0.2 + 0.9999))
    first_valid = valid.nonzero().squeeze(1)[:k]
    assert hook["loss_mask"].reshape(-1).nonzero().squeeze(1).tolist() == first_valid.tolist()


# properties on random inputs --------------------------------------------------------------------

# (method, hyperparameters, the hook's key for its 0/1 token selection)
MASKING = [("clip_cov", {"clip_cov_ratio": 0.05}, "loss_weight"),
           ("top_entropy_tokens", {"rho": 0.3}, "loss_mask")]


@pytest.mark.parametrize("name, params, key", MASKING)
def test_loss_mask_is_a_subset_of_mask_and_never_selects_padding(name, params, key):
    for seed in range(5):
        batch = random_batch(seed, empty_row=True)
        batch["entropy"] = torch.where(batch["mask"] > 0, batch["entropy"], 100.0)
        loss_mask = method(name, **params).policy_loss_hook(**batch)[key]
        assert set(loss_mask.unique().tolist()) <= {0.0, 1.0}
        assert bool((loss_mask <= batch["mask"]).all())
        assert float(loss_mask[batch["mask"] == 0].abs().sum()) == 0.0


@pytest.mark.parametrize("rows, horizon", [(2, 7), (5, 33), (16, 64)])
def test_fractions_follow_the_references_rounding(rows, horizon):
    batch = random_batch(rows * horizon, rows=rows, horizon=horizon, log_ratio_scale=0.0)
    n = int(batch["mask"].sum())
    top = method("top_entropy_tokens", rho=0.3).policy_loss_hook(**batch)["loss_mask"]
    assert int(top.sum()) == max(1, math.ceil(0.3 * n - 1e-4))
    log_probs = batch["log_probs"].clone().requires_grad_(True)
    kl = method("kl_cov", kl_cov_ratio=0.1).policy_loss_hook(**{**batch,
                                                                "log_probs": log_probs})
    assert kl["metrics"]["kl_cov_selected_frac"] * n == pytest.approx(max(1, n // 10))


def test_kl_cov_gradient_reaches_only_selected_tokens_and_masks_carry_no_graph():
    batch = random_batch(11, empty_row=True)
    log_probs = batch["log_probs"].clone().requires_grad_(True)
    given = {**batch, "log_probs": log_probs}
    hook = method("kl_cov", kl_cov_ratio=0.05).policy_loss_hook(**given)
    assert hook["extra_loss"].requires_grad
    hook["extra_loss"].backward()
    touched = int((log_probs.grad != 0).sum())
    n = int(batch["mask"].sum())
    assert touched == int(n * 0.05)
    assert float(log_probs.grad[batch["mask"] == 0].abs().sum()) == 0.0
    for name, params, key in MASKING:
        loss_mask = method(name, **params).policy_loss_hook(**given)[key]
        assert not loss_mask.requires_grad


@pytest.mark.parametrize("name", ["clip_higher", "clip_cov", "kl_cov", "top_entropy_tokens"])
def test_hooks_leave_inputs_unchanged_and_return_finite_metrics(name):
    batch = random_batch(5, empty_row=True)
    given = {k: v.clone() for k, v in batch.items()}
    hook = method(name).policy_loss_hook(**given)
    assert all(torch.equal(batch[k], given[k]) for k in batch)
    assert hook["metrics"] and all(isinstance(v, float) and math.isfinite(v)
                                   for v in hook["metrics"].values())


def test_clip_cov_is_deterministic_given_its_seed_and_restarts_with_start():
    batches = [random_batch(seed, log_ratio_scale=0.05) for seed in range(5)]

    def masks(instance):
        return [instance.policy_loss_hook(**b)["loss_weight"] for b in batches]

    first, second = method("clip_cov", clip_cov_ratio=0.01), method("clip_cov",
                                                                   clip_cov_ratio=0.01)
    run = masks(first)
    assert all(torch.equal(a, b) for a, b in zip(run, masks(second), strict=True))
    first.start({"total_steps": 5})
    assert all(torch.equal(a, b) for a, b in zip(run, masks(first), strict=True))
    other = masks(method("clip_cov", clip_cov_ratio=0.01, seed=1))
    assert not all(torch.equal(a, b) for a, b in zip(run, other, strict=True))


def test_coefficients_and_bounds():
    bonus = method("clip_higher", entropy_coef=0.003)
    bonus.start({"total_steps": 3})
    assert [bonus.coefficient(s, 1.0) for s in range(3)] == [0.003] * 3
    assert bonus.coefficient_bounds() == (0.003, 0.003)
    for name in ("clip_cov", "kl_cov", "top_entropy_tokens"):
        assert method(name).coefficient(0, 1.0) == 0.0
        assert method(name).coefficient_bounds() == (0.0, 0.0)
