"""The ``workbench`` command line.

Bad input (a spec, an argument) ends with one message and exit code 2, before anything is
written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

EXIT_BAD_INPUT = 2
EXIT_SHORT = 3  # `sweep`: a study ended with fewer finished trials than it asks for


class UsageError(Exception):
    """A bad command-line argument."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own exit 2, with our wording
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def _table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    line = "  ".join(c.ljust(widths[c]) for c in columns)
    body = ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join([line, "  ".join("-" * widths[c] for c in columns), *body])


# --------------------------------------------------------------------------------- commands


def cmd_methods(args) -> int:
    from workbench import catalogue, listing
    from workbench.validation import did_you_mean

    details = catalogue.load()["methods"]
    if args.method:  # FAMILY/NAME: one method whole
        found = [d for d in details if d["key"] == args.method]
        if not found:
            family = args.method.partition("/")[0]
            names = [d["name"] for d in details if d["family"] == family]
            if not names:
                raise UsageError(f"{args.method}: unknown family {family!r}; allowed: "
                                 "step_size, batch_size, entropy, advantage (as FAMILY/NAME)")
            name = args.method.partition("/")[2]
            raise UsageError(f"{args.method}: unknown {family} method {name!r}; "
                             f"{did_you_mean(name, names)}allowed: {', '.join(names)}")
        detail = found[0]
        print(json.dumps(detail, indent=1) if args.json else listing.method_text(detail))
        return 0
    rows = [listing.method_summary(d) for d in details
            if args.family is None or d["family"] == args.family]
    if args.json:
        print(json.dumps(rows, indent=1))
    elif not rows:
        print(f"no {args.family} methods are registered yet")
    else:
        print(listing.methods_table(rows))
    return 0


def cmd_new_method(args) -> int:
    from workbench import scaffold

    try:
        if args.plugin:
            folder = Path(args.plugin)
            method_file, test_file = scaffold.write_plugin(args.family, args.name, folder)
            print(scaffold.plugin_next_steps(args.family, args.name, folder, method_file,
                                             test_file))
            return 0
        method_file, test_file = scaffold.write(args.family, args.name, Path(args.root))
    except scaffold.ScaffoldError as err:
        raise UsageError(str(err)) from None
    print(scaffold.next_steps(args.family, args.name, method_file, test_file))
    return 0


def cmd_check(args) -> int:
    from workbench import families, registry

    if args.method:
        if "/" not in args.method:
            raise UsageError(f"{args.method!r}: allowed: FAMILY/NAME, e.g. step_size/polyak")
        family, name = args.method.split("/", 1)
        try:
            targets = {args.method: registry.get(family, name)}
        except registry.RegistryError as err:
            raise UsageError(str(err)) from None
        results = {key: families.check(cls) for key, cls in targets.items()}
    else:
        results = families.check_all()
    failed = 0
    for key, problems in results.items():
        if problems:
            failed += 1
            print(f"FAIL {key}")
            for problem in problems:
                print(f"     {problem}")
        else:
            print(f"ok   {key}: meets the {key.split('/')[0]} contract")
    print(f"{len(results) - failed} of {len(results)} methods meet their family contract")
    return 1 if failed else 0


def cmd_tasks(args) -> int:
    from workbench import catalogue, listing
    from workbench.validation import did_you_mean

    details = catalogue.load()["tasks"]
    if args.task:
        found = [d for d in details if d["name"] == args.task]
        if not found:
            names = [d["name"] for d in details]
            raise UsageError(f"unknown task {args.task!r}; {did_you_mean(args.task, names)}"
                             f"allowed: {', '.join(sorted(names))}")
        print(json.dumps(found[0], indent=1) if args.json else listing.task_text(found[0]))
        return 0
    rows = [listing.task_summary(d) for d in details]
    print(json.dumps(rows, indent=1) if args.json else listing.tasks_table(rows))
    return 0


def cmd_sweep(args) -> int:
    from workbench import spec

    sweep = spec.load(args.spec, storage=args.storage)
    if args.artifact_root is not None:
        sweep = sweep.with_artifact_root(args.artifact_root)
    if args.workers is not None:
        from workbench.engine.limits import check_workers

        check_workers(sweep, args.workers, args.ray is not None
                      or sweep.spec.launcher.name == "ray")
    from workbench import (
        engine,  # after the spec: bad input never pays for MLflow's import
        resolved,
    )
    from workbench.artifacts import ArtifactRootError
    from workbench.progress import SweepProgress

    ray = None
    if args.ray is not None or sweep.spec.launcher.name == "ray":
        from workbench.engine.ray_launcher import RayPlan

        ray = RayPlan.of(sweep, args.ray, args.workers)

    resolved.keep(sweep, args.spec, storage=args.storage)  # for `status` and `report`

    engine.quiet_libraries()

    if ray is None:
        engine.resolve_device(args.device or sweep.spec.device)
    _reachable(sweep.storage)
    for note in sweep.notes:
        print(f"note: {note}", file=sys.stderr)
    engine.terminate_gracefully()
    bar = SweepProgress(sweep, quiet=args.quiet)
    try:
        final = engine.run_sweep(sweep, workers=args.workers or 1, device=args.device,
                                 progress=bar, ray=ray)
    except (ArtifactRootError, _ray_problem()) as err:
        raise UsageError(str(err)) from None
    finally:
        bar.close()
    _print_status(sweep, final)
    short = [s for s in final if s.shortfall()]
    for s in short:
        print(f"short: {s.label}: {s.finished} of {s.total} trials finished: {s.shortfall()}",
              file=sys.stderr)
    return EXIT_SHORT if short else 0


def _ray_problem() -> type[Exception]:
    """The launcher's error class, without importing Ray."""
    from workbench.engine.ray_launcher import RayProblem

    return RayProblem


def cmd_status(args) -> int:
    from workbench import resolved
    from workbench.engine import status
    from workbench.store import Store

    sweep = resolved.load(args.spec, storage=args.storage)  # no torch when kept
    store = Store.from_url(sweep.storage)
    _reachable(sweep.storage)
    if not store.exists():
        print(f"no store at {redact(sweep.storage)} yet: no trial has run", file=sys.stderr)
        statuses = [status.StudyStatus(p.name, p.label, p.n_trials, 0, 0, 0, 0, None, {},
                                       fingerprint=p.fingerprint, state="not started")
                    for p in sweep.studies]
    else:
        statuses = status.sweep_status(sweep, store)
    _print_status(sweep, statuses)
    return 0


def redact(url: str) -> str:
    from workbench.store import redact as hide

    return hide(url)


def _reachable(url: str) -> None:
    """The store must be usable before anything is written (exit 2 otherwise): a server that
    answers; databases absent, or complete at the installed schema revisions."""
    from workbench.store import Store, StoreError

    try:
        Store.from_url(url).check()
    except StoreError as err:
        raise UsageError(str(err)) from None


def _print_status(sweep, statuses) -> None:
    from workbench.fingerprint import SHORT

    rows, stated = [], any(s.state for s in statuses)
    for s in statuses:
        rows.append({"study": s.label, "state": s.state, "fingerprint": s.fingerprint[:SHORT],
                     "done": f"{s.finished}/{s.total}", "pruned": s.pruned,
                     "failed": s.failed, "running": s.running,
                     "best": "—" if s.best_value is None else f"{s.best_value:.6g}",
                     "best params": ", ".join(f"{k}={v:.4g}" if isinstance(v, float)
                                              else f"{k}={v}" for k, v in s.best_params.items())})
    print(f"sweep {sweep.name}: {sweep.metric} ({sweep.direction}) on task {sweep.task_name}, "
          f"{len(sweep.seeds)} seeds, store {redact(sweep.storage)}")
    columns = ["study", "done", "pruned", "failed", "running", "best", "best params"]
    if stated:
        columns[1:1] = ["state", "fingerprint"]
    print(_table(rows, columns))
    for s in statuses:
        if s.note:
            print(f"  {s.label} ({s.state}, {s.fingerprint[:SHORT]}): {s.note}")
        for reason, count in Counter(s.fail_reasons).most_common():
            print(f"  {s.label}: {count} failed trial(s): {reason}")
        if s.stop_reason:
            print(f"  {s.label}: {s.stop_reason}")


def _parse_value(text: str):
    """A command-line value as YAML reads it, the string itself where YAML cannot; YAML that
    nests or expands too far, or repeats a key, is an error."""
    from workbench import yamlsafe
    from workbench.validation import shorten

    try:
        return yamlsafe.load(text)
    except yamlsafe.Refused as err:
        raise UsageError(f"the value {shorten(text)}: {err}") from None
    except (yaml.YAMLError, ValueError, TypeError, LookupError, AttributeError, OverflowError):
        return text  # not a YAML scalar: keep the string (and let validation say why)


def cmd_run(args) -> int:
    import torch

    from workbench import engine, registry, seeds, spec
    from workbench.testbeds import Budget, get_task

    source = "workbench run"
    try:
        task = get_task(args.task)
    except LookupError as err:
        raise spec.SpecError(source, "TASK", str(err)) from None
    chosen, method_values, task_values = {}, {}, {}
    for item in args.assignments:
        if "=" not in item:
            raise spec.SpecError(source, item, "expected SLOT=METHOD, SLOT.PARAM=VALUE or "
                                 "PARAM=VALUE")
        key, value = item.split("=", 1)
        is_method = key in task.slots and value in registry.available(key)
        if key in task.slots and (is_method or key not in task.Params.model_fields):
            if key in chosen:  # a slot; `batch_size=64` names the task's parameter
                raise spec.SpecError(source, key, f"two methods for one slot: {chosen[key]} "
                                                  f"and {value}")
            chosen[key] = value
        elif "." in key and key.split(".", 1)[0] in task.slots:
            slot, name = key.split(".", 1)
            method_values.setdefault(slot, {})[name] = _parse_value(value)
        else:
            task_values[key] = _parse_value(value)
    if not chosen:  # every slot takes the task's default: name them, a spec must name one
        chosen = {slot: task.default_methods[slot] for slot in task.slots
                  if slot in task.default_methods}
    missing = [s for s in task.slots if s not in chosen and s not in task.default_methods]
    if missing:
        raise spec.SpecError(source, missing[0], f"name a method: {missing[0]}=NAME; allowed: "
                             + ", ".join(spec.fitting_methods(task, missing[0])))
    if not 0 <= args.seed <= spec.MAX_SEED:
        raise spec.SpecError(source, "--seed", f"allowed: an integer in [0, {spec.MAX_SEED}]")
    document = {"task": {"name": args.task, "params": task_values},
                "methods": {slot: [{"name": name, "fixed": method_values.get(slot, {})}]
                            for slot, name in chosen.items()},
                "seeds": [args.seed], "trials": 1, "budget": run_budget(args)}
    try:
        sweep = spec.check(document, source)
    except spec.SpecError as err:  # in the words the user typed, not the spec's key paths
        problems = [(_as_typed(path, chosen), message) for path, message in err.problems]
        raise spec.SpecError(source, *problems[0], more=problems[1:]) from None
    methods = {m.slot: m.cls(**m.fixed) for m in sweep.studies[0].methods}
    device = engine.resolve_device(args.device)
    torch.manual_seed(seeds.int_seed(args.seed, "global"))  # as the engine does
    watch = _RunWatch(sweep.metric, sweep.direction)
    started = time.perf_counter()
    result = task().run(sweep.task_params, methods, seed=args.seed, device=device,
                        budget=Budget.model_validate(sweep.spec.budget.model_dump()), log=watch)
    result["elapsed_seconds"] = time.perf_counter() - started
    if watch.diverged:  # explosive growth the loop did not call divergence
        result["diverged"], result["diverged_because"] = True, watch.diverged
    if args.json:
        print(json.dumps({**result, "used": watch.used}, default=float))
        return 0
    print(f"task {task.name}, seed {args.seed}, device {device}: "
          + ", ".join(f"{slot}={m!r}" for slot, m in methods.items()))
    if watch.used:  # what the slots' methods chose, e.g. the batch size ``size=0`` stands for
        print("  used at the first step: " + ", ".join(
            f"{key}={value:.6g}" for key, value in watch.used.items()))
    for key, value in result.items():
        shown = f"{value:.10g}" if isinstance(value, float) and math.isfinite(value) else value
        print(f"  {key:<22} {shown}")
    return 0


def run_budget(args) -> dict:
    """``run``'s budget as a spec's: ``--steps`` (100 when no limit is given; no step limit
    beyond the largest a budget takes when only ``--samples`` or ``--wall-seconds`` is),
    ``--samples`` (environment steps or samples, as the task counts them) and
    ``--wall-seconds``; the run stops at whichever comes first."""
    from workbench.budget import MAX_STEPS

    limited = args.samples is not None or args.wall_seconds is not None
    steps = args.steps if args.steps is not None else (MAX_STEPS if limited else 100)
    budget = {"steps": steps}
    if args.samples is not None:
        budget["samples"] = args.samples
    if args.wall_seconds is not None:
        budget["wall_seconds"] = args.wall_seconds
    return budget


class _RunWatch:
    """``run``'s log function: the values the slots used at the first step (``batch/*``,
    ``method/*`` metrics) and whether the objective diverged by the engine's rule
    (``workbench.objective.Divergence``)."""

    def __init__(self, metric: str, direction: str):
        from workbench.objective import Divergence

        self.metric, self.rule = metric, Divergence(metric, direction)
        self.used: dict[str, float] = {}
        self.diverged: str | None = None

    def __call__(self, step: int, metrics) -> None:
        if not self.used:
            self.used = {k: float(v) for k, v in metrics.items()
                         if k.startswith(("batch/", "method/")) and math.isfinite(float(v))}
        if self.metric in metrics and self.diverged is None:
            why = self.rule.check(metrics[self.metric])
            self.diverged = f"{why}, step {step}" if why else None


def _as_typed(path: str, chosen: dict) -> str:
    """A spec key path as `workbench run` takes it: ``methods.step_size[0].fixed.lr`` ->
    ``step_size.lr``, ``methods.step_size[0]`` -> ``step_size=...``, ``task.params.dim`` ->
    ``dim``, ``budget.steps`` -> ``--steps``, ``seeds`` -> ``--seed``."""
    if match := re.fullmatch(r"methods\.(\w+)\[0\]\.fixed\.(.+)", path):
        return f"{match[1]}.{match[2]}"
    if match := re.fullmatch(r"methods\.(\w+)(\[0\](\.name)?)?", path):
        return f"{match[1]}={chosen.get(match[1], 'METHOD')}"
    if path.startswith("task.params."):
        return path.removeprefix("task.params.")
    return {"budget.steps": "--steps", "budget.samples": "--samples",
            "budget.wall_seconds": "--wall-seconds", "seeds": "--seed",
            "task.name": "TASK"}.get(path, path)


def cmd_ui(args) -> int:
    sweep, store = _served_store(args)
    base = f"http://{args.host}:{args.port}"
    print(f"MLflow UI on {redact(store.mlflow_url)}: {base}  (Ctrl-C stops it)", flush=True)
    if sweep is not None:
        _print_views(store, sweep, base)
    else:
        print("name the sweep's spec (workbench ui SPEC) for links to its runs, trials, studies "
              "and charts", flush=True)
    backend, password = _password_apart(store.mlflow_url)
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    # --no-serve-artifacts: each run's artifacts are read where its artifact URI says (a local
    # folder, an object store, an artifact server's http:// URL), never from a folder of the
    # UI's own (a serving UI takes every proxy URL for one of its own)
    return _serve([mlflow, "ui", "--backend-store-uri", backend, "--host", args.host,
                   "--port", str(args.port), "--workers", "1", "--no-serve-artifacts"],
                  password, args.host, _artifact_servers(store))


def _artifact_servers(store) -> dict[str, str]:
    """The environment MLflow's UI needs to read artifacts from an artifact server
    (``artifacts``: an ``http(s)://`` root) when an experiment of the store has one: MLflow
    refuses URIs that name another host unless told to allow them."""
    from mlflow.entities import ViewType

    locations = [e.artifact_location for e in store.mlflow_client().search_experiments(
        view_type=ViewType.ALL, max_results=50_000)]
    if any(location.startswith(("http://", "https://")) for location in locations):
        return {"MLFLOW_ALLOWED_HOST_ADDRESSED_ARTIFACT_SCHEMES": "http,https"}
    return {}


def cmd_dashboard(args) -> int:
    sweep, store = _served_store(args)
    base = f"http://{args.host}:{args.port}"
    print(f"Optuna dashboard on {redact(store.optuna_url)}: {base}  (Ctrl-C stops it)",
          flush=True)
    if sweep is not None:
        from workbench import optuna_tables

        ids = optuna_tables.study_ids(store.optuna_url)
        for plan in sweep.studies:
            where = (f"{base}/dashboard/studies/{ids[plan.name]}" if plan.name in ids
                     else "not started: `workbench sweep` runs it")
            print(f"  {sweep.title(plan)} ({plan.name}): {where}")
        sys.stdout.flush()
    storage, password = _password_apart(store.optuna_url)
    dashboard = shutil.which("optuna-dashboard") or str(
        Path(sys.executable).with_name("optuna-dashboard"))
    return _serve([dashboard, storage, "--host", args.host, "--port", str(args.port)],
                  password, args.host)


def _served_store(args):
    """(the spec's sweep or None, the store ``workbench ui`` or ``dashboard`` opens)."""
    from workbench import spec
    from workbench.store import Store

    sweep = spec.load(args.spec, storage=args.storage) if args.spec else None
    url = sweep.storage if sweep else (args.storage or spec.default_storage())
    url = spec.normalise_storage(url, "--storage", "")
    _reachable(url)
    store = Store.from_url(url)
    if not store.exists():
        raise spec.SpecError("--storage", "", f"no store at {redact(url)}; run `workbench "
                                              "sweep` first")
    return sweep, store


def _serve(command: list[str], password: str | None, host: str,
           environment: dict[str, str] | None = None) -> int:
    """Run a web server (MLflow's UI, Optuna's dashboard) until it ends, Ctrl-C or SIGTERM:
    in a session of its own, stopped whole (its workers too) whenever this process stops. The
    database password goes in PGPASSWORD: every local user can read a command line."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {host}: anyone who can reach it can read and change "
              "every run", file=sys.stderr)
    env = {**os.environ, **(environment or {})}
    if password is not None:
        env["PGPASSWORD"] = password
    server = subprocess.Popen(command, env=env, start_new_session=True)

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        _stop_session(server)


def _print_views(store, sweep, base: str) -> None:
    """Save the sweep's views on its experiment (``workbench.ui_views``) and print their links,
    with the seed runs of each study's best trial."""
    from workbench import results, ui_views

    experiment = results.experiment_id(store, sweep.name)
    if experiment is None:
        print(f"{sweep.name} has no runs yet: `workbench sweep` first", flush=True)
        return
    table = results.runs(store, experiment)
    final = results.latest_metrics(store, experiment)
    views = ui_views.views(sweep, ui_views.log_scale_metrics(sweep, table, final),
                           ui_views.best_seed_runs(_reported_methods(store, sweep)))
    from mlflow import MlflowClient

    ui_views.save(MlflowClient(store.mlflow_url), experiment, views)
    width = max(len(view.label) for view in views)
    for view in views:
        print(f"  {view.label:<{width}}  {view.url(base, experiment)}")
    best = ui_views.best_trials(sweep, table, final)
    for title, trial_run in best.items():
        print(f"  seeds of {title}'s best trial: {ui_views.seeds_url(base, experiment, trial_run)}")
    print("  (README.md, \"The MLflow UI\", says what each view shows)", flush=True)


def _reported_methods(store, sweep) -> list:
    """Each current study as the report reads it (``report.data``: its best trial and that
    trial's seed runs), none when the store has no finished runs of the sweep yet."""
    from workbench.report.data import ReportError, SweepRef, read_sweep
    from workbench.spec import SpecError

    try:
        return read_sweep(SweepRef(sweep.name, store.optuna_url)).methods
    except (ReportError, SpecError):
        return []


def _stop_session(process: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to every process of ``process``'s session (it leads it), SIGKILL to what is
    left after ``grace`` seconds."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            process.poll()
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def _password_apart(url: str) -> tuple[str, str | None]:
    """(the URL without its password, in the user part or a ``password`` query parameter;
    the password or None). libpq reads the password from PGPASSWORD instead."""
    from sqlalchemy.engine import URL, make_url

    if url.startswith("sqlite:"):
        return url, None
    parsed = make_url(url)
    password = parsed.password
    if password is None and "password" in parsed.query:
        password = parsed.query["password"]
        password = password[-1] if isinstance(password, tuple) else password
    bare = URL.create(parsed.drivername, parsed.username, None, parsed.host, parsed.port,
                      parsed.database, parsed.query).difference_update_query(["password"])
    return bare.render_as_string(hide_password=False), password


def cmd_report(args) -> int:
    from workbench import report, spec
    from workbench.validation import shorten

    if (args.spec is None) == (args.sweep is None):
        raise UsageError("name either a spec (a sweep or report spec) or, with --sweep NAME, "
                         "a sweep in the store")
    if args.sweep is not None:
        if not re.match(spec.NAME_PATTERN, args.sweep):
            raise UsageError(f"--sweep: {shorten(args.sweep)} is not a sweep name; allowed: a "
                             "letter or digit, then up to 99 of [A-Za-z0-9_.-]")
        url = (spec.normalise_storage(args.storage, "--storage", "") if args.storage
               else spec.default_storage())
        plan = spec.ReportPlan(args.sweep, [], None)
        refs = [report.SweepRef(args.sweep, url, include_superseded=args.include_superseded)]
    else:
        from workbench import resolved

        plan = spec.load_report(args.spec, storage=args.storage, load_sweep=resolved.load)
        # what each spec would run now, on either device kind: a study not among them is stale
        refs = [report.SweepRef(sweep.name, sweep.storage, sweep.any_device(),
                                args.include_superseded) for sweep in plan.sweeps]
    out = Path(args.out) if args.out else Path("reports") / "out" / plan.name
    try:
        report.replaceable(out)
    except report.ReportError as err:
        raise UsageError(f"--out: {err}") from None
    for url in dict.fromkeys(ref.storage for ref in refs):
        _reachable(url)
    try:
        written = report.build(refs, out, title=plan.name, options=plan.options,
                               say=lambda line: print(f"warning: {line}", file=sys.stderr))
    except report.ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{len(written)} files in {out}; open {out / 'index.html'}")
    return 0


def cmd_credit(args) -> int:
    from workbench.credit import plan as credit_plan

    plan = credit_plan.load(args.spec)
    from workbench import engine, report
    from workbench.credit import entry as credit

    device = engine.resolve_device(args.device)
    out = Path(args.out) if args.out else Path("reports") / "out" / plan.name
    try:
        credit.writable(out)
    except report.ReportError as err:
        raise UsageError(f"--out: {err}") from None
    written = credit.run(plan, out, device)
    print(f"{len(written)} files in {out}:")
    for path in written:
        print(f"  {path}")
    return 0


def cmd_reproduce(args) -> int:
    from workbench import reproduce

    chosen = reproduce.plan(args.names)
    if args.list:
        for name, (_folder, claim) in chosen.items():
            print(f"{name}: {' '.join(claim.reference.split())}")
            print(f"  {' '.join(claim.claim.split())}")
        return 0
    from workbench.reproduce import entry

    if args.out is not None and (not args.out.strip() or (Path(args.out).exists()
                                                          and not Path(args.out).is_dir())):
        raise UsageError(f"--out {args.out!r}: allowed: a folder (absent or existing)")
    out = Path(args.out) if args.out else None
    failed = 0
    for name, (folder, claim) in chosen.items():
        command = " ".join(["workbench reproduce", name, *(["--quick"] if args.quick else [])])
        try:
            done = entry.run(name, folder, claim, reproduce.places(name, args.quick, out),
                             args.quick, command, say=lambda line: print(line, file=sys.stderr))
        except RuntimeError as err:  # a sweep ended short: its studies say why
            print(f"error: {err}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: {'holds' if done.passed else 'DOES NOT HOLD'} "
              f"({done.cpu_seconds / 60:.1f} CPU min, {done.wall_seconds / 60:.1f} min); "
              f"results in {done.results}")
        for outcome in done.outcomes:
            print(f"  {'ok  ' if outcome.passed else 'FAIL'} {outcome.says}: {outcome.detail}")
        failed += not done.passed
    return 1 if failed else 0


# ----------------------------------------------------------------------------------- parser


def _server_parser(sub, name: str, help: str, port: int, func) -> None:
    """A command that serves a web page on a sweep's store (``ui``, ``dashboard``)."""
    p = sub.add_parser(name, help=help)
    p.add_argument("spec", nargs="?", help="a sweep spec whose store to open")
    p.add_argument("--storage")
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to listen on (default 127.0.0.1: this machine only)")
    p.set_defaults(func=func)


def build_parser() -> argparse.ArgumentParser:
    from workbench import __version__

    parser = _Parser(prog="workbench", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("methods", help="list registered methods, or show one whole")
    p.add_argument("method", nargs="?", metavar="FAMILY/NAME",
                   help="one method's reference, requirements and every hyperparameter")
    p.add_argument("--family", choices=["step_size", "batch_size", "entropy", "advantage"])
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("new-method", help="write a method file and its test from the "
                                          "family's template")
    p.add_argument("family", choices=["step_size", "batch_size", "entropy", "advantage"])
    p.add_argument("name", help="lower_case_name")
    p.add_argument("--root", default=".", help="the checkout to write into (default: here)")
    p.add_argument("--plugin", metavar="DIR",
                   help="instead: write an installable package in DIR (pyproject with the "
                        "workbench.methods entry point, the method, its test)")
    p.set_defaults(func=cmd_new_method)

    p = sub.add_parser("check", help="run the family contracts on one method or all of them")
    p.add_argument("method", nargs="?", help="FAMILY/NAME (default: every registered method)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("tasks", help="list tasks, or show one's parameters and metrics")
    p.add_argument("task", nargs="?", metavar="NAME",
                   help="one task's slots, metrics and every parameter")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_tasks)

    p = sub.add_parser("sweep", help="run or continue a sweep until every study is complete; "
                                     f"exit code {EXIT_SHORT} when a study ended short (e.g. "
                                     "stopped by max_failed_trials)")
    p.add_argument("spec", help="sweep spec (YAML)")
    p.add_argument("--workers", type=int, help="worker processes (default 1), or Ray workers "
                   "with --ray (default: as many as the cluster holds)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run the workers as Ray tasks on the cluster at ADDRESS (auto, "
                        "HOST:PORT, ray://HOST:PORT; none: a cluster of this machine)")
    p.add_argument("--artifact-root", metavar="URI",
                   help="where every host puts artifacts (overrides the spec): an absolute "
                        "shared path, s3://..., mlflow-artifacts://HOST:PORT")
    p.add_argument("--storage", help="store URL (overrides the spec): sqlite:///FILE or "
                                     "postgresql://USER@HOST/DB")
    p.add_argument("--device", help="auto (default), cpu or cuda")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("run", help="run one configuration once, without tuning")
    p.add_argument("task", help="task name (see `workbench tasks`)")
    p.add_argument("assignments", nargs="*",
                   help="SLOT=METHOD, SLOT.PARAM=VALUE (method) or PARAM=VALUE (task)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, help="budget in steps, or updates on an RL testbed "
                                             "(default 100, or none with --samples or "
                                             "--wall-seconds)")
    p.add_argument("--samples", type=int, help="budget in samples: environment steps on "
                                               "control, training samples elsewhere")
    p.add_argument("--wall-seconds", type=float, help="budget in seconds of training")
    p.add_argument("--device", help="auto (default), cpu or cuda")
    p.add_argument("--json", action="store_true", help="print the final metrics as JSON")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="trials done and best value per study")
    p.add_argument("spec")
    p.add_argument("--storage")
    p.set_defaults(func=cmd_status)

    _server_parser(sub, "dashboard", "Optuna's dashboard on the store's studies, on 127.0.0.1 "
                   "(search spaces, importances, history)", 8080, cmd_dashboard)
    _server_parser(sub, "ui", "the MLflow UI on the store, on 127.0.0.1", 5000, cmd_ui)

    p = sub.add_parser("report", help="rebuild figures and tables from the store")
    p.add_argument("spec", nargs="?",
                   help="a sweep spec, or a report spec naming several sweeps")
    p.add_argument("--sweep", metavar="NAME",
                   help="instead of a spec: the sweep of this name in the store (--storage, "
                        "default ./workbench.db), with the report options it ran with")
    p.add_argument("--storage")
    p.add_argument("--out", help="output folder (default reports/out/SWEEP)")
    p.add_argument("--include-superseded", action="store_true",
                   help="also show the studies that a later version of the sweep replaced")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("credit", help="Monte Carlo ground truth for step-level advantages: "
                                      "every estimator against Q - V on sampled steps of a "
                                      "fixed checkpoint, by G and N (figure, table, provenance)")
    p.add_argument("spec", help="credit spec (YAML), e.g. reports/credit-keydoor.yaml")
    p.add_argument("--out", help="output folder (default reports/out/NAME)")
    p.add_argument("--device", help="auto (default), cpu or cuda")
    p.set_defaults(func=cmd_credit)

    p = sub.add_parser("reproduce", help="rerun the reproductions of the papers' claims "
                                         "(reproductions/NAME): sweeps, report, results, "
                                         "checks; exit 1 when a claim's shape does not hold")
    p.add_argument("names", nargs="*", metavar="NAME", help="reproductions (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="the tiny sizes of each claim.yaml's quick keys (checks the sign and "
                        "shape only; results in reproductions/out/NAME-quick/)")
    p.add_argument("--out", help="put NAME/results and NAME/work (the store, the full "
                                 "reports) here instead")
    p.add_argument("--list", action="store_true", help="list the reproductions and claims")
    p.set_defaults(func=cmd_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    from workbench.validation import SpecError

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "run":  # SLOT=METHOD and PARAM=V may also follow the options
        args.assignments += [e for e in extra if "=" in e and not e.startswith("-")]
        extra = [e for e in extra if "=" not in e or e.startswith("-")]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except (SpecError, UsageError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as err:
        requeued = getattr(err, "requeued", None)  # a sweep's (``engine.Interrupted``)
        said = "" if requeued is None else f": {requeued} trial(s) requeued"
        print(f"interrupted{said}; run the same command again to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
