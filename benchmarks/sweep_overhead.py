"""What the sweep engine costs around the training steps, against the steps alone and against
a hand-written Optuna + MLflow script of the same trials.

    .venv/bin/python benchmarks/sweep_overhead.py                 # the quickstart as shipped
    .venv/bin/python benchmarks/sweep_overhead.py --trials 100 --methods constant --skip-b

In one run, each in a fresh child process on a fresh SQLite store (CPU seconds of the child,
user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``, and wall seconds):

1. **the sweep**: ``workbench sweep SPEC --quiet``, one worker, as README's first command runs
   it (the quickstart: 3 studies x 10 trials x 3 seeds x 200 steps, TPE, median pruner);
2. **the floor**: the same task code's training steps run bare in one process: every seed run
   the sweep ran, with the hyperparameters its trial drew, each stopped at the step where the
   sweep's run stopped (a pruned run at its pruning point), no Optuna, no MLflow: only
   ``Task.run`` with the registered methods and a ``log`` that keeps nothing, or, for a study
   that ran its seeds on a seed axis, one ``Task.run_seeds`` per trial
   (``--floor PLAN`` runs this part);
3. **(b)**: ``benchmarks/handwritten_optuna_mlflow.py``, a hand-written Optuna + MLflow
   script of the same trials (enqueued with the sweep's hyperparameters), the same seeds and
   the same steps: intermediate values reported to the same median pruner at the same points,
   each seed run logged to MLflow on SQLite with its metrics in ``log_batch`` calls.

It prints each one's CPU and wall seconds, the sweep's ratios to the floor and to (b), and
the overhead per trial ((sweep - floor) CPU seconds / trials, the fixed start included). Then,
trial by trial, what the sweep spent around each trial's training: the wall seconds from one
trial's start (Optuna's ``datetime_start``, set when it is claimed) to the next one's, less
the floor's wall seconds for the same trial; their mean over the first and the last ten trials
of each study shows whether the bookkeeping per trial grows with the trials already run.

Targets (issue 18): the sweep within 1.3x of the floor, at least 2x less CPU than (b), and at
100 trials per study an overhead per trial no larger than at 10 (``--trials 100``: the first
ten trials against the last ten).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "sweeps" / "quickstart.yaml"


def timed(command: list[str], **kwargs) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one child process run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=kwargs.pop("cwd", ROOT), **kwargs)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def write_spec(folder: Path, trials: int | None, methods: list[str] | None) -> Path:
    import yaml

    spec = yaml.safe_load(SPEC.read_text())
    if trials is not None:
        spec["trials"] = trials
    if methods:
        for slot, choices in spec["methods"].items():
            spec["methods"][slot] = [c for c in choices
                                     if (c if isinstance(c, str) else c.get("label", c["name"]))
                                     in methods]
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def plan_of(spec_path: Path, storage: str) -> dict:
    """What the sweep ran, read from its store: per study, per trial in order, its drawn
    hyperparameters, and per seed its methods' resolved params and the step its run stopped
    at (None: it ran its whole budget)."""
    import optuna
    import sqlalchemy as sa

    from workbench.engine.trial import build_methods
    from workbench.spec import sweep as spec
    from workbench.store import runs
    from workbench.store.database import Store

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sweep = spec.load(str(spec_path), storage=storage)
    store = Store.from_url(storage)
    engine = sa.create_engine(store.mlflow_url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT r.status, s.value, n.value, d.value, "
            "(SELECT MAX(m.step) FROM metrics m WHERE m.run_uuid = r.run_uuid AND m.key = :metric)"
            " FROM runs r JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = :kind "
            "AND k.value = :seed_kind "
            "JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = :study "
            "JOIN tags n ON n.run_uuid = r.run_uuid AND n.key = 'optuna.trial_number' "
            "JOIN tags d ON d.run_uuid = r.run_uuid AND d.key = :seed_tag"),
            {"metric": sweep.metric, "kind": runs.KIND, "seed_kind": runs.SEED,
             "study": runs.STUDY_NAME, "seed_tag": runs.SEED_TAG}).all()
    stops = {(study, int(number), int(seed)): (status, step)
             for status, study, number, seed, step in rows}
    studies = []
    for plan in sweep.studies:
        study = optuna.load_study(study_name=plan.name, storage=store.optuna_storage())
        trials = []
        ordered = sorted(study.trials, key=lambda t: t.number)
        for trial, after in zip(ordered, [*ordered[1:], None], strict=True):
            methods, _ = build_methods(plan, trial.params)
            end = after.datetime_start if after is not None else trial.datetime_complete
            seeds = []
            for seed in sweep.seeds:
                if (plan.name, trial.number, seed) not in stops:
                    break  # the trial stopped at an earlier seed
                status, step = stops[(plan.name, trial.number, seed)]
                seeds.append({"seed": seed,
                              "stop_at": step if status == runs.STATUS["pruned"] else None})
            trials.append({"number": trial.number, "params": trial.params, "seeds": seeds,
                           "span": (end - trial.datetime_start).total_seconds(),
                           "methods": {slot: {"family": m.family, "name": m.name,
                                              "params": m.params}
                                       for slot, m in methods.items()}})
        studies.append({"name": plan.name, "label": plan.label, "trials": trials,
                        "vectorised": plan.vectorised,
                        "space": {k: optuna.distributions.distribution_to_json(d)
                                  for k, d in plan.search_space().items()}})
    spec_ = sweep.spec
    return {"task": sweep.task.name, "task_params": sweep.task_params.model_dump(mode="json"),
            "budget": spec_.budget.model_dump(mode="json"), "metric": sweep.metric,
            "direction": sweep.direction, "seeds": sweep.seeds,
            "sampler": {"seed": spec_.sampler.seed, "startup_trials": spec_.sampler.startup_trials},
            "pruner": {"startup_trials": spec_.pruner.startup_trials,
                       "warmup_steps": spec_.pruner.warmup_steps,
                       "report_points": spec_.pruner.report_points},
            "studies": studies}


class Stop(Exception):
    """Ends a seed run at the step where the sweep's run stopped."""


def together(task_cls, params, budget, trial) -> int:
    """A vectorised trial's seed runs as the sweep ran them: one ``Task.run_seeds``, stopped
    where its seeds stopped (a pruned trial stops them all at one step)."""
    import torch

    from workbench import registry
    from workbench.common import seeds

    methods = {slot: registry.get(m["family"], m["name"])(**m["params"])
               for slot, m in trial["methods"].items()}
    stops = [entry["stop_at"] for entry in trial["seeds"]]
    stop_at = None if any(s is None for s in stops) else max(stops)

    def log(step, per_seed):
        if stop_at is not None and step >= stop_at:
            raise Stop

    torch.manual_seed(seeds.int_seed(trial["seeds"][0]["seed"], "global"))
    try:
        task_cls().run_seeds(params, methods, seeds=[e["seed"] for e in trial["seeds"]],
                             device=torch.device("cpu"), budget=budget, log=log)
    except Stop:
        pass
    return len(trial["seeds"])


def floor(plan_path: str) -> None:
    """The training steps alone: every seed run of the plan, bare (no Optuna, no MLflow);
    each trial's wall seconds go into the plan file as ``floor``."""
    import torch

    from workbench import registry
    from workbench.common import seeds
    from workbench.common.budget import Budget
    from workbench.testbeds import get_task

    plan = json.loads(Path(plan_path).read_text())
    torch.set_num_threads(max(1, os.cpu_count() or 1))  # as the sweep's one worker sets it
    task_cls = get_task(plan["task"])
    params = task_cls.Params.model_validate(plan["task_params"])
    budget = Budget.model_validate(plan["budget"])
    runs = 0
    for study in plan["studies"]:
        for trial in study["trials"]:
            started = time.perf_counter()
            if study["vectorised"] and trial["seeds"]:  # the seeds as one computation
                runs += together(task_cls, params, budget, trial)
                trial["floor"] = time.perf_counter() - started
                continue
            for entry in trial["seeds"]:
                methods = {slot: registry.get(m["family"], m["name"])(**m["params"])
                           for slot, m in trial["methods"].items()}
                stop_at = entry["stop_at"]

                def log(step, metrics, stop_at=stop_at):
                    if stop_at is not None and step >= stop_at:
                        raise Stop

                torch.manual_seed(seeds.int_seed(entry["seed"], "global"))
                try:
                    task_cls().run(params, methods, seed=entry["seed"],
                                   device=torch.device("cpu"), budget=budget, log=log)
                except Stop:
                    pass
                runs += 1
            trial["floor"] = time.perf_counter() - started
    Path(plan_path).write_text(json.dumps(plan))
    print(f"floor: {runs} seed runs", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=None, help="trials per study")
    parser.add_argument("--methods", default=None,
                        help="comma-separated labels of the studies to keep (default: all)")
    parser.add_argument("--skip-b", action="store_true", help="no hand-written script")
    parser.add_argument("--floor", metavar="PLAN", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        floor(args.floor)
        return
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env["WORKBENCH_ARTIFACTS"] = str(folder / "artifacts")
        spec_path = write_spec(folder, args.trials, args.methods and args.methods.split(","))
        storage = f"sqlite:///{folder / 'sweep.db'}"
        # the store's schema template and the spec's resolution are cached once per machine
        # (README): a first sweep on another store pays them, not the one measured
        warm = f"sqlite:///{folder / 'warm.db'}"
        subprocess.run([sys.executable, "-m", "workbench", "sweep", str(write_spec(
            folder, 1, args.methods and args.methods.split(","))), "--storage", warm,
            "--quiet"], check=True, cwd=folder, env=env, capture_output=True)
        write_spec(folder, args.trials, args.methods and args.methods.split(","))
        sweep = timed([sys.executable, "-m", "workbench", "sweep", str(spec_path),
                       "--storage", storage, "--quiet"], cwd=folder, env=env,
                      stdout=subprocess.DEVNULL)
        plan = plan_of(spec_path, storage)
        plan_path = folder / "plan.json"
        plan_path.write_text(json.dumps(plan))
        n_trials = sum(len(s["trials"]) for s in plan["studies"])
        n_runs = sum(len(t["seeds"]) for s in plan["studies"] for t in s["trials"])
        bare = timed([sys.executable, __file__, "--floor", str(plan_path)], env=env)
        plan = json.loads(plan_path.read_text())
        rows = [("sweep (workbench sweep --quiet)", sweep), ("floor (training steps alone)", bare)]
        if not args.skip_b:
            script = str(ROOT / "benchmarks" / "handwritten_optuna_mlflow.py")
            subprocess.run([sys.executable, script, "--init", str(folder / "hand")], check=True,
                           env=env, capture_output=True)
            hand = timed([sys.executable, str(ROOT / "benchmarks" /
                                              "handwritten_optuna_mlflow.py"),
                          str(plan_path), str(folder / "hand")], env=env)
            rows.append(("(b) hand-written Optuna + MLflow", hand))
    print(f"{SPEC.name}: {len(plan['studies'])} studies, {n_trials} trials, {n_runs} seed runs "
          f"run (pruned ones stop early), {plan['budget']['steps']} steps each at most; "
          f"{os.cpu_count()} CPUs")
    print(f"{'':34} {'CPU s':>8} {'wall s':>8}")
    for name, (cpu, wall) in rows:
        print(f"{name:34} {cpu:8.1f} {wall:8.1f}")
    print(f"sweep / floor: CPU {sweep[0] / bare[0]:.2f}x, wall {sweep[1] / bare[1]:.2f}x "
          "(target: within 1.3x)")
    if not args.skip_b:
        print(f"(b) / sweep: CPU {hand[0] / sweep[0]:.2f}x, wall {hand[1] / sweep[1]:.2f}x "
              "(target: at least 2x)")
    print(f"overhead per trial: {(sweep[0] - bare[0]) / n_trials:.3f} CPU s, "
          f"{(sweep[1] - bare[1]) / n_trials:.3f} wall s ({n_trials} trials)")
    for study in plan["studies"]:
        around = [t["span"] - t["floor"] for t in study["trials"]]
        parts = [(1, around[:10])]
        if len(around) > 10:
            parts.append((max(11, len(around) - 9), around[-10:][-(len(around) - 10):]))
        shown = ", ".join(f"trials {start}-{start + len(part) - 1}: "
                          f"{1000 * statistics.mean(part):.0f} / "
                          f"{1000 * statistics.median(part):.0f}" for start, part in parts)
        print(f"{study['label']}: around each trial's training (wall ms, mean / median), "
              f"{shown}")


if __name__ == "__main__":
    main()
