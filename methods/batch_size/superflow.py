"""SuperFlow's variance-aware per-prompt group sizes ("Streaming-to-Group Sampling"), in its
within-step streaming form.

Each step's budget N = P x G completions (G: the task's group size, so N is the fixed-size
baseline's) is spent where rewards vary. Every one of the P prompts first gets n_min
completions; from their rewards, sigma_p = std of prompt p's first rewards (population std);
the rest, E = N - P n_min, goes out in proportion to sigma_p:

    n_p = clip(n_min + e_p, n_min, n_max),   e_p ~ E sigma_p / sum_q sigma_q

with e_p rounded by largest remainders (floor, then one more to the largest fractions) so that
sum_p e_p = E exactly and the step never exceeds N (plain rounding can overshoot by P / 2). A
prompt whose first rewards are all equal (sigma_p = 0) keeps n_min: its group's advantage would
be zero anyway. Completions cut off by n_max are not handed to other prompts; with all sigma_p
= 0 the step takes only P n_min.

The paper keeps a per-prompt EMA of sigma_p across steps; here that tracker is pointless (the
RLVR task draws 16 of 4,000 training prompts a step, so a prompt rarely repeats), hence the
within-step form: sigma_p from the step's own first completions.

Reference: "SuperFlow" (variance-aware group sizes and flow-consistent step advantages for
flow-matching RL), 2026, per the workbench literature catalogue-001 card #4 and section 2.4
(only the group-size part; the step-advantage part is for flow models). No reference
implementation was available.

Fidelity: reconstructed (the catalogue's [S+R] formula); ``tests/test_superflow.py`` checks
the allocation against hand-derived numbers and, through the RLVR loop, the groups it builds.
"""

from __future__ import annotations

import math
import statistics

from workbench.families import BatchSizeMethod
from workbench.hyperparams import Int
from workbench.registry import Reference, register


def allocate(first_rewards: list[list[float]], budget: int, n_min: int,
             n_max: int) -> list[int]:
    """Each prompt's total group size from its first rewards (see the module docstring)."""
    sigmas = [statistics.pstdev(r) if len(r) > 1 else 0.0 for r in first_rewards]
    firsts = [len(r) for r in first_rewards]
    extra, total = budget - sum(firsts), sum(sigmas)
    if extra <= 0 or total <= 0:
        return firsts
    shares = [extra * s / total for s in sigmas]
    whole = [math.floor(x) for x in shares]
    by_fraction = sorted(range(len(shares)), key=lambda p: (whole[p] - shares[p], p))
    for p in by_fraction[:extra - sum(whole)]:
        whole[p] += 1
    return [max(n, min(n + e, max(n_max, n))) for n, e in zip(firsts, whole, strict=True)]


@register
class SuperFlow(BatchSizeMethod):
    name = "superflow"
    hyperparameters = {
        "n_min": Int(2, minimum=2, help="completions every prompt gets first"),
        "n_max": Int(16, minimum=2, help="largest group of a prompt"),
    }
    requires = frozenset({"group_rewards"})
    reference = Reference(
        "SuperFlow: variance-aware group sizes and flow-consistent step advantages "
        "(catalogue-001 card #4)",
        2026,
    )
    fidelity = "reconstructed"

    def start(self, info):
        self.current = info.get("batch_size") or info["n_samples"]
        return self.current

    def next_batch_size(self, step, stats):
        return self.current

    def first_group_size(self, group_size):
        return min(self.hp.n_min, group_size)

    def group_sizes(self, first_rewards, budget):
        return allocate(first_rewards, budget, self.hp.n_min, self.hp.n_max)
