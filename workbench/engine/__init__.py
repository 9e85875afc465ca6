"""The sweep engine: one Optuna study per method combination, trials over every seed.

A worker claims a trial (``claims``: the claim protocol and the repair of what a kill left),
runs it (``trial``: it samples the hyperparameters and runs the task once per seed, one MLflow
run each, with a ``monitor`` as the task's ``log``, which reports intermediate values for
pruning at ``pruner.report_points`` steps per seed) and returns the objective aggregated over
seeds. ``studies`` creates the studies (keyed by their fingerprint) and their runs and marks the
superseded ones, ``evaluation`` re-runs each study's best trial on held-out seeds, ``workers``
runs one or several workers, ``status`` says where each study stands. Runs are written in the
layout of ``workbench.store.runs``.
"""

import importlib

# name -> the module that defines it; imported on first use, so that `workbench status` (which
# needs ``status`` alone) does not import the trial runner, MLflow or the testbeds
_HOMES = {
    "FINISHED": "claims", "failure_stop": "outcomes",
    "Claims": "claims", "Heartbeat": "claims",
    "Monitor": "monitor", "StopRun": "monitor", "report_steps": "monitor",
    "StudyStatus": "status", "study_status": "status", "sweep_status": "status",
    "make_pruner": "studies", "make_sampler": "studies", "setup": "studies",
    "TrialRunner": "trial", "suggest": "trial", "unused_knobs": "trial",
    "Worker": "workers", "quiet_libraries": "workers", "resolve_device": "workers",
    "run_sweep": "workers", "terminate_gracefully": "workers",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
