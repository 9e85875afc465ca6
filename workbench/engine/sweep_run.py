"""A sweep run to its end: its studies set up (or reused, or superseded), one round of
workers through a launcher (``engine.launchers``: in this process, in N processes, on Ray),
then rounds of held-out seeds until the evaluation's rule is met; Ctrl-C requeues the trials it
interrupted."""

from __future__ import annotations

import sys
from collections.abc import Callable

import optuna
import torch

from workbench.engine.claims import Claims
from workbench.engine.evaluation import decide, held_out_values
from workbench.engine.launchers import InProcess, Launcher, LocalProcesses
from workbench.engine.status import StudyStatus, study_status
from workbench.engine.studies import setup
from workbench.engine.workers import resolve_device
from workbench.spec.plan import Sweep, device_kind
from workbench.store import disk_space, runs
from workbench.store.database import Store


class Interrupted(KeyboardInterrupt):
    """Ctrl-C ended the sweep: ``requeued`` interrupted trials run again when it is resumed."""

    def __init__(self, requeued: int):
        super().__init__(requeued)
        self.requeued = requeued


def _say(line: str) -> None:
    print(f"note: {line}", file=sys.stderr, flush=True)


def run_sweep(sweep: Sweep, *, workers: int = 1, device: str | None = None,
              progress: Callable[[list[StudyStatus]], None] | None = None,
              say: Callable[[str], None] = _say, ray=None) -> list[StudyStatus]:
    """Run (or continue) every study of ``sweep`` until each has its number of trials.

    ``workers`` local processes, or Ray tasks when ``ray`` (a ``ray_launcher.RayPlan``) is
    given: this process then joins (or starts) the cluster and waits for its workers. With
    several local workers on a machine with k GPUs and device ``cuda``, worker i sees GPU
    i mod k alone. ``say`` gets one line per change in the sweep's studies (``setup``): a study
    superseded because the spec or the code changed, one reused from another sweep."""
    launcher = launcher_for(device or sweep.spec.device, workers, ray)
    with launcher.opened():  # before anything is written: what it cannot run is refused
        return _run_sweep(sweep, launcher, progress, say)


def launcher_for(device: str | None, workers: int = 1, ray=None) -> Launcher:
    """The launcher of a sweep: Ray's when ``ray`` (a ``ray_launcher.RayPlan``) is given,
    else ``workers`` local processes (one: this process)."""
    if ray is not None:
        from workbench.engine.ray_launcher import RayLauncher

        return RayLauncher(ray, torch.device(ray.device(device)))
    resolved = resolve_device(device)
    return InProcess(resolved) if workers == 1 else LocalProcesses(resolved, workers)


def _run_sweep(sweep: Sweep, launcher: Launcher, progress, say) -> list[StudyStatus]:
    sweep = sweep.on_device(device_kind(launcher.device.type))
    store = Store.from_url(sweep.storage, sweep.artifact_root)
    reserve = disk_space.reserve_for(store)
    if reserve is not None:
        reserve.keep()  # a disk too full for it stops the sweep here, before any write
    try:
        return _set_up_and_run(sweep, store, launcher, progress, say)
    except Exception as err:
        if not (isinstance(err, disk_space.StoreFull) or disk_space.is_disk_full(err)):
            raise
        raise _stop_for_full_disk(sweep, store, reserve) from None


def _stop_for_full_disk(sweep: Sweep, store: Store, reserve) -> disk_space.StoreFull:
    """The store's disk filled: give the reserve back, mark the trials this sweep's workers
    ran as stopped by it (they run again on resume), and say so in one line."""
    place = disk_space.store_place(store)
    space = disk_space.space_of(place)  # before the reserve is given back
    if reserve is not None:
        reserve.release()
    try:
        stopped = Claims(sweep, store, store.optuna_storage(), store.mlflow_client()) \
            .stop_all(sweep.studies, f"disk full: {place}")
    except Exception as err:  # no space even after the reserve: the next sweep repairs it
        if not disk_space.is_disk_full(err):
            raise
        stopped = None
    return disk_space.StoreFull(disk_space.full_message(place, space, "during the sweep",
                                                        stopped))


def _set_up_and_run(sweep: Sweep, store: Store, launcher: Launcher, progress,
                    say) -> list[StudyStatus]:
    notes, superseded = setup(sweep, store)
    for line in notes:
        say(line)
    storage = store.optuna_storage()
    if superseded:  # what a kill left in a study the sweep no longer runs
        claims = Claims(sweep, store, storage, store.mlflow_client())
        existing = {s.study_name for s in optuna.get_all_study_summaries(storage, False)}
        for name in superseded:
            if name in existing:
                claims.repair(name)

    # the status reads every trial of every study: only for a progress that shows it as the
    # sweep runs (not `--quiet`), else once at the end
    live = progress is not None and getattr(progress, "live", True)

    def refresh() -> None:
        progress(study_status(sweep, store))

    if live:
        refresh()
    launcher.prepare(sweep, store)

    def work(held_out: list[int]) -> None:
        launcher.run(sweep, store, held_out, refresh if live else None, say)

    try:
        _rounds(sweep, store, storage, work, say)
    except KeyboardInterrupt:
        requeued = Claims(sweep, store, storage, store.mlflow_client()).requeue(sweep.studies)
        raise Interrupted(requeued) from None
    final = study_status(sweep, store)
    if progress:
        progress(final)
    return final


def _rounds(sweep: Sweep, store: Store, storage, work, say) -> None:
    """``work`` on the sweep's trials (and the first held-out seeds), then held-out rounds
    until the evaluation's rule is met."""
    plan = sweep.evaluation
    count = plan.first if plan else 0
    work(plan.seeds[:count] if plan else [])
    while plan is not None:  # held-out rounds until the rule is met
        values = held_out_values(sweep, storage, store.mlflow_client())
        outcome = None if values is None else decide(sweep, values, count)
        if outcome is not None:
            _record_outcome(store, sweep, outcome, say)
        if values is None or outcome is not None:
            break
        count = min(count + plan.step, len(plan.seeds))
        say(f"held-out seeds: the best two intervals overlap; {count} seeds next")
        work(plan.seeds[:count])


def _record_outcome(store: Store, sweep: Sweep, outcome, say) -> None:
    """The held-out evaluation's outcome on the sweep's experiment, for the report."""
    client = store.mlflow_client()
    experiment = client.get_experiment_by_name(sweep.name).experiment_id
    client.set_experiment_tag(experiment, runs.EVALUATION_OUTCOME, outcome.model_dump_json())
    if outcome.reason == "separated":
        say(f"held-out seeds: {outcome.best} separates from {outcome.second} at "
            f"{outcome.seeds} seeds")
    elif outcome.reason == "maximum":
        say(f"held-out seeds: {outcome.best} and {outcome.second} still overlap at the "
            f"maximum of {outcome.seeds} seeds")
    elif outcome.reason == "incomplete":
        say(f"held-out seeds: some of the first {outcome.seeds} did not finish (a method "
            "raised, or another process still runs them); run the same command again")
