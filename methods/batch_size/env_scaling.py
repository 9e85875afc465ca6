"""PPO environment scaling with the minibatch size held fixed (variant (b) of the co-scaling).

Samples per update b = ``size`` (0: the task's batch size b_0), as ``constant``; a control task
with ``batch_axis: num_envs`` turns b into N = b / T environments. What differs is how PPO's
epochs cut the batch. With the task's own count M_0 of minibatches (``ppo.minibatches``):

    keep="minibatch_size":   M = max(1, round(M_0 * b / b_0))      (minibatch b_0 / M_0 kept)
                             M = max(1, b // minibatch_size)       when ``minibatch_size`` > 0
    keep="minibatch_count":  M = M_0                               (minibatch b / M_0 grows)

so with keep="minibatch_size" scaling N by k makes k times as many optimizer steps per update
of the same size, and the total optimizer steps over a sample budget stay those of b_0;
keep="minibatch_count" is variant (a), the loop's default (``constant`` does the same).

Reference: Beukman, Khetarpal, Zheng, Dabney, Foerster, Dennis & Lyle, "Preventing Learning
Stagnation in PPO by Scaling to 1 Million Parallel Environments", 2026, arXiv 2603.06009
(abstract: scaling the number of
parallel environments with a co-scaling recipe; the recipe keeps the inner-loop minibatch size
and the learning rate fixed while the number of environments grows, per the summary in the
workbench literature catalogue-000, batch-size family paragraph 5, which asks for both
variants). No reference implementation was available.

Fidelity: reconstructed (the co-scaling recipe as catalogue-000 section 2.2 paragraph 5 states
it); ``tests/test_env_scaling.py`` checks the minibatch counts above and, through the control
loop, the minibatch sizes an update takes.
"""

from __future__ import annotations

from workbench.families import BatchSizeMethod
from workbench.hyperparams import Choice, Int
from workbench.registry import Reference, register


@register
class EnvScaling(BatchSizeMethod):
    name = "env_scaling"
    hyperparameters = {
        "size": Int(0, minimum=0, help="samples per update; 0: the task's batch size"),
        "keep": Choice("minibatch_size", ("minibatch_size", "minibatch_count"),
                       help="what stays fixed as the batch grows: the minibatch size (more "
                            "minibatches) or their number (larger minibatches)"),
        "minibatch_size": Int(0, minimum=0,
                              help="samples per minibatch with keep=minibatch_size; 0: the "
                                   "task's, b_0 / ppo.minibatches"),
    }
    reference = Reference(
        "Beukman, Khetarpal, Zheng, Dabney, Foerster, Dennis & Lyle, Preventing Learning "
        "Stagnation in PPO by Scaling to 1 Million Parallel Environments (arXiv 2603.06009)",
        2026,
    )
    fidelity = "reconstructed"
    vectorised = True  # a schedule: the seeds of a trial share its sizes

    def start(self, info):
        self.base = info.get("batch_size") or info["n_samples"]
        self.current = self.hp.size or self.base
        return self.current

    def next_batch_size(self, step, stats):
        return self.current

    def minibatches(self, batch_size, configured):
        if self.hp.keep == "minibatch_count":
            return configured
        if self.hp.minibatch_size:
            return max(1, batch_size // self.hp.minibatch_size)
        return max(1, round(configured * batch_size / self.base))
