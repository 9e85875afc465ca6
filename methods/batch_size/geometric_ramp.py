"""Geometric batch-size growth: multiply the batch by ``factor`` at regular intervals, capped.

With target B (the task's batch size; n_samples when the task has none) and interval E
(``every_samples`` consumed samples with ``trigger="samples"``, ``every_steps`` optimizer steps
with ``trigger="steps"``), the batch size after c consumed samples (or steps) is

    b(c) = min(B, round(start_size * factor ** floor(c / E)))

evaluated before each step on what has been consumed so far (b(0) = start_size), then clipped
to [min_size, max_size or n_samples]. ``round`` is Python's (halves to even). A ``start_size``
at or above B gives B throughout.

Reference: Smith, Kindermans, Ying & Le, "Don't decay the learning rate, increase the batch
size", ICLR 2018 (the batch grows by a factor where a step schedule would decay the learning
rate; they use factors of 2 to 5 at epoch milestones). ``factor`` and the interval are not the
paper's, whose milestones are specific to its ImageNet and CIFAR schedules.

Fidelity: reconstructed from the paper's text (no reference implementation is checked);
``test_geometric_ramp_*`` in tests/test_batch_size_methods.py check the formula above.
"""

from __future__ import annotations

import math

from methods.batch_size._bounds import bounds, clip_size, size_range
from workbench.families import BatchSizeMethod
from workbench.hyperparams import Choice, Float, Int
from workbench.registry import Reference, register


@register
class GeometricRamp(BatchSizeMethod):
    name = "geometric_ramp"
    hyperparameters = {
        "start_size": Int(8, minimum=1, help="first batch size"),
        "factor": Float(2.0, low=1.25, high=5.0, log=True, minimum=1.0, maximum=1e3,
                        help="growth factor at each interval"),
        "trigger": Choice("samples", ("samples", "steps"), help="intervals in samples or steps"),
        "every_samples": Int(2048, low=128, high=32768, log=True, minimum=1,
                             help="samples between growths"),
        "every_steps": Int(25, minimum=1, help="steps between growths"),
        **bounds(),
    }
    reference = Reference(
        "Smith, Kindermans, Ying & Le, Don't decay the learning rate, increase the batch size",
        2018,
    )
    fidelity = "reconstructed"
    vectorised = True  # a schedule: the seeds of a trial share its sizes

    def start(self, info):
        self.target = info.get("batch_size") or info["n_samples"]
        self.lowest, self.highest = size_range(self.hp.min_size, self.hp.max_size,
                                               info["n_samples"])
        by_samples = self.hp.trigger == "samples"
        self.interval = self.hp.every_samples if by_samples else self.hp.every_steps
        return self.size_after(0)

    def next_batch_size(self, step, stats):
        return self.size_after(stats["samples"] if self.hp.trigger == "samples" else step)

    def size_after(self, consumed: float) -> int:
        """b(consumed), clipped to the bounds."""
        if self.hp.start_size >= self.target or self.hp.factor == 1.0:
            return clip_size(min(self.hp.start_size, self.target), self.lowest, self.highest)
        # growths beyond those that reach B change nothing and could overflow factor ** growths
        enough = math.ceil(math.log(self.target / self.hp.start_size) / math.log(self.hp.factor))
        growths = min(max(math.floor(consumed / self.interval), 0), enough)
        size = round(self.hp.start_size * self.hp.factor**growths)
        return clip_size(min(size, self.target), self.lowest, self.highest)
