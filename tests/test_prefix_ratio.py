"""PNPO's prefix geometric-mean ratio (``ratio_level: prefix``): hand-worked values and
gradients, its clamps, and the on-policy identity with the token level, in the loss and in the
RLVR loop."""

from __future__ import annotations

import math

import pytest
import torch

from tests.test_rlvr_loop import cache, run_rlvr  # noqa: F401 (cache: the autouse fixture)
from workbench.testbeds.shared.losses import ppo_clip_loss, prefix_ratio

LOG2 = math.log(2.0)


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def test_prefix_ratio_by_hand():
    # log r = [log 2, 0, -log 2]: w1 = exp(log 2 / 1) = 2, w2 = exp((log 2 + 0) / 2) = sqrt 2,
    # w3 = exp((log 2 + 0 - log 2) / 3) = 1
    w = prefix_ratio(t([[LOG2, 0.0, -LOG2]]), t([[1.0, 1.0, 1.0]]))
    assert w.tolist()[0] == pytest.approx([2.0, math.sqrt(2.0), 1.0], rel=1e-12)


def test_prefix_counts_only_valid_tokens():
    # mask [0, 1, 0, 1]: the first valid token is t = 1 (w = exp(log 4) = 4); the masked 7.0
    # is skipped, the second valid token is t = 2: w = exp((log 4 + 0) / 2) = 2; before the
    # first valid token w = 1, at the masked one the prefix's value so far (4)
    w = prefix_ratio(t([[5.0, math.log(4.0), 7.0, 0.0]]), t([[0.0, 1.0, 0.0, 1.0]]))
    assert w.tolist()[0] == pytest.approx([1.0, 4.0, 4.0, 2.0], rel=1e-12)


def test_prefix_ratio_clamps():
    # each log-ratio to [-20, 20], then the prefix mean at 10: [30, 30] -> [20, 20] -> e^10;
    # [-30] -> e^-20
    w = prefix_ratio(t([[30.0, 30.0], [-30.0, 0.0]]), t([[1.0, 1.0], [1.0, 0.0]]))
    assert w[0].tolist() == pytest.approx([math.exp(10.0)] * 2, rel=1e-12)
    assert float(w[1, 0]) == pytest.approx(math.exp(-20.0), rel=1e-12)


def hand_row():
    old = t([[-1.0, -2.0, -0.5]])
    log_probs = (old + t([[LOG2, 0.0, -LOG2]])).requires_grad_(True)
    return log_probs, old, t([[1.0, 1.0, 1.0]])


def test_prefix_loss_and_gradient_negative_advantage():
    log_probs, old, mask = hand_row()
    loss, metrics = ppo_clip_loss(log_probs, old, t([[-1.0] * 3]), mask, ratio_level="prefix")
    # A = -1, w = [2, sqrt 2, 1]: per token max(w, clip(w, 0.8, 1.2)) = w (the clip does not
    # bind below for A < 0 with w >= 1); token-mean (the default): (2 + sqrt 2 + 1) / 3
    assert float(loss.detach()) == pytest.approx((3.0 + math.sqrt(2.0)) / 3, rel=1e-12)
    assert metrics["ratio_mean"] == pytest.approx((3.0 + math.sqrt(2.0)) / 3, rel=1e-7)
    assert metrics["clip_frac"] == 0.0  # r > 1 + eps with A < 0 is not a binding clip
    loss.backward()
    # d w_t / d log pi_k = w_t / t for k <= t; each token's term weighs 1/3:
    # k=1: (2 + sqrt2/2 + 1/3) / 3, k=2: (sqrt2/2 + 1/3) / 3, k=3: (1/3) / 3
    s2 = math.sqrt(2.0) / 2
    assert log_probs.grad[0].tolist() == pytest.approx(
        [(2 + s2 + 1 / 3) / 3, (s2 + 1 / 3) / 3, 1 / 9], rel=1e-12)


def test_prefix_loss_and_gradient_positive_advantage():
    log_probs, old, mask = hand_row()
    loss, metrics = ppo_clip_loss(log_probs, old, t([[1.0] * 3]), mask, ratio_level="prefix")
    # A = +1: per token -min(w, clip(w)) = [-1.2, -1.2, -1]; tokens 1 and 2 are clipped
    assert float(loss.detach()) == pytest.approx(-3.4 / 3, rel=1e-12)
    assert metrics["clip_frac_high"] == pytest.approx(2 / 3)
    loss.backward()
    # only token 3's term has a gradient: -(w3 / 3) / 3 = -1/9 to each of its prefix's tokens
    assert log_probs.grad[0].tolist() == pytest.approx([-1 / 9] * 3, rel=1e-12)


@pytest.mark.parametrize("agg", [None, "token-mean", "seq-mean-token-mean",
                                 "seq-mean-token-sum-norm"])
def test_on_policy_prefix_loss_equals_the_token_loss(agg):
    generator = torch.Generator().manual_seed(0)
    log_probs = -torch.rand((3, 5), generator=generator, dtype=torch.float64)
    advantages = torch.randn((3, 5), generator=generator, dtype=torch.float64)
    mask = t([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]])
    token, token_metrics = ppo_clip_loss(log_probs, log_probs.clone(), advantages, mask,
                                         ratio_level="token", agg=agg)
    prefix, prefix_metrics = ppo_clip_loss(log_probs, log_probs.clone(), advantages, mask,
                                           ratio_level="prefix", agg=agg)
    assert float(prefix) == pytest.approx(float(token), rel=1e-12)
    assert prefix_metrics["ratio_mean"] == pytest.approx(1.0)
    assert float(token) != 0.0


def test_rlvr_first_step_loss_of_prefix_equals_token():
    """epochs 1, one minibatch: the policy is the sampler at the only update, so every ratio is
    1 and the first step's loss is the token level's; with 2 epochs the prefix level runs."""
    runs = {level: run_rlvr({}, steps=1, ratio_level=level, epochs=1, minibatches=1)[0]
            for level in ("token", "prefix")}
    assert runs["prefix"]["train/policy_loss"] == pytest.approx(
        runs["token"]["train/policy_loss"], rel=1e-9, abs=1e-12)
    assert runs["prefix"]["train/ratio_mean"] == pytest.approx(1.0)
    result, _ = run_rlvr({}, steps=2, ratio_level="prefix", epochs=2)
    assert math.isfinite(result["train/policy_loss"])
