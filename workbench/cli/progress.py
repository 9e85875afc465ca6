"""The sweep's progress bar: trials done of total, best so far, elapsed and remaining time."""

from __future__ import annotations

import sys

from tqdm import tqdm


class SweepProgress:
    """Called with the studies' status after every trial (or every second with workers) while
    the bar shows it; with ``quiet`` only once, at the end (``live`` is False: the engine then
    reads no status in between)."""

    def __init__(self, sweep, quiet: bool = False):
        self.sweep = sweep
        total = sum(plan.n_trials for plan in sweep.studies)
        self.bar = None if quiet else tqdm(total=total, unit="trial", file=sys.stderr,
                                           desc=sweep.name, dynamic_ncols=True)

    @property
    def live(self) -> bool:
        """Whether it shows the status as the sweep runs (else only the final one matters)."""
        return self.bar is not None

    def __call__(self, statuses) -> None:
        if self.bar is None:
            return
        done = sum(min(s.finished, s.total) for s in statuses)
        scored = [s for s in statuses if s.best_value is not None]
        postfix = {}
        if scored:
            pick = min if self.sweep.direction == "minimize" else max
            best = pick(scored, key=lambda s: s.best_value)
            postfix["best"] = f"{best.label}={best.best_value:.4g}"
        failed = sum(s.failed for s in statuses)
        if failed:
            postfix["failed"] = failed
        self.bar.n = done
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
