"""What the report rebuilds from the store, and nothing else: a sweep's runs, params and metric
history (a handful of SQL queries, ``workbench.store.results``), each study's record
(``workbench.store.study_record``, written by the engine in place of the spec), and per study (one
method of the report) its trials, its best trial and that trial's seeds; then curves on a common
grid, steps to a target and scores pooled across sweeps.

The best trial is the best objective among the complete trials the sweep counts
(``workbench.store.selection``), chosen on the tuning seeds; where the sweep evaluated it on
held-out seeds, those runs are what the report shows of it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import optuna.distributions as od
import pandas as pd

from workbench.common import fingerprint, metrics
from workbench.common.validation import SpecError, shorten
from workbench.stats import claims as stats_claims
from workbench.store import results, runs, selection
from workbench.store.database import Store, redact
from workbench.store.study_record import EvaluationOutcome, ReportOptions, StudyRecord, TargetSpec

GRID_POINTS = 100


class ReportError(RuntimeError):
    """Nothing to report: the store or the sweep's runs are missing (or the output folder is
    not a report)."""


@dataclass(frozen=True)
class SweepRef:
    """A sweep to report: its name and the URL of the store that holds it; ``expected``, when
    given, the fingerprints the sweep's spec would run now (a study not among them is shown
    stale); ``include_superseded``: also the studies a later version of the sweep replaced."""

    name: str
    storage: str
    expected: frozenset[str] | None = None
    include_superseded: bool = False


EDGE_FRACTION = 0.05  # of a search range's width, in its own scale


def range_edge(value, dist: od.BaseDistribution) -> str | None:
    """"low" or "high" where ``value`` lies within ``EDGE_FRACTION`` of that end of a numeric
    search range, measured in the range's own scale (log10 for a log range); else None (and
    for choices). A best value at an edge means the range, not the method, may have decided
    the ranking: widen it and tune again."""
    low, high = getattr(dist, "low", None), getattr(dist, "high", None)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    if low is None or high is None or not high > low or not np.isfinite(value):
        return None
    if getattr(dist, "log", False):
        if value <= 0:
            return None
        value, low, high = np.log10(value), np.log10(low), np.log10(high)
    position = (value - low) / (high - low)
    if position <= EDGE_FRACTION:
        return "low"
    if position >= 1 - EDGE_FRACTION:
        return "high"
    return None


@dataclass
class MethodData:
    label: str
    fidelity: str
    trials: pd.DataFrame  # one row per trial run: run_id, status, number, objective, reason
    best_run: str | None
    seeds: pd.DataFrame  # the best trial's seed runs: run_id, seed, objective
    space: dict[str, od.BaseDistribution]
    n_trials: int  # the trials the study asks for
    fingerprint: str = ""
    stale: str | None = None  # why its results may not be current (code or spec changed)
    superseded: str | None = None  # what a later version of the sweep changed (shown on ask)
    held_out: bool = False  # ``seeds`` are held-out evaluation runs, not the tuning seeds
    missing: str | None = None  # why the held-out evaluation the sweep asks for is not shown
    diverged: int = 0  # held-out seeds that diverged (their objective: the worst value)
    failed: int = 0  # held-out seeds whose method raised (not shown)


@dataclass
class SweepData:
    name: str
    storage: str
    experiment: str
    record: StudyRecord  # the sweep's objective, seeds and options (from its first study)
    options: ReportOptions  # the report's, or else the sweep's own
    runs: pd.DataFrame
    params: pd.DataFrame
    history: pd.DataFrame
    methods: list[MethodData] = field(default_factory=list)
    outcome: EvaluationOutcome | None = None  # how many held-out seeds the sweep used, why

    @property
    def metric(self) -> str:
        return self.record.metric

    @property
    def direction(self) -> str:
        return self.record.direction

    def bounds(self, metric: str) -> tuple[float, float]:
        """The range of ``metric``'s values on this sweep's task: the vocabulary's, narrowed
        by the task's own as the study recorded it (``StudyRecord.metric_bounds``)."""
        return metrics.bounds(metric, self.record.metric_bounds.get(metric))


def edge_trend(d: SweepData, m: MethodData, name: str) -> stats_claims.EdgeTrend | None:
    """Where method ``m``'s best value of ``name`` lies at an end of its search range
    (``range_edge``): the objective's trend toward that end over its complete trials nearest it
    (``stats_claims.edge_trend``: a one-sided exact Spearman test over the 8 nearest, in the
    range's scale); None where the best is inside the range or too few trials were complete.
    Improving means no interior optimum was found in the range: widening it moves the best to
    the new end (separable logistic regression's lr: 9.9, then 566, then 5149)."""
    dist = m.space.get(name)
    if dist is None or m.best_run is None or "run_id" not in d.params or name not in d.params:
        return None
    params = d.params.set_index("run_id")[name]
    edge = range_edge(params.get(m.best_run), dist)
    if edge is None:
        return None
    done = m.trials[(m.trials["status"] == runs.FINISHED) & m.trials["objective"].notna()]
    values = pd.to_numeric(params.reindex(done["run_id"]), errors="coerce")
    return stats_claims.edge_trend(values.to_numpy(dtype=float),
                                   done["objective"].to_numpy(dtype=float), edge, d.direction,
                                   bool(getattr(dist, "log", False)))


def read_sweep(ref: SweepRef, options: ReportOptions | None = None) -> SweepData:
    """Everything the report draws of one sweep; ``options`` None: the sweep's own, as its
    study runs recorded them. The studies are the sweep's current ones (and the superseded
    ones when ``ref.include_superseded``); a study shared with another sweep has its trials in
    that sweep's experiment, which is read too."""
    store = Store.from_url(ref.storage)
    if not store.exists():
        raise ReportError(f"no store at {redact(ref.storage)}; run `workbench sweep` first")
    experiment = results.experiment_id(store, ref.name)
    if experiment is None:
        raise ReportError(f"the store has no runs of sweep {ref.name!r}")
    frame = results.runs(store, experiment)
    if runs.KIND not in frame or not (frame[runs.KIND] == runs.STUDY).any():
        raise ReportError(f"sweep {ref.name!r} has no runs yet")
    studies = study_records(ref.name, frame, ref.include_superseded)
    homes = sorted({str(study[runs.HOME_EXPERIMENT]) for study, _ in studies
                    if isinstance(study.get(runs.HOME_EXPERIMENT), str)} - {experiment})
    experiments = [experiment, *homes]
    if homes:
        frame = pd.concat([frame, results.runs(store, homes)], ignore_index=True)
    if not (frame[runs.KIND] == runs.SEED).any():
        raise ReportError(f"sweep {ref.name!r} has no runs yet")
    record = studies[0][1]
    options = options if options is not None else record.report
    keys = {record.metric, "objective", *(options.metrics or []),
            *(a for a in options.x_axes if a != "step")}
    if options.target:
        keys.add(options.target.metric)
    keys |= {*(r.metric for r in options.rates), *(r.x for r in options.rates),
             *(name for s in options.split for name in s.names()), *(s.x for s in options.split)}
    keys.discard("step")
    history = results.metric_history(store, experiments, sorted(keys))
    history["run_id"] = history["run_id"].astype(str)
    history["key"] = history["key"].astype(str)
    data = SweepData(ref.name, ref.storage, experiment, record, options, frame,
                     results.params(store, experiments), history)
    outcome = results.experiment_tags(store, experiment).get(runs.EVALUATION_OUTCOME)
    if outcome:
        data.outcome = EvaluationOutcome.model_validate_json(outcome)
    objective = history[history["key"] == "objective"].groupby("run_id")["value"].last()
    for study, study_record in studies:
        data.methods.append(_method(data, study, study_record, objective, ref.expected))
    return data


def study_records(sweep: str, frame: pd.DataFrame, include_superseded: bool = False
                  ) -> list[tuple[pd.Series, StudyRecord]]:
    """Each current study run of the sweep with its record, in the sweep's order (the
    superseded ones after them when asked for); a study without a record or a fingerprint
    (written by an older workbench) is a SpecError that says to rerun the sweep."""
    found, missing = [], []
    studies = frame[frame[runs.KIND] == runs.STUDY]
    for _, study in studies.iterrows():
        name = str(study.get(runs.STUDY_NAME))
        superseded = study.get(runs.STUDY_STATE) == runs.SUPERSEDED
        if superseded and not include_superseded:
            continue
        try:
            record = StudyRecord.from_tags(study)
        except ValueError as err:
            raise SpecError(f"sweep {sweep}", f"study {name}",
                            f"its {runs.STUDY_RECORD} tag is unreadable "
                            f"({shorten(str(err))}); rerun `workbench sweep` on the sweep's "
                            "spec to rewrite it") from None
        if record is None or not isinstance(study.get(runs.FINGERPRINT), str):
            missing.append(name)
        else:
            found.append((study, record))
    if missing:
        raise SpecError(f"sweep {sweep}", "",
                        f"{_studies(missing)} written by an older workbench: no "
                        f"{runs.STUDY_RECORD} or {runs.FINGERPRINT} tag, which the report "
                        "reads in place of the spec; rerun `workbench sweep` on the sweep's "
                        "spec (a study without a fingerprint runs again, keyed by what "
                        "determines it), then the report")
    if not found:
        raise ReportError(f"sweep {sweep!r} has no current study runs")
    return sorted(found, key=lambda pair: (pair[0].get(runs.STUDY_STATE) == runs.SUPERSEDED,
                                           pair[1].position, str(pair[0][runs.STUDY_NAME])))


def _studies(names: list[str]) -> str:
    """``study A was`` or ``studies A, B were`` (five named at most)."""
    shown = ", ".join(shorten(n, 120) for n in names[:5])
    if len(names) > 5:
        shown += f" and {len(names) - 5} more"
    return f"study {shown} was" if len(names) == 1 else f"studies {shown} were"


def _method(data: SweepData, study: pd.Series, record: StudyRecord, objective: pd.Series,
            expected: frozenset[str] | None) -> MethodData:
    frame = data.runs
    trials = frame[(frame[runs.KIND] == runs.TRIAL)
                  & (frame[runs.STUDY_NAME] == study[runs.STUDY_NAME])].copy()
    if runs.INTERRUPTED in trials:  # queued again: the trial that replaced it counts
        trials = trials[trials[runs.INTERRUPTED].isna()]
    trials["objective"] = trials["run_id"].map(objective)
    trials["number"] = trials["optuna.trial_number"].astype(int)
    trials["reason"] = trials.get(runs.PRUNE_REASON)
    finished = trials["status"].isin([runs.FINISHED, runs.KILLED])
    last = selection.cutoff(zip(trials["number"], finished, strict=True), record.trials)
    counted = np.array([selection.counted(n, last) for n in trials["number"]], dtype=bool)
    trials = trials[counted].copy()  # a list would select columns where it is empty
    other = _over_other_seeds(trials, record.seeds)
    trials.loc[other, "objective"] = np.nan  # never ranked with objectives over the seeds
    done = trials[(trials["status"] == runs.FINISHED) & trials["objective"].notna()]
    best_run, seeds = None, pd.DataFrame(columns=["run_id", "seed", "objective"])
    if not done.empty:
        ranked = done.assign(key=done["objective"] * (1 if record.direction == "minimize"
                                                      else -1))
        best_run = ranked.sort_values(["key", "number"]).iloc[0]["run_id"]
        seeds = frame[(frame[runs.KIND] == runs.SEED)
                     & (frame["mlflow.parentRunId"] == best_run)
                     & (frame["status"] == runs.FINISHED)].copy()
        seeds["seed"] = seeds[runs.SEED_TAG].astype(int)
        seeds = seeds[seeds["seed"].isin(record.seeds)].drop_duplicates("seed", keep="last")
        seeds["objective"] = seeds["run_id"].map(objective)
    tagged = set(trials.get(runs.FIDELITY, pd.Series(dtype=str)).dropna().unique())
    fidelity = tagged or {study.get(runs.FIDELITY)}
    space = {name: od.json_to_distribution(json.dumps(dist))
             for name, dist in record.space.items()}
    digest = str(study[runs.FINGERPRINT])
    label = str(study[runs.METHOD])
    superseded = None
    if study.get(runs.STUDY_STATE) == runs.SUPERSEDED:
        superseded = str(study.get(runs.SUPERSEDED_NOTE) or "replaced by a later version")
        label = f"{label} (superseded {digest[:7]})"
    stale = None if superseded else _stale(study, digest, expected)
    if stale is None and not superseded and other.any():
        stale = (f"{int(other.sum())} complete trials have their objective over other seeds "
                 f"than the sweep's {len(record.seeds)} (left out of the ranking); run the "
                 "sweep to run the seeds they lack")
    method = MethodData(label, fidelity.pop() if len(fidelity) == 1 else "mixed",
                        trials.sort_values("number"), best_run, seeds.sort_values("seed"),
                        space, record.trials, digest, stale, superseded)
    if record.evaluation is not None and best_run is not None:
        best = int(trials.loc[trials["run_id"] == best_run, "number"].iloc[0])
        _held_out(data, method, study, record, best, objective)
    return method


def _over_other_seeds(trials: pd.DataFrame, seeds: list[int]) -> pd.Series:
    """Which complete trial runs have their objective over other seeds than ``seeds`` (tag
    ``runs.OBJECTIVE_SEEDS``; the sweep's seeds changed and the trial was not brought to them
    yet)."""
    wanted = sorted(seeds)
    over = trials.get(runs.OBJECTIVE_SEEDS, pd.Series(index=trials.index, dtype=object))

    def other(text) -> bool:
        return not isinstance(text, str) or sorted(int(s) for s in text.split(",")) != wanted

    return (trials["status"] == runs.FINISHED) & over.map(other).astype(bool)


def held_out_seeds(data: SweepData, record: StudyRecord) -> list[int]:
    """The held-out seeds the sweep uses: all it asks for, or as many as its adaptive rule
    decided."""
    plan = record.evaluation
    count = data.outcome.seeds if data.outcome is not None else plan.first
    return plan.seeds[: min(count, len(plan.seeds))]


def _held_out(data: SweepData, m: MethodData, study: pd.Series, record: StudyRecord,
              best: int, objective: pd.Series) -> None:
    """Show the best trial's held-out evaluation runs in place of its tuning seeds, once every
    held-out seed has run (a diverged one counts as the worst value); else say what is
    missing."""
    frame, wanted = data.runs, held_out_seeds(data, record)
    if runs.EVALUATES not in frame:
        m.missing = "its best trial has no held-out runs yet; run the sweep again"
        return
    runs_of = frame[(frame[runs.KIND] == runs.EVALUATION)
                    & (frame[runs.STUDY_NAME] == study[runs.STUDY_NAME])
                    & (frame[runs.EVALUATES] == str(best))].copy()
    runs_of["seed"] = runs_of[runs.SEED_TAG].astype(int)
    runs_of = runs_of[runs_of["seed"].isin(wanted)]
    done = runs_of[runs_of["status"] == runs.FINISHED].drop_duplicates("seed", keep="last")
    m.failed = int(runs_of.loc[~runs_of["seed"].isin(done["seed"]), "seed"].nunique())
    if len(done) < len(wanted):
        m.missing = (f"{len(done)} of {len(wanted)} held-out seeds of its best trial have run"
                     "; run the sweep again")
        return
    diverged = done.get(runs.DIVERGED, pd.Series(index=done.index, dtype=object)).notna()
    worst = math.inf if record.direction == "minimize" else -math.inf
    done["objective"] = np.where(diverged, worst, done["run_id"].map(objective))
    m.seeds, m.held_out, m.diverged = done.sort_values("seed"), True, int(diverged.sum())


def _stale(study: pd.Series, digest: str, expected: frozenset[str] | None) -> str | None:
    """Why a study's results may not be current: modules it ran whose files have changed
    since (or are gone), or a spec that would run another study now; None when neither."""
    text = runs.joined_tag(study, runs.FINGERPRINT_DOC)
    changed = []
    if text is not None:
        try:
            document, _ = json.JSONDecoder().raw_decode(text)
            changed = fingerprint.recheck(document.get("code", {}))
        except ValueError:
            changed = ["(its recorded fingerprint is unreadable)"]
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more"
                                          if len(changed) > 3 else "")
        return f"code changed since it ran: {shown}"
    if expected is not None and digest not in expected:
        return "the spec (or the code) now asks for another study"
    return None


def curve_on_grid(d: SweepData, run_ids: list[str], metric: str, axis: str):
    """Each run's curve of ``metric`` against ``axis`` interpolated onto a common grid over the
    range every run covers: (grid, runs x points), or (None, None) where a run has none."""
    h = d.history[d.history["run_id"].isin(run_ids)]
    series = []
    for run_id in run_ids:
        y = h[(h["run_id"] == run_id) & (h["key"] == metric)].set_index("step")["value"]
        if y.empty:
            return None, None
        if axis == "step":
            x = y.index.to_numpy(dtype=float)
        else:
            xs = h[(h["run_id"] == run_id) & (h["key"] == axis)].set_index("step")["value"]
            joined = pd.concat([xs.rename("x"), y.rename("y")], axis=1).dropna()
            if joined.empty:
                return None, None
            x, y = joined["x"].to_numpy(), joined["y"]
        series.append((np.maximum.accumulate(x), y.to_numpy(dtype=float)))
    end = min(x[-1] for x, _ in series)
    start = max(x[0] for x, _ in series)
    if not end > start:
        return None, None
    grid = np.linspace(start, end, GRID_POINTS)
    return grid, np.vstack([np.interp(grid, x, y) for x, y in series])


def steps_to_target(d: SweepData, m: MethodData, target: TargetSpec) -> tuple[float, int]:
    """The Kaplan-Meier median first step at which the best trial's seeds reach ``target``
    (a seed that never does censored at its last step: NaN when at most half reach it,
    ``stats_claims.km_median``) and how many never do."""
    if m.seeds.empty:
        return math.nan, 0
    h = d.history[(d.history["key"] == target.metric)]
    reached = []
    for run_id in m.seeds["run_id"]:
        run = h[h["run_id"] == run_id]
        reached.append(stats_claims.first_reach(run["step"], run["value"], target.value,
                                                target.direction))
    return stats_claims.km_median(reached), sum(r.censored for r in reached)


def pooled_scores(sweeps: Iterable[SweepData]) -> dict[str, tuple[np.ndarray, list[str]]]:
    """Per method present in every sweep: its runs' scores normalised per sweep to [0, 1]
    (1 = the best run of any method on that sweep, 0 = the worst) and the sweep of each, the
    strata of the bootstrap. Empty when no method has runs on every sweep."""
    sweeps = list(sweeps)
    common = set.intersection(*({m.label for m in d.methods if not m.seeds.empty}
                                for d in sweeps))
    if not common:
        return {}
    pooled: dict[str, tuple[list, list]] = {label: ([], []) for label in sorted(common)}
    for d in sweeps:
        values = pd.concat([m.seeds["objective"] for m in d.methods if m.label in common])
        low, high = float(values.min()), float(values.max())
        span = (high - low) or 1.0
        for m in d.methods:
            if m.label in common:
                v = m.seeds["objective"].to_numpy(dtype=float)
                score = (v - low) / span if d.direction == "maximize" else (high - v) / span
                pooled[m.label][0].extend(score)
                pooled[m.label][1].extend([d.name] * len(v))
    return {k: (np.asarray(v), s) for k, (v, s) in pooled.items()}
