"""Where each study of a sweep stands: trials per state, the best value, why it stopped."""

from __future__ import annotations

from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from workbench.engine.claims import failure_stop
from workbench.spec import Sweep


@dataclass
class StudyStatus:
    """One study's trials per state, its best value and parameters, and its failures."""

    name: str
    label: str
    total: int
    complete: int
    pruned: int
    failed: int
    running: int
    best_value: float | None
    best_params: dict
    fail_reasons: list[str] = field(default_factory=list)
    stop_reason: str | None = None  # why it claims no more trials though short

    @property
    def finished(self) -> int:
        return self.complete + self.pruned

    def shortfall(self) -> str | None:
        """Why the study ended with fewer finished trials than it asks for, once no trial of
        it is running; None when it is complete or another process still runs some."""
        if self.finished >= self.total or self.running:
            return None
        return self.stop_reason or "no trial left to claim; run the same command again"


def study_status(sweep: Sweep, storage) -> list[StudyStatus]:
    """Trials per state and the best value of every study (missing studies count as empty)."""
    summaries = optuna.get_all_study_summaries(storage, include_best_trial=False)
    existing = {s.study_name for s in summaries}
    out = []
    for plan in sweep.studies:
        counts = dict.fromkeys(TrialState, 0)
        best_value, best_params, reasons, stop = None, {}, [], None
        if plan.name in existing:
            study = optuna.load_study(study_name=plan.name, storage=storage)
            trials = study.get_trials(deepcopy=False)
            for t in trials:
                counts[t.state] += 1
                if t.state == TrialState.FAIL:
                    reasons.append(t.user_attrs.get("fail_reason")
                                   or t.user_attrs.get("interrupted", "worker died"))
            if counts[TrialState.COMPLETE]:
                best = study.best_trial
                best_value, best_params = best.value, best.params
            if counts[TrialState.COMPLETE] + counts[TrialState.PRUNED] < plan.n_trials:
                stop = failure_stop(trials, sweep.spec.max_failed_trials)
        out.append(StudyStatus(plan.name, plan.label, plan.n_trials, counts[TrialState.COMPLETE],
                               counts[TrialState.PRUNED], counts[TrialState.FAIL],
                               counts[TrialState.RUNNING], best_value, best_params, reasons,
                               stop))
    return out
