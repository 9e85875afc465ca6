"""The sweep engine: one Optuna study per method combination, trials over every seed.

A worker claims a trial (``claims``: the claim protocol and the repair of what a kill left),
runs it (``trial``: it samples the hyperparameters and runs the task once per seed, one MLflow
run each, with a ``monitor`` as the task's ``log``, which reports intermediate values for
pruning at ``pruner.report_points`` steps per seed) and returns the objective aggregated over
seeds. ``studies`` creates the studies (keyed by their fingerprint) and their runs and marks the
superseded ones, ``evaluation`` re-runs each study's best trial on held-out seeds, ``sweep_run``
runs a sweep through a launcher (``launchers``: this process, N processes or Ray, each running
``workers``), ``status`` says where each study stands. Runs are written in the
layout of ``workbench.store.runs``.

Import what you use from its module (``from workbench.engine.sweep_run import run_sweep``):
this package imports nothing, so a command that needs ``status`` alone loads no trial runner,
MLflow or testbed.
"""
