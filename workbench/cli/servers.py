"""`workbench ui` and `dashboard`: MLflow's UI and Optuna's dashboard served on a sweep's
store, supervised (the password kept out of the command line, the session stopped
whole on Ctrl-C), with the sweep's saved views printed as links."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from workbench.cli.usage import reachable, redact


def cmd_ui(args) -> int:
    sweep, store = _served_store(args)
    base = f"http://{args.host}:{args.port}"
    print(f"MLflow UI on {redact(store.mlflow_url)}: {base}  (Ctrl-C stops it)", flush=True)
    if sweep is not None:
        print_views(store, sweep, base)
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
        from workbench.store import optuna_tables

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
    from workbench.common.validation import SpecError
    from workbench.spec import sweep as spec
    from workbench.store.database import Store, default_storage, normalise_storage

    sweep = spec.load(args.spec, storage=args.storage) if args.spec else None
    url = sweep.storage if sweep else (args.storage or default_storage())
    url = normalise_storage(url, "--storage", "")
    reachable(url)
    store = Store.from_url(url)
    if not store.exists():
        raise SpecError("--storage", "", f"no store at {redact(url)}; run `workbench "
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


def print_views(store, sweep, base: str) -> None:
    """Save the sweep's views on its experiment (``workbench.store.ui_views``) and print their
    links, with the seed runs of each study's best trial."""
    from workbench.store import results, ui_views

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
    from workbench.common.validation import SpecError
    from workbench.report.data import ReportError, SweepRef, read_sweep

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


