"""What `status` and `report` need of a sweep spec, kept between calls.

Resolving a spec imports its task's and methods' modules (torch among them: a second and
more) to compute each study's fingerprint. `status` and `report` need only the result: the
sweep's name, store, objective and, per study, its name, label, trial count, fingerprint and
fingerprint document, on either device kind. ``load`` keeps that as JSON under
``$WORKBENCH_CACHE/resolved/KEY.json``; KEY hashes everything the result depends on: the
spec file's bytes and path, the ``--storage`` given, the working directory (a relative SQLite
path resolves against it), the catalogue's key (the size and time of every Python file of the
``workbench`` and ``methods`` packages and of every plugin) and the versions of the libraries
a fingerprint names. Any change resolves the spec again, with its full checks and messages.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workbench.catalogue import cache as catalogue
from workbench.common.cache import cache_root
from workbench.common.fingerprint import ALWAYS_VERSIONED, VERSIONED_IF_IMPORTED

FORMAT = 1


@dataclass(frozen=True)
class ResolvedStudy:
    name: str
    label: str
    n_trials: int
    fingerprint: str
    document: dict = field(compare=False, repr=False)


@dataclass(frozen=True)
class ResolvedSweep:
    """A checked spec's sweep as far as `status` and `report` read it (the attribute names
    of ``workbench.spec.plan.Sweep``)."""

    name: str
    source: str
    storage: str
    task_name: str
    seeds: list[int]
    metric: str
    direction: str
    max_failed_trials: int | None
    studies: list[ResolvedStudy]
    fingerprints: dict[str, list[str]]  # device kind -> its studies' fingerprints
    report_settings: dict  # the spec's ``report:`` section

    @property
    def report(self):
        from workbench.store.study_record import ReportOptions

        return ReportOptions.model_validate(self.report_settings)

    def any_device(self) -> frozenset[str]:
        """The fingerprints of what this spec runs now, on the CPU or on CUDA."""
        return frozenset(f for kind in self.fingerprints.values() for f in kind)


def load(path: str | Path, storage: str | None = None) -> ResolvedSweep:
    """The spec at ``path`` resolved (``workbench.spec.sweep.load``), from the cache when
    current."""
    cached = _place(path, storage)
    if cached is None:  # unreadable: spec.load says what is wrong
        return _resolve(path, storage)
    try:
        saved = json.loads(cached.read_text())
        saved["studies"] = [ResolvedStudy(**s) for s in saved["studies"]]
        return ResolvedSweep(**saved)
    except (OSError, ValueError, TypeError, KeyError):
        pass
    resolved = _resolve(path, storage)
    _write(cached, resolved)
    return resolved


def keep(sweep, path: str | Path, storage: str | None = None) -> None:
    """Keep the resolution of the spec at ``path`` that `workbench sweep` just made, so that
    `status` and `report` with the same arguments start without resolving it again."""
    cached = _place(path, storage)
    if cached is not None:
        _write(cached, summary(sweep))


def _place(path: str | Path, storage: str | None) -> Path | None:
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return cache_root() / "resolved" / f"{_key(path, data, storage)}.json"


def _write(cached: Path, resolved: ResolvedSweep) -> None:
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f".{cached.name}.{os.getpid()}")
        partial.write_text(json.dumps(asdict(resolved)))
        os.rename(partial, cached)  # whole or absent (atomic on POSIX; the store's own
        # renames, through os.replace, are the ones the crash tests count)
    except OSError:
        pass  # a read-only cache: resolve again next time


def _resolve(path: str | Path, storage: str | None) -> ResolvedSweep:
    from workbench.spec import sweep as spec

    return summary(spec.load(path, storage=storage))


def summary(sweep) -> ResolvedSweep:
    """The part of a ``workbench.spec.plan.Sweep`` that `status` and `report` read."""
    return ResolvedSweep(
        name=sweep.name, source=sweep.source, storage=sweep.storage,
        task_name=sweep.task.name, seeds=list(sweep.seeds), metric=sweep.metric,
        direction=sweep.direction, max_failed_trials=sweep.max_failed_trials,
        studies=[ResolvedStudy(p.name, p.label, p.n_trials, p.fingerprint, p.document)
                 for p in sweep.studies],
        fingerprints={kind: [p.fingerprint for p in sweep.on_device(kind).studies]
                      for kind in ("cpu", "cuda")},
        report_settings=sweep.report.model_dump(mode="json"))


def _key(path: str | Path, data: bytes, storage: str | None) -> str:
    digest = hashlib.sha256(f"{FORMAT}\0{path}\0{Path(path).resolve()}\0{storage}\0"
                            f"{os.getcwd()}\0{catalogue.key()}\0".encode())
    digest.update(data)
    for dist in (*ALWAYS_VERSIONED, *VERSIONED_IF_IMPORTED.values()):
        try:
            digest.update(f"\0{dist}={importlib.metadata.version(dist)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"\0{dist} absent".encode())
    return digest.hexdigest()[:24]
