"""How a sweep's workers run: one interface, three launchers.

    InProcess        one worker in this process (``--workers 1``, the default)
    LocalProcesses   N spawned processes on this machine (``--workers N``); with device cuda
                     on k GPUs, worker i sees GPU i mod k alone
    RayLauncher      Ray tasks on the nodes of a cluster (``--ray``; ``engine.ray_launcher``)

``engine.sweep_run`` runs every sweep through one of them: ``opened()`` holds what the launcher
needs for the sweep's length (a Ray connection) and refuses what it cannot run before anything
is written; ``prepare(sweep, store)`` fixes what depends on the studies (how many processes
are worth starting); ``run(...)`` runs one round of workers until they end: once for the
tuning trials, again for each round of held-out seeds. ``device`` is where workers compute.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from workbench.engine.limits import workers_to_start
from workbench.engine.status import study_status
from workbench.engine.workers import (
    Worker,
    gpu_for_worker,
    sigint_ignored,
    visible_gpus,
    worker_main,
)
from workbench.spec.plan import Sweep
from workbench.store import disk_space
from workbench.store.database import Store

Refresh = Callable[[], None] | None  # progress after a trial ends (None: nobody watches)


class Launcher(ABC):
    """Starts a sweep's workers and waits for them."""

    device: torch.device

    @contextlib.contextmanager
    def opened(self) -> Iterator[None]:
        """What the launcher holds while the sweep runs (nothing, by default)."""
        yield

    def prepare(self, sweep: Sweep, store: Store) -> None:
        """Fix what depends on the sweep's studies, once they exist (nothing, by default)."""
        return None

    @abstractmethod
    def run(self, sweep: Sweep, store: Store, held_out: list[int], refresh: Refresh,
            say: Callable[[str], None]) -> None:
        """One round of workers on the sweep's studies (and the best trials on ``held_out``
        seeds), until none is left to claim."""


@dataclass
class InProcess(Launcher):
    """One worker in this process, with every core's thread."""

    device: torch.device

    def run(self, sweep, store, held_out, refresh, say) -> None:
        torch.set_num_threads(max(1, os.cpu_count() or 1))
        Worker(sweep, store, self.device, 0, on_trial_end=refresh, held_out=held_out).run()


@dataclass
class LocalProcesses(Launcher):
    """``workers`` spawned processes (no more than the trials left), the cores shared among
    them; Ctrl-C stops each in order (SIGTERM: it marks its trial interrupted and ends)."""

    device: torch.device
    workers: int

    def prepare(self, sweep, store) -> None:
        left = sum(max(0, s.total - s.finished - s.running) for s in study_status(sweep, store))
        self.workers = workers_to_start(self.workers, left)

    def run(self, sweep, store, held_out, refresh, say) -> None:
        if self.workers == 1:
            InProcess(self.device).run(sweep, store, held_out, refresh, say)
            return
        threads = max(1, (os.cpu_count() or 1) // self.workers)
        spread = self.device.type == "cuda" and self.device.index is None
        gpus = visible_gpus() if spread else []
        context = multiprocessing.get_context("spawn")
        procs = [context.Process(target=worker_main,
                                 args=(sweep.source, sweep.storage, sweep.artifact_root,
                                       str(self.device), i, threads, gpu_for_worker(i, gpus),
                                       [plan.fingerprint for plan in sweep.studies], held_out,
                                       os.getpid()))
                 for i in range(self.workers)]
        with sigint_ignored():
            for proc in procs:
                proc.start()
        try:
            # every process asked each time: is_alive() also reaps one that has ended, and a
            # zombie would still look alive to the claim protocol's liveness check
            while any([p.is_alive() for p in procs]):
                time.sleep(1.0)
                if refresh:
                    refresh()
        except KeyboardInterrupt:  # each worker marks its trial interrupted and ends
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            raise
        finally:
            for proc in procs:
                proc.join()
        bad = [p.exitcode for p in procs if p.exitcode]
        if disk_space.EXIT_STORE_FULL in bad:
            raise disk_space.StoreFull(f"{bad.count(disk_space.EXIT_STORE_FULL)} worker(s) "
                                       "found the store's disk full")
        if bad:
            raise RuntimeError(f"{len(bad)} worker(s) exited with codes {bad}")
