"""The Python API for notebooks: a sweep's runs and metrics as pandas DataFrames, read from the
store with a few SQL queries (``workbench.store.results``), on SQLite and PostgreSQL alike.

    >>> from workbench import load_runs, load_metrics
    >>> runs = load_runs("quickstart")                      # one row per seed run
    >>> curves = load_metrics("quickstart", ["train/loss"])  # one row per logged point
    >>> best = runs[runs.best]                               # each method's best trial

Only the sweep's current studies (``include_superseded`` for the others); a study shared with
another sweep brings its runs from that sweep's experiment.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from workbench.store import results, runs, selection
from workbench.store.database import Store

KINDS = (runs.SEED, runs.EVALUATION)  # the runs that train: tuning seeds, held-out seeds
ALL_KINDS = (runs.STUDY, runs.TRIAL, runs.SEED, runs.EVALUATION)
STORAGE_FORMS = "sqlite:///FILE, postgresql://USER@HOST/DB, or None for the default store"
COLUMNS = ["run_id", "kind", "method", "study", "fingerprint", "trial", "seed", "status",
           "best", "start_time", "end_time"]


def load_runs(sweep: str, storage: str | None = None, *, kinds: Sequence[str] = KINDS,
              include_superseded: bool = False) -> pd.DataFrame:
    """One row per run of the sweep's studies of the given kinds (seed runs and held-out
    evaluation runs by default; ``trial`` and ``study`` runs too if asked): ``COLUMNS``
    (``best``: the run belongs to its study's best trial among the trials the sweep counts),
    then each param as ``params.NAME`` (strings, as MLflow stores them), each tag as
    ``tags.NAME`` and each metric's final value as ``metrics.NAME``.

    Bad arguments raise ValueError naming the argument and what it allows; a store or sweep
    that is not there, LookupError."""
    kinds = _checked(sweep, storage, kinds, include_superseded)
    return _load(sweep, storage, kinds, include_superseded)[2]


def _checked(sweep, storage, kinds, include_superseded) -> tuple[str, ...]:
    """The arguments both functions share, checked before the store is opened; ``kinds`` as a
    tuple."""
    from workbench.common.validation import shorten

    if not isinstance(sweep, str) or not sweep:
        raise ValueError(f"sweep: a sweep's name (a string, e.g. 'quickstart'), not "
                         f"{shorten(sweep)}")
    if storage is not None and not isinstance(storage, str):
        raise ValueError(f"storage: {shorten(storage)} ({type(storage).__name__}) is not "
                         f"a store URL; allowed: {STORAGE_FORMS}")
    if storage is not None and not storage.strip():
        raise ValueError(f"storage: empty; allowed: {STORAGE_FORMS}")
    allowed = f"allowed: {', '.join(ALL_KINDS)} (default: {', '.join(KINDS)})"
    if isinstance(kinds, (str, bytes)) or not isinstance(kinds, Iterable):
        example = [kinds] if kinds in ALL_KINDS else list(KINDS)
        raise ValueError(f"kinds: a list of run kinds, e.g. {example!r}, not "
                         f"{shorten(kinds)}; {allowed}")
    kinds = tuple(kinds)
    if not kinds:
        raise ValueError(f"kinds: name at least one run kind; {allowed}")
    for kind in kinds:
        if kind not in ALL_KINDS:
            raise ValueError(f"kinds: {shorten(kind)} is not a run kind; {allowed}")
    if not isinstance(include_superseded, bool):
        raise ValueError(f"include_superseded: True or False, not "
                         f"{shorten(include_superseded)}")
    return kinds


def _load(sweep: str, storage: str | None, kinds: Sequence[str], include_superseded: bool
          ) -> tuple[Store, list[str], pd.DataFrame]:
    """The store, the experiments read and ``load_runs``'s frame."""
    store, frame = _runs(sweep, storage, include_superseded)
    experiments = sorted(frame["experiment"].unique()) if not frame.empty else []
    metrics = results.latest_metrics(store, experiments).set_index("run_id")
    best = _best_trials(frame, metrics.get("objective", pd.Series(dtype=float)))
    shown = frame[frame[runs.KIND].isin(list(kinds))].copy()
    # the trial a run belongs to: the one it evaluates (held out), else its own
    trial = shown.get(runs.EVALUATES, pd.Series(index=shown.index)).fillna(
        shown.get("optuna.trial_number"))
    out = pd.DataFrame({
        "run_id": shown["run_id"], "kind": shown[runs.KIND], "method": shown[runs.METHOD],
        "study": shown[runs.STUDY_NAME], "fingerprint": shown[runs.FINGERPRINT],
        "trial": pd.to_numeric(trial, errors="coerce").astype("Int64"),
        "seed": pd.to_numeric(shown.get(runs.SEED_TAG), errors="coerce").astype("Int64"),
        "status": shown["status"],
        "best": [(study, str(t)) in best for study, t in zip(shown[runs.STUDY_NAME], trial,
                                                             strict=True)],
        "start_time": pd.to_datetime(shown["start_time"], unit="ms"),
        "end_time": pd.to_datetime(shown["end_time"], unit="ms")})
    tags = shown.drop(columns=["status", "run_name", "start_time", "end_time", "experiment"])
    tags = tags.set_index("run_id").add_prefix("tags.")
    params = results.params(store, experiments).set_index("run_id").add_prefix("params.")
    out = (out.join(params, on="run_id").join(metrics.add_prefix("metrics."), on="run_id")
           .join(tags, on="run_id"))
    return store, experiments, out.sort_values(["method", "kind", "trial", "seed"],
                                               ignore_index=True)


def load_metrics(sweep: str, keys: Sequence[str], storage: str | None = None, *,
                 kinds: Sequence[str] = KINDS, include_superseded: bool = False
                 ) -> pd.DataFrame:
    """Every logged point of the metrics ``keys`` of the sweep's runs (as ``load_runs``
    chooses them), long: run_id, method, trial, seed, kind, best, key, step, value.

    Bad arguments raise ValueError as ``load_runs``'s do. A key that none of those runs logged
    and that is no name of the metric vocabulary (``workbench.common.metrics``: a typo, or a
    metric of other kinds of run, e.g. a trial run's ``objective``) raises LookupError naming
    the metrics they did log; a vocabulary name they did not log has no rows (a sweep whose
    methods do not log it: several sweeps are often asked for the same curves), and so has
    every key while the sweep has no such runs yet."""
    from workbench.common import metrics
    from workbench.common.validation import shorten

    kinds = _checked(sweep, storage, kinds, include_superseded)
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        example = [keys] if isinstance(keys, str) else ["train/loss"]
        raise ValueError(f"keys: a list of metric names, e.g. {example!r}, not "
                         f"{shorten(keys)}")
    keys = list(keys)
    bad = [k for k in keys if not isinstance(k, str) or not k]
    if not keys or bad:
        raise ValueError("keys: a non-empty list of metric names (strings, e.g. 'train/loss')"
                         + (f"; {shorten(bad[0])} is not one" if bad else ""))
    store, experiments, index = _load(sweep, storage, kinds, include_superseded)
    history = results.metric_history(store, experiments, keys)
    history["run_id"] = history["run_id"].astype(str)
    history["key"] = history["key"].astype(str)
    columns = ["run_id", "method", "trial", "seed", "kind", "best"]
    out = index[columns].merge(history, on="run_id")
    found = set(out["key"])
    unknown = [k for k in dict.fromkeys(keys) if k not in found and not metrics.is_known(k)]
    if unknown and not index.empty:
        logged = sorted(c.removeprefix("metrics.") for c in index.columns
                        if c.startswith("metrics.") and index[c].notna().any())
        raise LookupError(f"keys: no {' or '.join(kinds)} run of sweep {sweep!r} logged "
                          f"{', '.join(map(repr, unknown))} (nor is it a name of the metric "
                          f"vocabulary); logged: {', '.join(logged) or 'nothing'}")
    return out.sort_values(["method", "trial", "seed", "key", "step"], ignore_index=True)


def _storage(storage: str | None) -> str:
    from workbench.store.database import default_storage, normalise_storage

    return normalise_storage(storage, "storage", "") if storage else default_storage()


def _runs(sweep: str, storage: str | None, include_superseded: bool
          ) -> tuple[Store, pd.DataFrame]:
    """The store and every run of the sweep's (current) studies, with its experiment."""
    from workbench.store.database import StoreError

    store = Store.from_url(_storage(storage))
    if not store.exists():
        raise LookupError(f"no store at {_storage(storage)}; run `workbench sweep` first")
    try:  # a file that is no store, half a store, one this user cannot read: said, not a
        store.check()  # sqlite3 or SQLAlchemy error from deep inside
    except StoreError as err:
        raise ValueError(f"storage: {err}") from None
    experiment = results.experiment_id(store, sweep)
    if experiment is None:
        raise LookupError(f"the store has no sweep {sweep!r}")
    frame = results.runs(store, experiment).assign(experiment=experiment)
    if runs.KIND not in frame:
        return store, frame.iloc[0:0]
    studies = frame[frame[runs.KIND] == runs.STUDY]
    if not include_superseded and runs.STUDY_STATE in studies:
        studies = studies[studies[runs.STUDY_STATE] != runs.SUPERSEDED]
    homes = (set(studies[runs.HOME_EXPERIMENT].dropna()) if runs.HOME_EXPERIMENT in studies
             else set()) - {experiment}
    if homes:
        frame = pd.concat([frame] + [results.runs(store, home).assign(experiment=home)
                                     for home in sorted(homes)], ignore_index=True)
    names = set(studies[runs.STUDY_NAME])
    wanted = frame[runs.STUDY_NAME].isin(names) & (
        (frame[runs.KIND] != runs.STUDY) | frame["run_id"].isin(studies["run_id"]))
    frame = frame[wanted].copy()
    # a shared study's runs carry the sweep that ran them; show this sweep's label for all
    labels = dict(zip(studies[runs.STUDY_NAME], studies[runs.METHOD], strict=True))
    frame[runs.METHOD] = frame[runs.STUDY_NAME].map(labels)
    return store, frame


def _best_trials(frame: pd.DataFrame, objective: pd.Series) -> set[tuple[str, str]]:
    """(study, trial number) of each study's best complete trial among those the sweep
    counts, by the objective its trial run holds."""
    from workbench.store.study_record import StudyRecord

    best = set()
    trials = frame[frame[runs.KIND] == runs.TRIAL]
    if trials.empty:
        return best
    studies = frame[frame[runs.KIND] == runs.STUDY]
    for _, study in studies.iterrows():
        record = StudyRecord.from_tags(study)
        if record is None:
            continue
        mine = trials[trials[runs.STUDY_NAME] == study[runs.STUDY_NAME]]
        numbers = mine["optuna.trial_number"].astype(int)
        finished = mine["status"].isin([runs.FINISHED, runs.KILLED])
        last = selection.cutoff(zip(numbers, finished, strict=True), record.trials)
        counted = mine[[selection.counted(n, last) for n in numbers]]
        done = counted[counted["status"] == runs.FINISHED]
        values = done["run_id"].map(objective).astype(float)
        done = done[values.notna()]
        if done.empty:
            continue
        sign = 1.0 if record.direction == "minimize" else -1.0
        pick = (done.assign(v=sign * values[values.notna()],
                            n=done["optuna.trial_number"].astype(int))
                .sort_values(["v", "n"]).iloc[0])
        best.add((study[runs.STUDY_NAME], str(pick["optuna.trial_number"])))
    return best
