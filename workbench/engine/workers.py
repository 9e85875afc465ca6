"""Workers: a ``Worker`` claims and runs trials until none is left; what a worker process needs
(its entry point, signals, its GPU, quiet libraries). ``engine.launchers`` starts them;
``engine.sweep_run`` runs a sweep through a launcher."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
import torch

from workbench.common.processes import end_with_parent, this_host
from workbench.common.validation import SpecError
from workbench.engine.claims import Claims
from workbench.engine.evaluation import Evaluator
from workbench.engine.studies import make_pruner
from workbench.engine.trial import TrialRunner
from workbench.spec.plan import Sweep, device_kind
from workbench.spec.sweep import load
from workbench.store import disk_space
from workbench.store.artifacts import check_reachable
from workbench.store.database import Store
from workbench.store.run_writer import RunWriter
from workbench.store.sink import MetricSink


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
    held_out: list[int] = field(default_factory=list)  # seeds to evaluate best trials on

    def run(self) -> int:
        """Run trials until none is left to claim; how many this worker ran."""
        storage = self.store.worker_storage()
        client = self.store.mlflow_client()
        claims = Claims(self.sweep, self.store, storage, client)
        experiment = client.get_experiment_by_name(self.sweep.name)
        check_reachable(experiment, this_host())  # before any run writes an artifact
        experiment_id = experiment.experiment_id
        plans = self.sweep.studies
        start = self.index % len(plans)
        writer = RunWriter(client, self.store.mlflow_url)
        ran = 0
        with MetricSink(self.store.mlflow_url) as sink, contextlib.closing(writer):
            runner = TrialRunner(self.sweep, client, writer, storage, sink, self.device,
                                 self.warned)
            order = plans[start:] + plans[:start]
            for plan in order:
                study = optuna.load_study(study_name=plan.name, storage=storage,
                                          pruner=make_pruner(self.sweep, plan))
                while (job := claims.claim_seeds(study, plan)) is not None:
                    self._extend(claims, runner, study, plan, *job)
                while (trial := claims.claim(study, plan)) is not None:
                    runner.run(study, plan, trial)
                    ran += 1
                    if self.on_trial_end:
                        self.on_trial_end()
                claims.close_study_run(study, plan, experiment_id)
            if self.held_out:
                evaluator = Evaluator(self.sweep, self.store, storage, client, sink,
                                      self.device)
                for plan in order:  # studies another worker finished are evaluated here too
                    evaluator.run(optuna.load_study(study_name=plan.name, storage=storage),
                                  plan, self.held_out)
        return ran


    @staticmethod
    def _extend(claims: Claims, runner: TrialRunner, study, plan, trial, missing: list[int],
                entry: dict) -> None:
        """Run the seeds a finished trial lacks and record the outcome (an interrupt is
        recorded, then propagates)."""
        try:
            ended = runner.extend(study, plan, trial, missing,
                                  claims.beat(study, trial.number, entry))
        except BaseException:
            claims.end_extension(study, plan, trial, entry, "interrupted")
            raise
        claims.end_extension(study, plan, trial, entry, ended.state, ended.values,
                             ended.reason)


@contextlib.contextmanager
def sigint_ignored():
    """SIGINT ignored while the block runs: a process started inside inherits that (Python
    then installs no handler of its own), so Ctrl-C reaches the sweep's process alone, which
    stops its workers in order (SIGTERM) instead of each printing its own traceback."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def terminate_gracefully() -> None:
    """Turn SIGTERM into SystemExit, so runs are flushed and marked before the process ends."""

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def quiet_libraries() -> None:
    """Optuna's per-trial INFO lines off: set by the entry points (the CLI, a worker process),
    never at import, so a program that imports the engine keeps its own logging settings."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def worker_main(source: str, storage: str, artifacts: str | None, device: str, index: int,
                 threads: int, gpu: str | None, fingerprints: list[str],
                 held_out: list[int], parent: int | None = None) -> None:
    """The entry point of a spawned worker process: it runs the studies the parent set up,
    and stops (exit 2) when the spec or the code changed in between. ``gpu``: the one GPU
    this process sees (``gpu_for_worker``), set before anything initialises CUDA."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops this worker (SIGTERM)
    terminate_gracefully()
    if parent is not None:
        end_with_parent(parent)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    quiet_libraries()
    torch.set_num_threads(threads)
    sweep = load(source, storage=storage).on_device(device_kind(device))
    if [plan.fingerprint for plan in sweep.studies] != fingerprints:
        print(f"error: {source}: the spec or the code it runs changed since this sweep "
              "started; run the same command again", file=sys.stderr, flush=True)
        sys.exit(2)
    try:
        Worker(sweep, Store.from_url(sweep.storage, artifacts), torch.device(device), index,
               held_out=held_out).run()
    except Exception as err:
        if not disk_space.is_disk_full(err):
            raise
        sys.exit(disk_space.EXIT_STORE_FULL)  # the parent marks the trials and says it


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out: ``CUDA_VISIBLE_DEVICES`` as set, else 0..k-1."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [g.strip() for g in listed.split(",") if g.strip()]
    return [str(i) for i in range(torch.cuda.device_count())]


def gpu_for_worker(index: int, gpus: list[str]) -> str | None:
    """Local worker ``index`` sees GPU ``index mod k`` of the k ``gpus`` alone (None: no
    GPU to hand out)."""
    return gpus[index % len(gpus)] if gpus else None
