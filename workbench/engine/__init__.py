"""The sweep engine: one Optuna study per method combination, trials over every seed.

A worker claims a trial (``claims``: the claim protocol and the repair of what a kill left),
runs it (``trial``: it samples the hyperparameters and runs the task once per seed, one MLflow
run each, with a ``monitor`` as the task's ``log``, which reports intermediate values for
pruning at ``pruner.report_points`` steps per seed) and returns the objective aggregated over
seeds. ``studies`` creates the studies (keyed by their fingerprint) and their runs and marks the
superseded ones, ``evaluation`` re-runs each study's best trial on held-out seeds, ``workers``
runs one or several workers, ``status`` says where each study stands. Runs are written in the
layout of ``workbench.runs``.
"""

from workbench.engine.claims import FINISHED, Claims, Heartbeat, failure_stop
from workbench.engine.monitor import Monitor, StopRun, report_steps
from workbench.engine.status import StudyStatus, study_status, sweep_status
from workbench.engine.studies import make_pruner, make_sampler, setup
from workbench.engine.trial import TrialRunner, suggest, unused_knobs
from workbench.engine.workers import (
    Worker,
    quiet_libraries,
    resolve_device,
    run_sweep,
    terminate_gracefully,
)

__all__ = [
    "FINISHED", "Claims", "Heartbeat", "Monitor", "StopRun", "StudyStatus", "TrialRunner",
    "Worker", "failure_stop", "make_pruner", "make_sampler", "quiet_libraries", "report_steps",
    "resolve_device", "run_sweep", "setup", "study_status", "suggest", "sweep_status",
    "terminate_gracefully", "unused_knobs",
]
