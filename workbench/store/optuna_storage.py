"""Optuna's storage as a sweep worker uses it: reads and writes per trial that do not grow
with the study's trial count.

Optuna's cached RDB storage (``optuna.storages._CachedStorage``, what ``load_study`` wraps an
``RDBStorage`` in) reads the study's unfinished trials, with every param, value and attribute,
each time anyone asks for the trials, and writes each ``trial.report`` in a commit of its
own. A pruner asks for the complete trials at every report point, so a trial with 3 seeds and
10 report points paid 30 such reads and 30 commits. ``WorkerStorage`` changes two things and
nothing else:

- **Intermediate values are kept in memory until the trial ends** and written in one commit
  just before its state (``set_trial_state_values``: complete, pruned or failed, including on
  Ctrl-C and SIGTERM, which fail the trial through it). Every pruner Optuna ships reads the
  intermediate values of the trial it judges (this process's, with the kept values laid over
  what the database holds) and of finished trials (all written); none reads another running
  trial's. So pruning decides as before. What a SIGKILL loses is the kept values of a trial
  that the next claim fails anyway (a failed trial's intermediate values are read by no
  pruner); the Optuna dashboard shows a running trial's curve at its end.
- **Finished trials are read again only when the study has more of them**: a read that asks
  only for finished states (the median pruner's complete trials) first counts the study's
  finished trials with one small query and reuses the cache when the count is the same.
  Finished trials are never removed while a sweep runs, so the answer is the same as
  Optuna's. Reads that include running trials (the samplers') are Optuna's own.

One write Optuna has no call for: **a finished trial's value replaced** (``replace_value``),
when the seeds a sweep asks for change and a trial's objective is recomputed over them
(``workbench.engine.trial_seeds``), so that the sampler's history holds one value per trial,
over the sweep's seeds. The writer bumps a study attribute (``trial_seeds.REVISION``); a worker
that sees it changed forgets its cached finished trials (``forget_finished``) and reads them
again.
"""

from __future__ import annotations

import copy
from collections.abc import Container, Sequence

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.storages._cached_storage import _CachedStorage, _StudyInfo
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import FrozenTrial, TrialState

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


class WorkerStorage(_CachedStorage):
    """Optuna's cached storage over ``backend``, with this process's intermediate values kept
    until their trial ends and finished trials re-read only when there are more of them."""

    def __init__(self, backend: RDBStorage):
        super().__init__(backend)
        self._kept: dict[int, dict[int, float]] = {}  # trial id -> step -> value, unwritten
        self._finished_read: dict[int, int] = {}  # study id -> finished trials in the cache
        self._revisions: dict[int, object] = {}  # study id -> the replaced values last seen

    # ------------------------------------------------------------------ intermediate values

    def set_trial_intermediate_value(self, trial_id: int, step: int,
                                     intermediate_value: float) -> None:
        self._kept.setdefault(trial_id, {})[step] = float(intermediate_value)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        if state.is_finished():
            self.write_kept(trial_id)
        return super().set_trial_state_values(trial_id, state, values)

    def write_kept(self, trial_id: int) -> None:
        """Write the trial's kept intermediate values in one commit (raises Optuna's
        ``UpdateFinishedTrialError`` when another process already ended the trial)."""
        kept = self._kept.pop(trial_id, None)
        if not kept:
            return
        value_model = models.TrialIntermediateValueModel
        with _create_scoped_session(self._backend.scoped_session, True) as session:
            trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
            self._backend.check_trial_is_updatable(trial_id, trial.state)
            stored = {row.step: row for row in session.query(value_model).filter(
                value_model.trial_id == trial_id)}
            for step, value in kept.items():
                number, kind = value_model.intermediate_value_to_stored_repr(value)
                if step in stored:  # as Optuna's own write: the later value replaces it
                    stored[step].intermediate_value = number
                    stored[step].intermediate_value_type = kind
                else:
                    session.add(value_model(trial_id=trial_id, step=step,
                                            intermediate_value=number,
                                            intermediate_value_type=kind))

    # ----------------------------------------------------------------- replaced values

    def replace_value(self, study_id: int, trial_id: int, value: float) -> None:
        """Replace the (single) objective value of finished trial ``trial_id`` in one commit;
        this process's cache then reads the study's trials again."""
        value_model = models.TrialValueModel
        number, kind = value_model.value_to_stored_repr(float(value))
        with _create_scoped_session(self._backend.scoped_session, True) as session:
            row = session.query(value_model).filter(value_model.trial_id == trial_id,
                                                    value_model.objective == 0).one()
            row.value, row.value_type = number, kind
        self.forget_finished(study_id)

    def forget_finished(self, study_id: int, revision: object = None) -> None:
        """Drop the cached trials of ``study_id`` (read again at the next ask); with a
        ``revision`` (the study's ``trial_seeds.REVISION``), only when it is not the one last
        seen."""
        with self._lock:
            if revision is not None:
                if study_id in self._revisions and self._revisions[study_id] == revision:
                    return
                self._revisions[study_id] = revision
            info = self._studies.get(study_id)
            if info is None:
                return
            fresh = _StudyInfo()
            fresh.name, fresh.directions = info.name, info.directions
            fresh.param_distribution = info.param_distribution
            for trial in info.trials.values():
                self._trial_id_to_study_id_and_number.pop(trial._trial_id, None)
                self._study_id_and_number_to_trial_id.pop((study_id, trial.number), None)
            self._studies[study_id] = fresh
            self._finished_read.pop(study_id, None)

    def _with_kept(self, trial: FrozenTrial) -> FrozenTrial:
        kept = self._kept.get(trial._trial_id)
        if not kept:
            return trial
        trial = copy.copy(trial)  # the cache's object stays as the database has it
        trial.intermediate_values = {**trial.intermediate_values, **kept}
        return trial

    # ------------------------------------------------------------------------------ reads

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._with_kept(super().get_trial(trial_id))

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        if states is None or TrialState.RUNNING in states or TrialState.WAITING in states:
            trials = super().get_all_trials(study_id, deepcopy=deepcopy, states=states)
            return [self._with_kept(t) for t in trials] if self._kept else trials
        finished = self._count_finished(study_id)
        if self._finished_read.get(study_id) != finished or study_id not in self._studies:
            self._read_trials_from_remote_storage(study_id)
            self._finished_read[study_id] = finished  # counted before the read: never ahead
        with self._lock:
            found = sorted((t for t in self._studies[study_id].trials.values()
                            if t.state in states), key=lambda t: t.number)
            return copy.deepcopy(found) if deepcopy else found

    def _count_finished(self, study_id: int) -> int:
        table = models.TrialModel.__table__
        with self._backend.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(table).where(
                table.c.study_id == study_id, table.c.state.in_(_FINISHED))).scalar_one()
