"""The words every caption of the report shares, in one place: on which seeds the best trial
was chosen and on which it is shown, how the intervals are made and what they mean at small n,
and the marks on a method's name (reconstructed †, stale ‡)."""

from __future__ import annotations

from collections.abc import Iterable

from workbench.report.data import MethodData, SweepData, held_out_seeds
from workbench.stats import aggregates as stats
from workbench.stats.claims import EdgeTrend

DAGGER, STALE = "†", "‡"


def name(m: MethodData) -> str:
    """The method's label with its marks."""
    marks = [DAGGER] if m.fidelity != "reference-checked" else []
    if m.stale:
        marks.append(STALE)
    return " ".join([m.label, *marks])


def seed_range(seeds: Iterable[int]) -> str:
    """``0-2`` for consecutive seeds, else ``0, 5, 9`` (six at most, then how many)."""
    seeds = sorted(seeds)
    if not seeds:
        return "none"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    shown = ", ".join(map(str, seeds[:6]))
    return shown + (f" ... ({len(seeds)})" if len(seeds) > 6 else "")


def selection(d: SweepData) -> str:
    """How the best trial was chosen and on which seeds the report shows it."""
    record, methods = d.record, [m for m in d.methods if m.best_run is not None]
    trials = sorted({m.n_trials for m in d.methods})
    fewer = ", ".join(f"{m.label}: {m.n_trials}" for m in d.methods
                      if m.n_trials < trials[-1])
    fewer = f" ({fewer})" if fewer else ""
    chosen = f"best of {trials[-1]} trials{fewer} chosen on seeds {seed_range(record.seeds)}"
    if record.evaluation is None:
        return (f"{chosen} and shown on the same seeds: selection and reporting used the "
                "same seeds, so each method's numbers are biased upward, the more the more "
                "knobs it tunes (add evaluation: {seeds: 10} to the spec for held-out seeds)")
    held = held_out_seeds(d, record)
    text = f"{chosen}; shown on {len(held)} held-out seeds ({seed_range(held)})"
    outcome, plan = d.outcome, record.evaluation
    if plan.rule == "separated" and outcome is not None:
        rounds = (f"held-out seeds added in rounds of {plan.step} from {plan.first} until the "
                  "best method's interval separated from the second's")
        if outcome.reason == "separated":
            text += f"; {rounds}: {outcome.best} from {outcome.second} at {outcome.seeds}"
        elif outcome.reason == "maximum":
            text += (f"; {rounds}, or {len(plan.seeds)}: {outcome.best} and {outcome.second} "
                     f"still overlap at the maximum")
    missing = [m for m in methods if not m.held_out]
    if missing:
        text += ("; on the tuning seeds instead for " + ", ".join(
            f"{m.label} ({m.missing})" for m in missing))
    diverged = [f"{m.label} on {m.diverged}" for m in methods if m.diverged]
    if diverged:
        text += ("; diverged held-out seeds count as the worst value: "
                 + ", ".join(diverged))
    return text


def intervals(hows: str | Iterable[str], confidence: float, counts: Iterable[int]) -> str:
    """How the intervals of each aggregate in ``hows`` are made, and what few seeds do."""
    hows = [hows] if isinstance(hows, str) else list(hows)
    counts = [n for n in counts if n]
    text = f"{confidence:.0%} CIs: " + "; ".join(
        f"{how.upper() if how == 'iqm' else how}: {stats.INTERVAL_METHODS[how]}"
        for how in hows)
    if counts and min(counts) < stats.SMALL_N:
        n = min(counts)
        text += (f"; only {n} seed{'s' if n != 1 else ''} for some methods (fewer than "
                 f"{stats.SMALL_N}): wide intervals, and honest")
        if n < 4 and "iqm" in hows:
            text += "; the IQM trims nothing below 4 values and equals the mean there"
    return text


def marks(methods: Iterable[MethodData]) -> str:
    """What the † and ‡ on method names mean, and what each stale or superseded study is."""
    methods = list(methods)
    parts = []
    if any(m.fidelity != "reference-checked" for m in methods):
        parts.append(f"{DAGGER} reconstructed from the paper's text")
    stale: dict[str, list[str]] = {}
    for m in methods:
        if m.stale:
            stale.setdefault(m.stale, []).append(m.label)
    if stale:
        parts.append(f"{STALE} stale, not current (rerun the sweep): " + "; ".join(
            f"{', '.join(labels)}: {why}" for why, labels in stale.items()))
    superseded = [m for m in methods if m.superseded]
    if superseded:
        parts.append("superseded studies, shown on request: " + "; ".join(
            f"{m.label}: {m.superseded}" for m in superseded))
    return ". ".join(parts)


def edge_advice(edge: str, trend: EdgeTrend | None, hyperparameter: str) -> str:
    """What a best value at the ``edge`` end of its search range means: ``widen it``, or, where
    the objective still improves toward that end (``data.edge_trend``), that trend: the range
    holds no interior optimum, and a wider one moves the best to its new end."""
    if trend is None or not trend.improving:
        return f"best at the range's {edge} end: widen it"
    if trend.form == "power":
        rate = f"objective ~ {hyperparameter}^{trend.slope:.2g}"
    else:
        unit = "decade" if trend.form == "per_decade" else "unit"
        rate = f"objective {trend.slope:+.2g} per {unit} of {hyperparameter}"
    return (f"best at the range's {edge} end, still improving:\n{rate} over "
            f"{trend.lowest:.3g}-{trend.highest:.3g}\n({trend.n} trials nearest it, one-sided "
            f"Spearman p={trend.p:.2g}):\nno interior optimum found in range")
