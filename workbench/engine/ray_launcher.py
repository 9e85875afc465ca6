"""Ray as a sweep's launcher: the sweep's workers run as Ray tasks, placed on the nodes of a Ray
cluster by the resources each asks for (``cpus_per_worker``, ``gpus_per_worker``: Ray gives a
task with GPUs its own ``CUDA_VISIBLE_DEVICES``).

Ray only places processes. The claim protocol (``claims``) stays the one source of truth for
trial counts, so Ray workers and plain ``workbench sweep`` processes may work on one sweep at
once, each trial run once. A worker whose process or node dies is started again by Ray, up to
``max_restarts`` times (a task's ``max_retries``, system failures only); the trial it was running
is failed by the claim protocol (its owner's process is gone on this host; its heartbeat goes
stale on another) and queued again as any crashed trial.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from workbench.engine.launchers import Launcher
from workbench.spec.plan import Sweep, device_kind
from workbench.spec.sweep import check

LOCAL = "local"  # `--ray` without an address: a Ray cluster of this machine, for this call


class RayProblem(RuntimeError):
    """The Ray cluster cannot run the sweep as asked (the message says why and what to do)."""


@dataclass(frozen=True)
class RayPlan:
    """How the sweep's workers are placed: the cluster's ``address`` (``local``, ``auto``,
    ``HOST:PORT``, ``ray://HOST:PORT``), how many workers (None: as many as the cluster's
    CPUs, or GPUs, hold) and what each asks for."""

    address: str = LOCAL
    workers: int | None = None
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    max_restarts: int = 3

    @classmethod
    def of(cls, sweep: Sweep, address: str | None, workers: int | None) -> RayPlan:
        """The spec's ``launcher`` with the command line's ``--ray ADDRESS`` and ``--workers``
        over it."""
        spec = sweep.spec.launcher
        return cls(address=address or spec.address or LOCAL,
                   workers=workers or spec.workers, cpus_per_worker=spec.cpus_per_worker,
                   gpus_per_worker=spec.gpus_per_worker, max_restarts=spec.max_restarts)

    def device(self, asked: str | None) -> str:
        """The device each worker trains on: ``cuda`` when it is given GPUs (its own, as Ray
        sets them visible), else the CPU."""
        if asked == "cuda" and not self.gpus_per_worker:
            raise RayProblem("device cuda asks for GPUs, but the Ray workers get none; set "
                             "launcher.gpus_per_worker (fractions share a GPU)")
        if asked == "cpu" and self.gpus_per_worker:
            raise RayProblem("device cpu with launcher.gpus_per_worker "
                             f"{self.gpus_per_worker:g}: the GPUs would stay idle; drop one")
        if asked not in (None, "auto", "cpu", "cuda"):
            raise RayProblem(f"device {asked}: under Ray, each worker's GPU is the one Ray "
                             "gives it; allowed: auto, cpu, cuda")
        return "cuda" if self.gpus_per_worker else "cpu"


def connect(address: str) -> bool:
    """Join the Ray cluster at ``address`` (``local``: start one on this machine); whether
    this call started it (the caller then shuts it down)."""
    try:
        import ray
    except ImportError:
        raise RayProblem("--ray needs Ray, which is not installed here: pip install "
                         "'workbench[ray]' (scripts/setup.sh installs it)") from None

    if ray.is_initialized():
        return False
    _answers(address)
    kwargs = {"include_dashboard": False, "logging_level": "WARNING", "log_to_driver": True,
              "configure_logging": True}
    try:
        if address == LOCAL:  # on loopback: the detected node address may not be reachable
            ray.init(address=LOCAL, _node_ip_address="127.0.0.1", **kwargs)
            return True
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RayProblem(f"cannot join the Ray cluster at {address}: {first}; allowed: "
                         f"{LOCAL} (no address: start one here), auto (the cluster this "
                         "machine belongs to, `ray start`), HOST:PORT, ray://HOST:PORT") from None
    return False


def _answers(address: str) -> None:
    """RayProblem at once when nothing listens at a ``HOST:PORT`` address (Ray itself retries
    such an address for minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if address in (LOCAL, "auto") or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as err:
        raise RayProblem(f"cannot join the Ray cluster at {address}: nothing answers there "
                         f"({err.strerror or err}); start it with `ray start --head`, or give "
                         "the address `ray start` printed") from None


def worker_count(plan: RayPlan) -> int:
    """``plan.workers``, or as many workers as the alive nodes hold, at least one; RayProblem
    when no node can hold even one (a worker that could never start would wait forever)."""
    import ray

    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    cpus, gpus = plan.cpus_per_worker, plan.gpus_per_worker
    fits = [r for r in nodes if r.get("CPU", 0) >= cpus and r.get("GPU", 0) >= gpus]
    if not fits:
        have = "; ".join(f"{r.get('CPU', 0):g} CPU, {r.get('GPU', 0):g} GPU" for r in nodes)
        raise RayProblem(f"no node of the Ray cluster has {cpus:g} CPU and {gpus:g} GPU for "
                         f"one worker (its nodes: {have or 'none alive'}); lower "
                         "launcher.cpus_per_worker or launcher.gpus_per_worker, or add a node "
                         "that has them")
    if plan.workers:
        return plan.workers
    per_node = [min(math.floor(r.get("CPU", 0) / cpus + 1e-9),
                    math.floor(r.get("GPU", 0) / gpus + 1e-9) if gpus else math.inf)
                for r in fits]
    return max(1, int(sum(per_node)))


@dataclass(frozen=True)
class Placement:
    """Where a Ray worker ran and how many trials it ran there."""

    index: int
    node: str  # Ray's node id
    host: str
    trials: int

    def line(self) -> str:
        return (f"Ray worker {self.index} ran {self.trials} trial(s) on node "
                f"{self.node[:NODE_CHARS]} ({self.host})")


NODE_CHARS = 12  # of a node id, in what the launcher says


def ray_worker(document: dict, source: str, name: str, storage: str, artifacts: str | None,
               device: str, index: int, fingerprints: list[str], held_out: list[int],
               threads: int) -> Placement:
    """A Ray task: one sweep worker, from the spec's checked document (the spec file may not
    be on this host), refusing to run when this host's code keys the studies differently."""
    import ray

    from workbench.common.processes import RAY_NODE, this_host
    from workbench.common.validation import SpecError
    from workbench.engine.workers import Worker, quiet_libraries
    from workbench.store.database import Store

    node = ray.get_runtime_context().get_node_id()
    os.environ[RAY_NODE] = node
    quiet_libraries()
    torch.set_num_threads(threads)
    sweep = check(document, source, name, storage=storage).on_device(device_kind(device))
    if [plan.fingerprint for plan in sweep.studies] != fingerprints:
        raise SpecError(source, "", f"the workbench on host {this_host()} keys this "
                        "sweep's studies differently (another version of its code or "
                        "methods); install the same checkout on every node")
    trials = Worker(sweep, Store.from_url(sweep.storage, artifacts), torch.device(device),
                    index, held_out=held_out).run()
    return Placement(index, node, this_host(), trials)


def run_workers(sweep: Sweep, plan: RayPlan, device: str, held_out: list[int],
                refresh: Callable[[], None], say: Callable[[str], None]) -> None:
    """Start the sweep's workers as Ray tasks, spread over the nodes (Ray's ``SPREAD``: a lost
    node takes as few workers as it can), and wait for them (``refresh`` about once a second).
    A worker's refusal (a SpecError, an artifact root another host cannot reach) is raised
    here; each worker's node and trial count is said as it ends, and a worker lost more often
    than ``max_restarts``."""
    import ray

    n = worker_count(plan)
    task = ray.remote(ray_worker).options(
        num_cpus=plan.cpus_per_worker, num_gpus=plan.gpus_per_worker,
        max_retries=plan.max_restarts, retry_exceptions=False, name="workbench-worker",
        scheduling_strategy="SPREAD")
    document = sweep.spec.model_dump(mode="json")
    fingerprints = [p.fingerprint for p in sweep.studies]
    threads = max(1, int(plan.cpus_per_worker))
    pending = [task.remote(document, sweep.source, sweep.name, sweep.storage,
                           sweep.artifact_root, device, i, fingerprints, held_out, threads)
               for i in range(n)]
    lost = 0
    try:
        while pending:
            done, pending = ray.wait(pending, timeout=1.0)
            refresh()
            for ref in done:
                try:
                    say(ray.get(ref).line())
                except ray.exceptions.RayTaskError as err:
                    raise (err.cause if err.cause is not None else err) from None
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.ObjectLostError):
                    lost += 1
    finally:
        for ref in pending:
            ray.cancel(ref)
    if lost:
        say(f"{lost} Ray worker(s) died {plan.max_restarts + 1} times (launcher.max_restarts "
            f"{plan.max_restarts}); the studies they left short go on at the next run")


@dataclass
class RayLauncher(Launcher):
    """The sweep's workers as Ray tasks (``run_workers``); ``opened`` joins the cluster (or
    starts one of this machine) and counts the workers its nodes hold before anything is
    written, and leaves a cluster it started."""

    plan: RayPlan
    device: torch.device

    @contextlib.contextmanager
    def opened(self) -> Iterator[None]:
        started = connect(self.plan.address)
        try:
            self.plan = replace(self.plan, workers=worker_count(self.plan))
            yield
        finally:
            if started:
                import ray

                ray.shutdown()

    def run(self, sweep, store, held_out, refresh, say) -> None:
        run_workers(sweep, self.plan, self.device.type, held_out, refresh or (lambda: None), say)
