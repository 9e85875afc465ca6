"""Workers: a ``Worker`` claims and runs trials until none is left; ``run_sweep`` runs one in
this process or several in spawned processes, and reports progress while they run."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
import torch

from workbench.engine.claims import Claims
from workbench.engine.status import StudyStatus, study_status
from workbench.engine.studies import make_pruner, setup
from workbench.engine.trial import TrialRunner
from workbench.sink import MetricSink
from workbench.spec import SpecError, Sweep, load
from workbench.store import Store


def resolve_device(name: str | None) -> torch.device:
    """``auto`` (or None): CUDA when available, else the CPU."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if name != "cpu" and match is None:
        raise SpecError("--device", "", f"unknown device {name!r}; allowed: auto, cpu, cuda, "
                        "cuda:N")
    if match is not None:
        if not torch.cuda.is_available():
            raise SpecError("--device", "", f"{name} was asked for but "
                            "torch.cuda.is_available() is false; allowed here: auto, cpu")
        index = int(match.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise SpecError("--device", "", f"{name}: this machine has "
                            f"{torch.cuda.device_count()} CUDA device(s)")
    return torch.device(name)


@dataclass
class Worker:
    """Claims and runs trials of every study of a sweep until none is left to claim.

    Worker ``index`` starts at study ``index`` (modulo their number), so parallel workers
    spread over the studies first."""

    sweep: Sweep
    store: Store
    device: torch.device
    index: int = 0
    on_trial_end: Callable[[], None] | None = None
    warned: set = field(default_factory=set)

    def run(self) -> None:
        storage = self.store.optuna_storage()
        client = self.store.mlflow_client()
        claims = Claims(self.sweep, self.store, storage, client)
        plans = self.sweep.studies
        start = self.index % len(plans)
        with MetricSink(self.store.mlflow_url) as sink:
            runner = TrialRunner(self.sweep, client, storage, sink, self.device, self.warned)
            for plan in plans[start:] + plans[:start]:
                study = optuna.load_study(study_name=plan.name, storage=storage,
                                          pruner=make_pruner(self.sweep))
                while (trial := claims.claim(study, plan)) is not None:
                    runner.run(study, plan, trial)
                    if self.on_trial_end:
                        self.on_trial_end()
                claims.close_study_run(study, plan)


def terminate_gracefully() -> None:
    """Turn SIGTERM into SystemExit, so runs are flushed and marked before the process ends."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def quiet_libraries() -> None:
    """Optuna's per-trial INFO lines off: set by the entry points (the CLI, a worker process),
    never at import, so a program that imports the engine keeps its own logging settings."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _worker_main(source: str, storage: str, device: str, index: int, threads: int) -> None:
    """The entry point of a spawned worker process."""
    quiet_libraries()
    terminate_gracefully()
    torch.set_num_threads(threads)
    sweep = load(source, storage=storage)
    Worker(sweep, Store.from_url(sweep.storage), torch.device(device), index).run()


def run_sweep(sweep: Sweep, *, workers: int = 1, device: str | None = None,
              progress: Callable[[list[StudyStatus]], None] | None = None) -> list[StudyStatus]:
    """Run (or continue) every study of ``sweep`` until each has its number of trials."""
    resolved = resolve_device(device or sweep.spec.device)
    store = Store.from_url(sweep.storage)
    setup(sweep, store)
    storage = store.optuna_storage()

    def refresh() -> None:
        if progress:
            progress(study_status(sweep, storage))

    refresh()
    threads = max(1, (os.cpu_count() or 1) // workers)
    if workers == 1:
        torch.set_num_threads(threads)
        Worker(sweep, store, resolved, 0, on_trial_end=refresh).run()
    else:
        context = multiprocessing.get_context("spawn")
        procs = [context.Process(target=_worker_main,
                                 args=(sweep.source, sweep.storage, str(resolved), i, threads))
                 for i in range(workers)]
        for proc in procs:
            proc.start()
        try:
            # every process asked each time: is_alive() also reaps one that has ended, and a
            # zombie would still look alive to the claim protocol's liveness check
            while any([p.is_alive() for p in procs]):
                time.sleep(1.0)
                refresh()
        finally:
            for proc in procs:
                proc.join()
        bad = [p.exitcode for p in procs if p.exitcode]
        if bad:
            raise RuntimeError(f"{len(bad)} worker(s) exited with codes {bad}")
    final = study_status(sweep, storage)
    if progress:
        progress(final)
    return final
