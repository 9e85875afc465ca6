"""Stage-wise batch growth during the stable phase of a warmup-stable-decay (WSD) run: the batch
starts small and is multiplied by ``factor`` at each stage as training progresses, and is held
fixed through the final decay phase.

With target B (the task's batch size; n_samples when it has none), b_0 = ``start_size`` and
K = ceil(log(B / b_0) / log(factor)) stages (the one that reaches B is the last), the batch
of stage k is

    b_k = min(B, round(b_0 * factor^k)),   then clipped to [min_size, max_size or n_samples].

The stage k only grows, and never in the decay phase, i.e. once the progress
p = samples / (total_steps * B) (the share of the run's planned samples consumed; 0 where the
task gives no ``total_steps``) reaches 1 - ``decay_fraction``. It grows on:
  - ``trigger="loss"`` (default): the smoothed training loss L~ crossing thresholds below the
    first loss L_1: k = max(k, floor(log(L~ / L_1) / log(loss_ratio))), i.e. stage k from
    L~ <= L_1 * loss_ratio^k. L~ is the bias-corrected EMA of the step losses,
    e_n = smoothing e_{n-1} + (1 - smoothing) L_n, L~ = e_n / (1 - smoothing^n). A first loss
    that is not a positive finite number leaves the batch at b_0 (until progress, see below).
  - ``trigger="progress"``: k = floor((K + 1) p / (1 - decay_fraction)), i.e. the stable phase
    cut into K + 1 equal shares of samples, one per batch size.

Reference: Zhou, Huang, Xing, Zhang, Peng, Guo & Qiu, "How to Set the Batch Size for Large-Scale
Pre-training?", 2026 (arXiv 2601.05034). The paper shows that under a WSD learning-rate schedule
the optimal batch size B_opt (fewest tokens to a target loss) and the minimum batch size B_min
both grow as the target loss falls, and proposes a dynamic batch-size scheduler that enlarges
the batch as training proceeds in the stable phase. Its exact switching rule and constants were
not available here, so the rule above is reconstructed from those statements: a batch that
steps up as the loss (the loss trigger) or the consumed data (the progress trigger) passes
stage boundaries, by a doubling factor as in the batch ramps it builds on, none during the
decay. ``loss_ratio``, ``smoothing``, ``start_size`` and ``decay_fraction`` (0.1, the decay
share of MiniCPM's WSD) are this workbench's defaults, not the paper's.

The learning rate is the step-size method's business: pair it with ``schedule`` (shape ``wsd``,
the same ``decay_fraction``) for the setting the paper studies. The WSD schedule counts steps
planned at the task's batch size; a growing batch makes fewer steps for the same samples, so
the schedule's decay then starts later in samples than this method's (the ``progress`` it reads
is in samples).

The loss trigger reads each seed's own loss, so the method is not a schedule the seeds of a
trial share (``vectorised = False``).

Fidelity: reconstructed (no reference implementation is checked); tests/test_wsd_batch.py checks
the rule above by hand and in the loop.
"""

from __future__ import annotations

import math

from methods.batch_size._bounds import bounds, clip_size, size_range
from workbench.families import BatchSizeMethod
from workbench.hyperparams import Choice, Float, Int
from workbench.registry import Reference, register


@register
class WSDBatch(BatchSizeMethod):
    name = "wsd_batch"
    hyperparameters = {
        "start_size": Int(8, minimum=1, help="first batch size b_0"),
        "factor": Float(2.0, low=1.25, high=4.0, log=True, minimum=1.0, maximum=1e3,
                        help="growth factor at each stage"),
        "trigger": Choice("loss", ("loss", "progress"),
                          help="stages from loss thresholds or from shares of the stable phase"),
        "loss_ratio": Float(0.5, low=0.2, high=0.9, minimum=1e-6, maximum=0.999999,
                            help="loss: stage k from loss <= first loss * loss_ratio^k"),
        "smoothing": Float(0.9, minimum=0.0, maximum=0.9999,
                           help="loss: EMA factor of the step losses"),
        "decay_fraction": Float(0.1, minimum=0.0, maximum=1.0,
                                help="final share of the planned samples with the batch held"),
        **bounds(),
    }
    reference = Reference(
        "Zhou, Huang, Xing, Zhang, Peng, Guo & Qiu, How to set the batch size for large-scale "
        "pre-training?", 2026, "arXiv 2601.05034",
    )
    fidelity = "reconstructed"
    vectorised = False  # the loss trigger reads each seed's own loss

    def start(self, info):
        self.target = info.get("batch_size") or info["n_samples"]
        self.lowest, self.highest = size_range(self.hp.min_size, self.hp.max_size,
                                               info["n_samples"])
        total_steps = info.get("total_steps")
        self.planned = total_steps * self.target if total_steps else None
        self.stages = 0
        if self.hp.start_size < self.target and self.hp.factor > 1.0:
            self.stages = math.ceil(math.log(self.target / self.hp.start_size)
                                    / math.log(self.hp.factor))
        self.stage, self.first_loss, self.ema, self.losses = 0, math.nan, 0.0, 0
        return self.size()

    def size(self) -> int:
        """b_k of the current stage, clipped to the bounds."""
        size = min(self.hp.start_size * self.hp.factor**self.stage, self.target)
        return clip_size(round(size), self.lowest, self.highest)

    def progress(self, samples: float) -> float:
        return samples / self.planned if self.planned else 0.0

    def next_batch_size(self, step, stats):
        loss = float(stats["loss"])
        if self.losses == 0:
            self.first_loss = loss
        self.losses += 1
        s = self.hp.smoothing
        self.ema = s * self.ema + (1.0 - s) * loss
        stable_end = 1.0 - self.hp.decay_fraction
        p = self.progress(stats["samples"])
        if p < stable_end:
            self.stage = max(self.stage, min(self.wanted_stage(p / stable_end), self.stages))
        return self.size()

    def wanted_stage(self, share: float) -> int:
        """The stage the trigger asks for, ``share`` of the stable phase consumed."""
        if self.hp.trigger == "progress":
            return math.floor((self.stages + 1) * share)
        smoothed = self.ema / (1.0 - self.hp.smoothing**self.losses)
        if not (math.isfinite(self.first_loss) and self.first_loss > 0
                and math.isfinite(smoothed)):
            return 0
        if smoothed <= 0:
            return self.stages
        # stage k from smoothed <= first * ratio^k; the tolerance keeps exact powers on their
        # stage against rounding in the logs
        k = math.log(smoothed / self.first_loss) / math.log(self.hp.loss_ratio)
        return max(0, math.floor(k + 1e-9))
