"""Batch-and-sequence ramp: the batch size and the sequence length (on the RLVR testbed, the
rollouts' response cap ``max_new_tokens``) both grow in stages at fixed fractions of the budget.

With target batch B (the task's batch size; n_samples when it has none), the configured
sequence length S (the loop's cap, the ceiling; ``sequence_length``'s ``configured``), K =
``stages`` and the stage starts f_1 < ... < f_K (fractions of N = ``total_samples``, or of the
run's sample budget n_samples when it is 0), the stage after c consumed samples is

    k(c) = #{j : c >= f_j N}         (k = 0 before f_1 N, K from f_K N on)

evaluated before each step on what has been consumed so far. The starts are evenly spaced
from ``first_start`` to ``last_start``: f_j = first + (j - 1) (last - first) / (K - 1)
(f_1 = the nonzero one when K = 1; the two are taken in order, so a ``last_start`` below
``first_start`` swaps them rather than failing a tuned trial); both 0 (the defaults) cut the
budget into K + 1 equal shares, f_j = j / (K + 1). The sizes of stage k (``sizing``):

- ``doubling`` (default): both double at each start,
      b_k = min(B, round(b_0 2^k)),   S_k = min(S, round(S_0 2^k)),
  with b_0 = ``start_size`` (0: B / 2^K, so the last stage is B) and S_0 = ``start_length``
  (0: S / 2^K);
- ``t23``: the product follows the T^(2/3) rule of the budget consumed by the stage's end,
  b_k S_k = B S (f_{k+1})^(2/3) with f_{K+1} = 1 (``batch_times_sequence``: the rule's
  optimum for a run that stopped there, normalised so the last stage is B x S), split evenly:
      b_k = round(B f_{k+1}^(1/3)),   S_k = round(S f_{k+1}^(1/3))
  (``start_size`` and ``start_length`` unused).

Then b_k is clipped to [min_size, max_size or n_samples] and S_k to [1, S]. With no sample
budget (n_samples unlimited) and ``total_samples`` 0 the run stays at stage 0: set
``total_samples`` to the steps budget times B for a run budgeted in steps.

Reference: Islamov, Machacek, Lucchi, Silveti-Falls, Gorbunov, Cevher, "Batch size in stochastic
conditional-gradient methods", 2026 (catalogue-000 card, section 6). Its abstract proposes an
adaptive strategy that increases the batch size and the sequence length during training; the
card's summary gives the derived rule batch x sequence ~ T^(2/3) for a token budget T. The
stage-wise doubling, its fractions, the reading of T as the budget consumed by a stage's end
and the even split of the product between batch and sequence are reconstructed (the paper's
own schedule and constants were not available here); the budget is counted in samples, not
tokens, as the loops count it.

Diagnostics: ``method/stage``, the stage k of the next step.

The schedule reads only the consumed samples, so the seeds of a trial share it
(``vectorised = True``).

Fidelity: reconstructed (no reference implementation is checked); tests/test_seq_ramp.py checks
the schedules by hand and that the RLVR loop caps its rollouts at ``sequence_length``.
"""

from __future__ import annotations

import math

from methods.batch_size._bounds import bounds, clip_size, size_range
from workbench.families import BatchSizeMethod
from workbench.hyperparams import Choice, Float, Int
from workbench.registry import Reference, register


def batch_times_sequence(tokens: float, constant: float = 1.0) -> float:
    """The T^(2/3) sizing rule: batch x sequence length = ``constant`` * ``tokens``^(2/3) for a
    token budget of ``tokens`` (the constant is the setting's own; the rule fixes only the
    exponent)."""
    return constant * float(tokens) ** (2.0 / 3.0)


@register
class SeqRamp(BatchSizeMethod):
    name = "seq_ramp"
    hyperparameters = {
        "stages": Int(2, low=1, high=4, minimum=1, maximum=16,
                      help="K: the number of growths (doublings)"),
        "first_start": Float(0.0, minimum=0.0, maximum=1.0,
                             help="f_1, the budget fraction of the first growth; 0 with "
                                  "last_start 0: 1 / (K + 1)"),
        "last_start": Float(0.0, minimum=0.0, maximum=1.0,
                            help="f_K, the budget fraction of the last growth; 0 with "
                                 "first_start 0: K / (K + 1)"),
        "sizing": Choice("doubling", ("doubling", "t23"),
                         help="doubling: both double at each start; t23: batch x sequence "
                              "~ (budget consumed by the stage's end)^(2/3)"),
        "start_size": Int(0, minimum=0, help="doubling: first batch size; 0: B / 2^K"),
        "start_length": Int(0, minimum=0,
                            help="doubling: first sequence length; 0: the configured / 2^K"),
        "total_samples": Int(0, minimum=0,
                             help="N, the samples the fractions are of; 0: the run's sample "
                                  "budget (n_samples)"),
        **bounds(),
    }
    reference = Reference(
        "Islamov, Machacek, Lucchi, Silveti-Falls, Gorbunov & Cevher, Batch size in stochastic "
        "conditional-gradient methods (batch-and-sequence ramp, T^(2/3) rule)", 2026,
    )
    fidelity = "reconstructed"
    vectorised = True  # a schedule of the consumed samples: the seeds of a trial share it

    def starts(self) -> list[float]:
        """f_1 .. f_K."""
        k, first, last = self.hp.stages, self.hp.first_start, self.hp.last_start
        if first == 0.0 and last == 0.0:
            return [j / (k + 1) for j in range(1, k + 1)]
        if k == 1:
            return [first or last]
        first, last = sorted((first, last))
        return [first + j * (last - first) / (k - 1) for j in range(k)]

    def start(self, info):
        self.target = info.get("batch_size") or info["n_samples"]
        self.lowest, self.highest = size_range(self.hp.min_size, self.hp.max_size,
                                               info["n_samples"])
        self.total = self.hp.total_samples or info["n_samples"]
        self.fractions = self.starts()
        # the growths' sample counts, ceil(f_j N) (the 1e-9 absorbs float error in f_j N)
        self.thresholds = [math.ceil(f * self.total - 1e-9) for f in self.fractions]
        self.stage = 0
        return self.size()

    def next_batch_size(self, step, stats):
        consumed = float(stats["samples"])
        self.stage = sum(consumed >= threshold for threshold in self.thresholds)
        return self.size()

    def scale(self) -> float:
        """t23: f_{k+1}^(1/3) of the current stage, from the sizing rule."""
        end = ([*self.fractions, 1.0])[self.stage]
        return (batch_times_sequence(end) / batch_times_sequence(1.0)) ** 0.5

    def size(self) -> int:
        """b_k of the current stage, clipped to the bounds."""
        if self.hp.sizing == "t23":
            size = self.target * self.scale()
        else:
            first = self.hp.start_size or self.target / 2**self.hp.stages
            size = min(self.target, first * 2**self.stage)
        return clip_size(size, self.lowest, self.highest)

    def sequence_length(self, step, configured):
        if self.hp.sizing == "t23":
            length = configured * self.scale()
        else:
            first = self.hp.start_length or configured / 2**self.hp.stages
            length = min(configured, first * 2**self.stage)
        return clip_size(length, 1, configured)

    def diagnostics(self):
        return {"method/stage": float(self.stage)}
