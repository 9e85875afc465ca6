"""Linear batch-size ramp-up, the rule of Megatron-LM's ``--rampup-batch-size START INCREMENT
SAMPLES``.

The batch grows from ``start_size`` to the target B (the task's batch size; n_samples when the
task has none) by ``increment`` at a time. With n = ceil((B - start_size) / increment)
increments spread evenly over a span R (``ramp_samples`` consumed samples with
``trigger="samples"``, the reference's rule; ``ramp_steps`` optimizer steps with
``trigger="steps"``), the batch size after c consumed samples (or steps) is

    b(c) = B                                                         if c > R
    b(c) = min(B, start_size + floor(c / (R / n)) * increment)       otherwise

evaluated before each step on what has been consumed so far, so the first batch is
b(0) = start_size; then clipped to [min_size, max_size or n_samples].

Reference: NVIDIA Megatron-LM, ``RampupBatchsizeNumMicroBatchesCalculator`` in
megatron/core/num_microbatches_calculator.py (until commit 532ad926, April 2026, which replaced
it with ``--step-batch-size-schedule``); the ramp-up of Brown et al. 2020 (GPT-3). Megatron
requires ``increment`` to divide B - start_size; here the last increment stops at B instead
(the same schedule whenever it divides). A ``start_size`` at or above B, or R = 0, gives B from
the first step, where Megatron fails.

Fidelity: reference-checked. ``test_linear_ramp_reproduces_megatron_schedule`` in
tests/test_batch_size_methods.py reproduces the reference's schedule number for number (its own
unit test's consumed-sample sequence and a longer one from a re-derivation of its rule); the
step trigger is the same rule counted in steps.
"""

from __future__ import annotations

import math

from methods.batch_size._bounds import bounds, clip_size, size_range
from workbench.families import BatchSizeMethod
from workbench.hyperparams import Choice, Int
from workbench.registry import Reference, register


@register
class LinearRamp(BatchSizeMethod):
    name = "linear_ramp"
    hyperparameters = {
        "start_size": Int(8, low=1, high=64, log=True, minimum=1, help="first batch size"),
        "increment": Int(8, minimum=1, help="batch-size increment"),
        "trigger": Choice("samples", ("samples", "steps"), help="ramp over samples or steps"),
        "ramp_samples": Int(4096, low=256, high=65536, log=True, minimum=0,
                            help="samples over which the batch reaches its target"),
        "ramp_steps": Int(100, minimum=0, help="steps over which the batch reaches its target"),
        **bounds(),
    }
    reference = Reference(
        "Brown et al., Language models are few-shot learners (batch-size ramp-up)",
        2020,
        "github.com/NVIDIA/Megatron-LM megatron/core/num_microbatches_calculator.py "
        "(RampupBatchsizeNumMicroBatchesCalculator)",
    )
    fidelity = "reference-checked"
    vectorised = True  # a schedule: the seeds of a trial share its sizes

    def start(self, info):
        self.target = info.get("batch_size") or info["n_samples"]
        self.lowest, self.highest = size_range(self.hp.min_size, self.hp.max_size,
                                               info["n_samples"])
        self.span = self.hp.ramp_samples if self.hp.trigger == "samples" else self.hp.ramp_steps
        return self.size_after(0)

    def next_batch_size(self, step, stats):
        return self.size_after(stats["samples"] if self.hp.trigger == "samples" else step)

    def size_after(self, consumed: float) -> int:
        """b(consumed), clipped to the bounds."""
        if self.hp.start_size >= self.target or self.span == 0 or consumed > self.span:
            return clip_size(self.target, self.lowest, self.highest)
        increments = math.ceil((self.target - self.hp.start_size) / self.hp.increment)
        per_increment = self.span / increments
        size = self.hp.start_size + int(consumed / per_increment) * self.hp.increment
        return clip_size(min(size, self.target), self.lowest, self.highest)
