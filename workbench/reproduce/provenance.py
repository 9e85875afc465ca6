"""What determined a reproduction's results, kept beside them (``provenance.json``), and whether
they are still what the checkout would give.

A results folder is determined by:

- ``files``: the reproduction's own files (``claim.yaml``, its sweep and credit specs), SHA-256
  of each;
- ``studies``: each sweep's study fingerprints by label (``workbench.common.fingerprint``: the
  task and its parameters, budget, methods, sampler, pruner, device kind, code, versions), the
  same keys the engine stores its studies under;
- ``code``: module -> content hash of every module a study runs, and of those that turn the
  store into the kept files (the report and this package) and run the credit studies;
- ``versions``: the numerical libraries' versions those modules import.

``status`` compares a record with the checkout: ``current`` when nothing recorded differs,
``stale`` with what changed, ``missing`` without results. A stale folder whose quick form was
rerun on the current code and gave its committed quick numbers (``quick/verified.json``,
written by ``workbench reproduce NAME --quick``) says ``verified at COMMIT``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from dataclasses import dataclass, field
from pathlib import Path

from workbench.common import fingerprint
from workbench.reproduce.claim import CLAIM_FILE, Claim

PROVENANCE_FILE = "provenance.json"
VERIFIED_FILE = "verified.json"
QUICK = "quick"  # results/quick/: the quick form's numbers, from the same code as results/
# the modules that make the kept files from a store (report, checks) and credit studies
REPORT_ROOTS = ("workbench.reproduce.entry", "workbench.report")
CREDIT_ROOTS = ("workbench.credit.entry",)


def own_files(claim: Claim, folder: Path) -> dict[str, str]:
    """SHA-256 of ``claim.yaml`` and of each sweep and credit spec it names."""
    names = [CLAIM_FILE, *claim.sweeps, *claim.credit]
    return {name: _sha256(folder / name) for name in names}


def record(claim: Claim, folder: Path, sweeps: list) -> dict:
    """The provenance of results made from ``sweeps`` (checked ``spec.plan.Sweep``s, as run)."""
    code, versions = fingerprint.code_hashes(
        [*REPORT_ROOTS, *(CREDIT_ROOTS if claim.credit else ())])
    code, versions = dict(code), dict(versions)
    studies = {}
    for sweep in sweeps:
        studies[sweep.name] = {plan.label: plan.fingerprint for plan in sweep.studies}
        for plan in sweep.studies:
            code.update(plan.document.get("code", {}))
            versions.update(plan.document.get("versions", {}))
    return {"files": own_files(claim, folder), "studies": studies,
            "code": dict(sorted(code.items())), "versions": dict(sorted(versions.items()))}


@dataclass
class Status:
    name: str
    state: str  # current, stale or missing
    changes: list[str] = field(default_factory=list)  # what differs, for a stale one
    made_at: str = ""  # the commit the results came from (run.json)
    verified: str = ""  # stale, but its quick form gave its numbers at this commit

    def line(self) -> str:
        text = f"{self.name}: {self.state}"
        if self.made_at:
            text += f" (results of {self.made_at[:12]})"
        if self.changes:
            text += ": " + "; ".join(self.changes)
        if self.verified:
            text += f"; quick form verified at {self.verified[:12]}"
        return text


def status(name: str, folder: Path, claim: Claim) -> Status:
    """Whether ``folder/results`` is what the checkout would give (see the module's text)."""
    results = folder / "results"
    run = _read(results / "run.json")
    if run is None:
        return Status(name, "missing", ["no results/run.json: `workbench reproduce " + name
                                        + "` makes them"])
    made_at = str(run.get("commit", ""))
    recorded = _read(results / PROVENANCE_FILE)
    if recorded is None:
        return Status(name, "stale", ["what determined the results was not recorded"],
                      made_at)
    changes = differences(recorded, claim, folder)
    if not changes:
        return Status(name, "current", [], made_at)
    verified = _read(results / QUICK / VERIFIED_FILE)
    at = ""
    if verified is not None and not differences(verified["provenance"], claim, folder):
        at = str(verified.get("commit", ""))
    return Status(name, "stale", changes, made_at, at)


def differences(recorded: dict, claim: Claim, folder: Path) -> list[str]:
    """What differs between a provenance record and the checkout, one phrase per kind."""
    out = []
    now = own_files(claim, folder)
    files = sorted(k for k in recorded["files"].keys() | now.keys()
                   if recorded["files"].get(k) != now.get(k))
    if files:
        out.append("changed file" + ("s " if len(files) > 1 else " ") + ", ".join(files))
    modules = fingerprint.recheck(recorded["code"])
    if modules:
        shown = ", ".join(modules[:3]) + (f" and {len(modules) - 3} more"
                                          if len(modules) > 3 else "")
        out.append(f"changed code: {shown}")
    versions = [f"{dist} {was} → {_version(dist)}" for dist, was in recorded["versions"].items()
                if _version(dist) != was]
    if versions:
        out.append("versions: " + ", ".join(versions))
    return out


def write_verified(committed: Path, fresh: Path) -> None:
    """Record that the quick form run into ``fresh`` gave ``committed``'s numbers: the commit
    it ran at and its provenance, in ``committed/verified.json``."""
    run, recorded = _read(fresh / "run.json"), _read(fresh / PROVENANCE_FILE)
    (committed / VERIFIED_FILE).write_text(json.dumps(
        {"commit": run["commit"], "finished": run["finished"], "provenance": recorded},
        indent=1) + "\n")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
