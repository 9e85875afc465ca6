"""How many workers a sweep may ask for and how many it starts (no heavy imports: the
command line checks ``--workers`` before anything is written).

A sweep may ask for at most as many workers as it has trials, and without Ray at most
``WORKERS_PER_CPU`` per CPU of this machine (more only wait for a core while each holds a
process's memory); it starts no more than the trials left to run."""

from __future__ import annotations

import os

from workbench.common.validation import SpecError

WORKERS_PER_CPU = 4


def check_workers(sweep, workers: int, on_ray: bool) -> None:
    """SpecError (exit 2) for a ``--workers`` count beyond what the sweep can run."""
    trials = sum(plan.n_trials for plan in sweep.studies)
    cpus = os.cpu_count() or 1
    limit, why = trials, f"the sweep has {trials} trial(s)"
    if not on_ray and WORKERS_PER_CPU * cpus < limit:
        limit = WORKERS_PER_CPU * cpus
        why = (f"this machine has {cpus} CPU(s), at most {WORKERS_PER_CPU} workers each "
               "without --ray; --ray for more")
    if workers < 1 or workers > limit:
        raise SpecError("--workers", str(workers), f"{why}; allowed: 1 to {limit}")


def workers_to_start(asked: int, trials_left: int) -> int:
    """The workers to start: ``asked``, but no more than the trials left (at least one, for
    the held-out evaluation)."""
    return max(1, min(asked, trials_left))
