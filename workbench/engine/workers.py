"""Workers: a ``Worker`` claims and runs trials until none is left; ``run_sweep`` runs one in
this process or several in spawned processes, and reports progress while they run."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import optuna
import torch

from workbench.common.processes import end_with_parent, this_host
from workbench.common.validation import SpecError
from workbench.engine.claims import Claims
from workbench.engine.evaluation import Evaluator, decide, held_out_values
from workbench.engine.limits import workers_to_start
from workbench.engine.status import StudyStatus, study_status
from workbench.engine.studies import make_pruner, setup
from workbench.engine.trial import TrialRunner
from workbench.spec.plan import Sweep, device_kind
from workbench.spec.sweep import load
from workbench.store import runs
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


class Interrupted(KeyboardInterrupt):
    """Ctrl-C ended the sweep: ``requeued`` interrupted trials run again when it is resumed."""

    def __init__(self, requeued: int):
        super().__init__(requeued)
        self.requeued = requeued


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


def _worker_main(source: str, storage: str, artifacts: str | None, device: str, index: int,
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
    Worker(sweep, Store.from_url(sweep.storage, artifacts), torch.device(device), index,
           held_out=held_out).run()


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
    if ray is not None:
        from workbench.engine import ray_launcher

        resolved = torch.device(ray.device(device or sweep.spec.device))
        started = ray_launcher.connect(ray.address)
    else:
        resolved = resolve_device(device or sweep.spec.device)
        started = False
    try:
        if ray is not None:  # before anything is written: a worker no node holds is refused
            ray = replace(ray, workers=ray_launcher.worker_count(ray))
        return _run_sweep(sweep, workers, resolved, progress, say, ray)
    finally:
        if started:
            import ray as ray_module

            ray_module.shutdown()


def _run_sweep(sweep: Sweep, workers: int, resolved: torch.device, progress, say,
               ray) -> list[StudyStatus]:
    sweep = sweep.on_device(device_kind(resolved.type))
    store = Store.from_url(sweep.storage, sweep.artifact_root)
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
        if live:
            progress(study_status(sweep, store))

    refresh()
    if ray is None and workers > 1:  # no more processes than trials left to run
        left = sum(max(0, s.total - s.finished - s.running) for s in study_status(sweep, store))
        workers = workers_to_start(workers, left)
    threads = max(1, (os.cpu_count() or 1) // workers)

    spread = (resolved.type == "cuda" and resolved.index is None and workers > 1)
    gpus = visible_gpus() if spread else []

    def work(held_out: list[int]) -> None:
        if ray is not None:
            from workbench.engine import ray_launcher

            ray_launcher.run_workers(sweep, ray, resolved.type, held_out, refresh, say)
            return
        if workers == 1:
            torch.set_num_threads(threads)
            Worker(sweep, store, resolved, 0, on_trial_end=refresh if live else None,
                   held_out=held_out).run()
            return
        context = multiprocessing.get_context("spawn")
        procs = [context.Process(target=_worker_main,
                                 args=(sweep.source, sweep.storage, sweep.artifact_root,
                                       str(resolved), i, threads, gpu_for_worker(i, gpus),
                                       [plan.fingerprint for plan in sweep.studies], held_out,
                                       os.getpid()))
                 for i in range(workers)]
        with sigint_ignored():
            for proc in procs:
                proc.start()
        try:
            # every process asked each time: is_alive() also reaps one that has ended, and a
            # zombie would still look alive to the claim protocol's liveness check
            while any([p.is_alive() for p in procs]):
                time.sleep(1.0)
                refresh()  # nothing read when not live
        except KeyboardInterrupt:  # each worker marks its trial interrupted and ends
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
            raise
        finally:
            for proc in procs:
                proc.join()
        bad = [p.exitcode for p in procs if p.exitcode]
        if bad:
            raise RuntimeError(f"{len(bad)} worker(s) exited with codes {bad}")

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
