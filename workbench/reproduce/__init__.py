"""Reproductions of the seed papers' claims (``workbench reproduce``): one folder per claim under
``reproductions/``, each with its sweep specs, a ``claim.yaml`` (``claim``: the claim, what its
quick form shrinks, the checks on the shape of the effect) and a README with the verdict.

``plan`` checks every named claim before anything runs; ``entry.run`` runs one: its sweeps
into a fresh store, their reports, the results kept and ``checks`` evaluated on them; a full
run also keeps its quick form's numbers in ``results/quick``. ``provenance`` says whether the
committed results are still what the checkout gives; ``numbers`` compares a rerun quick form
with the committed quick numbers.
"""

from __future__ import annotations

from pathlib import Path

from workbench.common.validation import SpecError, did_you_mean
from workbench.reproduce import claim as claims
from workbench.reproduce.entry import Places

ROOT = Path(__file__).resolve().parent.parent.parent / "reproductions"
OUT = "out"  # reproductions/out/: the git-ignored work folders


def plan(names: list[str], root: Path = ROOT) -> dict[str, tuple[Path, claims.Claim]]:
    """The named reproductions (all when none is named), each folder with its checked claim."""
    found = claims.folders(root)
    unknown = [n for n in names if n not in found]
    if unknown:
        raise SpecError("workbench reproduce", unknown[0],
                        f"no such reproduction; {did_you_mean(unknown[0], found)}allowed: "
                        + ", ".join(found))
    chosen = names or list(found)
    return {name: (found[name], claims.load(found[name])) for name in dict.fromkeys(chosen)}


def places(name: str, quick: bool, out: Path | None, root: Path = ROOT) -> Places:
    """Where a reproduction works and keeps its results: ``OUT/NAME/{work,results}`` with
    ``--out OUT``; else ``reproductions/out/NAME[-quick]/work`` and, for the full size, the
    committed ``reproductions/NAME/results`` (quick: ``reproductions/out/NAME-quick/results``)."""
    if out is not None:
        return Places(out / name / "work", out / name / "results")
    base = root / OUT / (f"{name}-quick" if quick else name)
    return Places(base / "work", base / "results" if quick else root / name / "results")


def quick_places(full: Places) -> Places:
    """Where a full run's quick form works and keeps its numbers: ``WORK-quick`` beside the
    full run's work folder and ``RESULTS/quick`` (``provenance.QUICK``)."""
    from workbench.reproduce.provenance import QUICK

    return Places(full.work.with_name(full.work.name + "-quick"), full.results / QUICK)
