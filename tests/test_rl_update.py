"""``families.policy_step``: the one RL minibatch update every RL loop calls (closure,
backward, gradient norm and clipping, the optimizer's step, ``observe``), sequential and on a
seed axis."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.families import clip_gradients, clip_per_seed, policy_step, policy_step_seeds


class LineSearch(torch.optim.SGD):
    """SGD that first evaluates the loss without gradients and then twice with them (as a
    backtracking search does), records what ``observe`` gets, and reports a step size."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, lr=lr)
        self.observed: list[dict] = []
        self.last_step_size = lr
        self.losses: list[torch.Tensor] = []

    def step(self, closure=None):
        params = self.param_groups[0]["params"]
        before = [None if p.grad is None else p.grad.clone() for p in params]
        self.losses.append(closure(backward=False))
        after = [None if p.grad is None else p.grad.clone() for p in params]
        assert all((a is None and b is None) or torch.equal(a, b)
                   for a, b in zip(before, after, strict=True))  # no gradient touched
        closure()
        super().step()  # moves the parameters: the next evaluation is elsewhere
        return closure()

    def observe(self, stats):
        self.observed.append(stats)


def _loss(w, calls):
    def loss():
        calls.append(torch.is_grad_enabled())
        value = 0.5 * (w ** 2).sum() * 100.0
        return value, {"train/policy_loss": float(value.detach()),
                       "train/approx_kl": float(w.detach().abs().sum())}
    return loss


@pytest.mark.parametrize("max_norm", [None, 1.0])
def test_the_step_reports_its_first_evaluation_and_clips_as_clip_grad_norm(max_norm):
    w = torch.nn.Parameter(torch.tensor([3.0, -4.0], dtype=torch.float64))
    optimizer = LineSearch([w])
    calls: list[bool] = []
    stats = policy_step(optimizer, _loss(w, calls), params=[w], max_grad_norm=max_norm,
                        update=7, episodic_return=0.25)
    assert calls == [False, True, True]  # backward=False evaluates without gradients
    # the first gradient evaluation, at the start w0 = (3, -4): L = 1250, |grad| = 500
    assert stats["train/policy_loss"] == 1250.0
    assert stats["train/approx_kl"] == 7.0
    assert stats["train/grad_norm"] == pytest.approx(500.0)
    assert stats["method/step_size"] == 0.1
    assert list(stats) == ["train/policy_loss", "train/approx_kl", "train/grad_norm",
                           "method/step_size"]
    assert optimizer.observed == [{"approx_kl": 7.0, "episodic_return": 0.25, "update": 7}]
    w0 = torch.tensor([3.0, -4.0], dtype=torch.float64)
    grad = 100.0 * w0 * (1.0 if max_norm is None else min(1.0, max_norm / (500.0 + 1e-6)))
    assert torch.allclose(w.detach(), w0 - 0.1 * grad, rtol=1e-12)


def test_after_step_metrics_come_before_the_step_size_and_are_observed():
    w = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    optimizer = LineSearch([w])

    def loss():
        return (w ** 2).sum(), {"train/policy_loss": 1.0}

    def after(stats):
        stats["train/approx_kl"] = 0.5

    stats = policy_step(optimizer, loss, params=[w], max_grad_norm=None, update=0,
                        episodic_return=math.nan, after_step=after)
    assert list(stats) == ["train/policy_loss", "train/grad_norm", "train/approx_kl",
                           "method/step_size"]
    assert optimizer.observed[0]["approx_kl"] == 0.5


def test_clip_gradients_is_clip_grad_norm():
    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(3, 4)), torch.nn.Parameter(torch.randn(5))]
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    for p, q in zip(a, b, strict=True):
        p.grad = torch.randn_like(p) * 10
        q.grad = p.grad.clone()
    expected = torch.nn.utils.clip_grad_norm_(a, 0.5)
    assert torch.equal(clip_gradients(b, 0.5), expected)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(a, b, strict=True))


def test_on_a_seed_axis_each_seed_is_clipped_and_observed_alone():
    torch.manual_seed(1)
    seeds = 3
    w = torch.nn.Parameter(torch.randn(seeds, 4, dtype=torch.float64))
    optimizer = LineSearch([w])
    scale = torch.tensor([1.0, 10.0, 0.01], dtype=torch.float64)

    def loss(active):
        value = 0.5 * scale * (w ** 2).sum(1)
        return value, [{"train/policy_loss": float(v)} | ({"train/approx_kl": 0.1} if s else {})
                       for s, v in enumerate(value.detach())]

    start = w.detach().clone()
    stats = policy_step_seeds(optimizer, loss, params=[w], max_grad_norm=1.0, seeds=seeds,
                              update=3, episodic_returns=[1.0, 2.0, 3.0])
    norms = (scale[:, None] * start).norm(dim=1)
    for s in range(seeds):
        assert stats[s]["train/grad_norm"] == pytest.approx(float(norms[s]), rel=1e-12)
        assert stats[s]["method/step_size"] == 0.1
        # each seed's own clipping: its gradient scaled by min(1, 1 / (g_s + 1e-6))
        grad = scale[s] * start[s] * min(1.0, 1.0 / (float(norms[s]) + 1e-6))
        assert torch.allclose(w.detach()[s], start[s] - 0.1 * grad, rtol=1e-12)
    observed = optimizer.observed[0]
    assert math.isnan(observed["approx_kl"][0])  # a seed without a KL is observed as NaN
    assert observed["approx_kl"][1:].tolist() == [0.1, 0.1]
    assert observed["episodic_return"].tolist() == [1.0, 2.0, 3.0]
    ref = [torch.nn.Parameter(w.detach()[s].clone()) for s in range(seeds)]
    for s, p in enumerate(ref):
        p.grad = torch.full_like(p, float(s + 1))
    stacked = torch.nn.Parameter(torch.stack([p.detach() for p in ref]))
    stacked.grad = torch.stack([p.grad for p in ref])
    assert torch.allclose(clip_per_seed([stacked], 0.5),
                          torch.stack([clip_gradients([p], 0.5) for p in ref]), rtol=1e-12)
    assert torch.allclose(stacked.grad, torch.stack([p.grad for p in ref]), rtol=1e-12)
