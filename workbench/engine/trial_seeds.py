"""Which seeds a trial has run, and which seeds its objective is over.

A study's fingerprint leaves the seed list out: a (trial configuration, seed) run is determined
by the fingerprint and the seed alone, so a sweep that asks for more (or other) seeds keeps its
study and reuses every seed run it has. Each trial therefore records its per-seed objectives
and the seeds its Optuna value aggregates (``over``):

- when it is told, in the trial's user attribute ``seed_values`` ({seed: objective}; ``over``
  is the keys);
- after the seeds changed (a finished trial takes no attributes), in the study's user attribute
  ``seeds.NUMBER``: {"values": {seed: objective}, "over": [seeds]}, which wins.

A complete trial is *comparable* under a sweep when ``over`` is the sweep's seed set: only such
trials are ranked (the best trial, the study's best value), so a 3-seed objective is never
compared with 5-seed ones. A complete trial that is not comparable is brought to the sweep's
seeds before any new trial is claimed: *recomputed* when it has run every seed asked for (no
run), else *extended* by running only its missing seeds (``missing``).

Pure functions of user attributes: used by the engine (Optuna's ``FrozenTrial``) and by
`workbench status` (``workbench.store.optuna_tables.TrialRow``) alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SEED_VALUES = "seed_values"  # trial user attribute: {seed: objective} when it was told
REVISION = "seeds.revision"  # study user attribute: bumped at each value replaced


def record_key(number: int) -> str:
    """The study's user attribute holding trial ``number``'s seeds after a change."""
    return f"seeds.{number}"


def extension_key(number: int) -> str:
    """The study's user attribute claiming the extension of trial ``number`` (an evaluation-like
    claim entry: state, owner, beat, reason)."""
    return f"extending.{number}"


@dataclass(frozen=True)
class TrialSeeds:
    """A trial's per-seed objectives (every seed it has run to the end) and the seeds its
    Optuna value aggregates."""

    values: dict[int, float]
    over: tuple[int, ...]

    def to_attr(self) -> dict:
        return {"values": {str(s): v for s, v in self.values.items()}, "over": list(self.over)}


def of(user_attrs: Mapping, study_attrs: Mapping, number: int) -> TrialSeeds | None:
    """Trial ``number``'s seeds (its user attributes and the study's); None for a trial that
    recorded none (pruned, failed, or running)."""
    later = study_attrs.get(record_key(number))
    if later is not None:
        return TrialSeeds({int(s): float(v) for s, v in later["values"].items()},
                          tuple(later["over"]))
    told = user_attrs.get(SEED_VALUES)
    if told is None:
        return None
    values = {int(s): float(v) for s, v in told.items()}
    return TrialSeeds(values, tuple(values))


def same_seeds(over: Iterable[int], seeds: Iterable[int]) -> bool:
    return sorted(over) == sorted(seeds)


def comparable(trial, study_attrs: Mapping, seeds: list[int]) -> bool:
    """A complete trial whose objective is over exactly ``seeds``."""
    if getattr(trial.state, "name", trial.state) != "COMPLETE":
        return False
    record = of(trial.user_attrs, study_attrs, trial.number)
    return record is not None and same_seeds(record.over, seeds)


def missing(record: TrialSeeds, seeds: list[int]) -> list[int]:
    """The seeds of ``seeds`` (in their order) that the trial has not run."""
    return [s for s in seeds if s not in record.values]


def ranked(trials, study_attrs: Mapping, seeds: list[int]) -> list:
    """``trials`` without the complete ones whose objective is over other seeds (what the best
    trial is chosen among)."""
    return [t for t in trials if getattr(t.state, "name", t.state) != "COMPLETE"
            or comparable(t, study_attrs, seeds)]


def pending(trials, study_attrs: Mapping, seeds: list[int]) -> list:
    """The complete trials whose objective is not over ``seeds`` yet and whose extension to
    ``seeds`` has not ended diverged or failed (those still to recompute or extend)."""
    found = []
    for t in trials:
        if getattr(t.state, "name", t.state) != "COMPLETE" or comparable(t, study_attrs, seeds):
            continue
        if of(t.user_attrs, study_attrs, t.number) is None:
            continue  # told without its seeds' objectives: nothing to build on
        entry = study_attrs.get(extension_key(t.number)) or {}
        if entry.get("state") in ("failed", "diverged") and same_seeds(
                entry.get("seeds", []), seeds):
            continue
        found.append(t)
    return found
