"""Adaptive batch size from the gradient noise scale B_simple = tr(Sigma) / |G|^2.

Each step gives squared gradient norms at two batch sizes, |G_big|^2 at B_big and
|G_small|^2 at B_small (the task's per-sample statistics: the batch mean at B_big = b and the
mean per-sample norm at B_small = 1). Their unbiased combinations

    |G|^2 ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    S     ~ (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)          (S = tr(Sigma))

are averaged separately with an exponential moving average, m_t = beta m_{t-1} + (1 - beta) x_t
(m_0 = 0), and B_simple = m_S / m_G is the ratio of the two averages (the bias corrections
1 - beta^t cancel in it). Every ``every`` steps the next batch size becomes
clip(round(scale * B_simple), min_size, max_size or n_samples); between updates it is kept.
The first batch is ``start_size`` (0: the task's batch size).

Reference: McCandlish, Kaplan, Amodei et al., "An empirical model of large-batch training",
2018 (B_simple; its appendix: estimate |G|^2 and S from two batch sizes and average each
separately, by exponential moving averages, before taking the ratio). Defaults follow
EleutherAI gpt-neox (megatron/gradient_noise_scale/gradient_noise_scale.py): beta = 0.99, an
estimate every 10 steps (there because it sums 10 consecutive batches to form B_big; here each
step's per-sample gradients give both batch sizes, so the averages take an estimate every step
and ``every`` only spaces the batch-size changes).

Conventions, where gpt-neox says nothing or differs:
- the logged ``batch/grad_sq_est`` and ``batch/trace_cov_est`` are m / (1 - beta^t) with t the
  number of estimates so far; gpt-neox's exponent counts its calls (10 per estimate), which
  changes these two logged values but not B_simple;
- a step whose estimates or averages overflow is skipped (gpt-neox skips overflowing steps);
  B_big = B_small (a batch of one) gives no estimate;
- gpt-neox divides unguarded; here a non-positive m_G means the gradient is lost in the noise:
  B_simple = +inf (the largest batch) when m_S > 0, undefined (batch kept) otherwise. A negative
  B_simple (m_S < 0) gives the smallest batch.
- ``min_size`` is at least 2: at b = 1 the two batch sizes coincide and nothing is measured.

Fidelity: reference-checked. ``test_noise_scale_reproduces_gpt_neox_estimates`` in
tests/test_batch_size_methods.py reproduces gpt-neox's estimate/EMA sequence and B_simple number
for number from a re-derivation of its logic on a synthetic sequence of norms;
``test_noise_scale_recovers_known_noise_scale`` checks B_simple against tr(Sigma) / |G|^2 on
Gaussian per-sample gradients.
"""

from __future__ import annotations

import math

from methods.batch_size._bounds import bounds, clip_size, size_range
from workbench.families import BatchSizeMethod
from workbench.hyperparams import Float, Int
from workbench.registry import Reference, register


@register
class NoiseScale(BatchSizeMethod):
    name = "noise_scale"
    hyperparameters = {
        "start_size": Int(0, minimum=0, help="first batch size; 0: the task's batch size"),
        "every": Int(10, minimum=1, help="steps between batch-size updates"),
        "beta": Float(0.99, minimum=0.0, maximum=0.9999,
                      help="EMA factor of the |G|^2 and tr(Sigma) estimates"),
        "scale": Float(1.0, low=0.1, high=10.0, log=True, minimum=0.0,
                       help="batch size = scale * B_simple"),
        **bounds(smallest=2),
    }
    requires = frozenset({"per_sample_grads"})
    reference = Reference(
        "McCandlish, Kaplan, Amodei et al., An empirical model of large-batch training",
        2018,
        "github.com/EleutherAI/gpt-neox megatron/gradient_noise_scale/gradient_noise_scale.py",
    )
    fidelity = "reference-checked"

    def start(self, info):
        self.lowest, self.highest = size_range(self.hp.min_size, self.hp.max_size,
                                               info["n_samples"])
        first = self.hp.start_size or info.get("batch_size") or info["n_samples"]
        self.current = clip_size(first, self.lowest, self.highest)
        self.ema_grad_sq = self.ema_trace = 0.0
        self.estimates = 0
        return self.current

    def next_batch_size(self, step, stats):
        self.observe(stats["grad_sq_big"], stats["big_batch_size"],
                     stats["grad_sq_small"], stats["small_batch_size"])
        if step % self.hp.every == 0:
            proposal = self.hp.scale * self.noise_scale() if self.hp.scale else 0.0
            if not math.isnan(proposal):
                self.current = clip_size(proposal, self.lowest, self.highest)
        return self.current

    def observe(self, grad_sq_big, big, grad_sq_small, small) -> None:
        """Fold one pair of squared norms into the two moving averages."""
        if big == small or min(big, small) <= 0:
            return
        grad_sq = (big * grad_sq_big - small * grad_sq_small) / (big - small)
        trace = (grad_sq_small - grad_sq_big) / (1 / small - 1 / big)
        ema_grad_sq = self.hp.beta * self.ema_grad_sq + (1 - self.hp.beta) * grad_sq
        ema_trace = self.hp.beta * self.ema_trace + (1 - self.hp.beta) * trace
        if math.isfinite(ema_grad_sq) and math.isfinite(ema_trace):
            self.ema_grad_sq, self.ema_trace = ema_grad_sq, ema_trace
            self.estimates += 1

    def noise_scale(self) -> float:
        """B_simple = m_S / m_G (NaN before the first estimate or when undefined)."""
        if self.estimates == 0:
            return math.nan
        if self.ema_grad_sq > 0:
            return self.ema_trace / self.ema_grad_sq
        return math.inf if self.ema_trace > 0 else math.nan

    def diagnostics(self):
        correction = 1 - self.hp.beta**self.estimates if self.estimates else math.nan
        return {
            "batch/noise_scale": self.noise_scale(),
            "batch/grad_sq_est": self.ema_grad_sq / correction,
            "batch/trace_cov_est": self.ema_trace / correction,
        }
