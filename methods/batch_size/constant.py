"""Constant batch size: b_k = b for every step (``size`` 0 keeps the task's own batch size)."""

from __future__ import annotations

from workbench.families import BatchSizeMethod
from workbench.hyperparams import Int
from workbench.registry import Reference, register


@register
class ConstantBatch(BatchSizeMethod):
    name = "constant"
    hyperparameters = {
        "size": Int(0, minimum=0, help="batch size; 0: the task's batch_size"),
    }
    reference = Reference("Robbins & Monro, A stochastic approximation method", 1951)
    fidelity = "reference-checked"
    vectorised = True  # a schedule: the seeds of a trial share its sizes

    def start(self, info):
        self.current = self.hp.size or info.get("batch_size") or info["n_samples"]
        return self.current

    def next_batch_size(self, step, stats):
        return self.current
