"""`workbench ui` and `dashboard`: MLflow's UI and Optuna's dashboard served on a sweep's
store, supervised (the password kept out of the command line, the session stopped
whole on Ctrl-C), with the sweep's saved views printed as links. Each answers only requests
addressed to this machine or to a name allowed (``host_guard``), and listens beyond this
machine only with --expose."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from workbench.cli.host_guard import allowed_hosts, is_loopback
from workbench.cli.usage import UsageError, reachable, redact


def cmd_ui(args) -> int:
    hosts = _bind(args)
    sweep, store = _served_store(args)
    base = f"http://{_bracketed(args.host)}:{args.port}"
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
                   "--port", str(args.port), "--workers", "1", "--no-serve-artifacts",
                   "--allowed-hosts", ",".join(hosts)],
                  password, "the MLflow UI", _artifact_servers(store),
                  ready=(_probe_url(args.host, args.port, "/health"), base))


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
    _bind(args)
    sweep, store = _served_store(args)
    base = f"http://{_bracketed(args.host)}:{args.port}"
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
    allowed = [a for name in args.allowed_host for a in ("--allowed-host", name)]
    return _serve([sys.executable, "-m", "workbench.cli.dashboard_server", storage, "--host",
                   args.host, "--port", str(args.port), *allowed], password,
                  "Optuna's dashboard", ready=(_probe_url(args.host, args.port, "/"), base))


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _bind(args) -> list[str]:
    """The Host headers the server will answer (``host_guard.allowed_hosts``). A bind beyond
    this machine needs --expose (UsageError otherwise), and is said aloud."""
    hosts = allowed_hosts(args.host, args.port, args.allowed_host)
    if is_loopback(args.host):
        return hosts
    if not args.expose:
        raise UsageError(f"--host {args.host} serves every run and study of the store to "
                         "anyone who can reach this machine; add --expose to mean it")
    print(f"warning: --expose: listening on {args.host} port {args.port}: anyone who can reach "
          f"it can read and change every run and study; Host headers answered: "
          f"{', '.join(hosts)} (--allowed-host NAME adds one)", file=sys.stderr)
    return hosts


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


def _probe_url(host: str, port: int, path: str) -> str:
    """Where to ask whether the server answers: its address, or loopback for a wildcard bind
    (a name the host guard answers either way)."""
    address = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    return f"http://{_bracketed(address)}:{port}{path}"


def _say_when_ready(server: subprocess.Popen, probe: str, base: str, name: str) -> None:
    """Print one ``ready:`` line once the server answers ``probe`` (any HTTP status), with
    the seconds it took; nothing if it ends first. Runs in a thread beside ``_serve``."""
    started = time.monotonic()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    while server.poll() is None:
        try:
            opener.open(probe, timeout=2).close()
        except urllib.error.HTTPError:
            pass  # an answer all the same
        except OSError:
            time.sleep(0.25)
            continue
        print(f"ready: {name} answers at {base} ({time.monotonic() - started:.0f} s after "
              "start)", flush=True)
        return


def _serve(command: list[str], password: str | None, name: str,
           environment: dict[str, str] | None = None,
           ready: tuple[str, str] | None = None) -> int:
    """Run a web server (MLflow's UI, Optuna's dashboard) in a session of its own until
    Ctrl-C or SIGTERM (then stop the session whole, its workers too, and exit at once: 0,
    128 + the signal) or until it ends on its own (exit 1, with one line). The database
    password goes in PGPASSWORD: every local user can read a command line. ``ready``:
    (the URL to probe, the address to name) for the line that says it answers."""
    env = {**os.environ, **(environment or {})}
    if password is not None:
        env["PGPASSWORD"] = password
    server = subprocess.Popen(command, env=env, start_new_session=True)
    if ready is not None:
        threading.Thread(target=_say_when_ready, args=(server, *ready, name),
                         daemon=True).start()

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        code = server.wait()
    except (KeyboardInterrupt, SystemExit) as stopped:
        _stop_session(server)
        sys.stdout.flush()
        sys.stderr.flush()
        # now: unloading the 2,000 modules MLflow brings would take seconds more
        os._exit(getattr(stopped, "code", 0))
    _stop_session(server)  # what the server left of its session
    print(f"error: {name} stopped on its own (exit code {code}); see its output above",
          file=sys.stderr)
    return 1


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
    print("  (README.md, \"Opening the UI\", says what each view shows)", flush=True)


def _reported_methods(store, sweep) -> list:
    """Each current study as the report reads it (``report.data``: its best trial and that
    trial's seed runs), none when the store has no finished runs of the sweep yet."""
    from workbench.common.validation import SpecError
    from workbench.report.data import ReportError, SweepRef, read_sweep

    try:
        return read_sweep(SweepRef(sweep.name, store.optuna_url)).methods
    except (ReportError, SpecError):
        return []


def _stop_session(process: subprocess.Popen, grace: float = 1.0) -> None:
    """SIGTERM to every process of ``process``'s session (it leads it), SIGKILL to what is
    left after ``grace`` seconds (a web UI has nothing to finish that a second won't)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            process.poll()  # reap the leader, or it lingers as a zombie of the group
            os.killpg(process.pid, 0)  # ProcessLookupError once every member has exited
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


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


