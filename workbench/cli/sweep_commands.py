"""`workbench sweep`, `status`, `report`, `credit` and `reproduce`: the commands that run
sweeps and read their store back."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

from workbench.cli.usage import EXIT_SHORT, UsageError, reachable, redact, writable_folder


def cmd_sweep(args) -> int:
    from workbench.spec import sweep as spec

    sweep = spec.load(args.spec, storage=args.storage)
    if args.artifact_root is not None:
        sweep = sweep.with_artifact_root(args.artifact_root)
    if args.workers is not None:
        from workbench.engine.limits import check_workers

        check_workers(sweep, args.workers, args.ray is not None
                      or sweep.spec.launcher.name == "ray")
    from workbench.cli.progress import SweepProgress
    from workbench.engine.sweep_run import run_sweep
    from workbench.engine.workers import quiet_libraries, resolve_device, terminate_gracefully
    from workbench.spec import resolved
    from workbench.store.artifacts import ArtifactRootError

    ray = None
    if args.ray is not None or sweep.spec.launcher.name == "ray":
        from workbench.engine.ray_launcher import RayPlan

        ray = RayPlan.of(sweep, args.ray, args.workers)

    resolved.keep(sweep, args.spec, storage=args.storage)  # for `status` and `report`

    quiet_libraries()

    if ray is None:
        resolve_device(args.device or sweep.spec.device)
    reachable(sweep.storage, writing=True)
    for note in sweep.notes:
        print(f"note: {note}", file=sys.stderr)
    terminate_gracefully()
    bar = SweepProgress(sweep, quiet=args.quiet)
    try:
        final = run_sweep(sweep, workers=args.workers or 1, device=args.device,
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
    from workbench.engine import status
    from workbench.spec import resolved
    from workbench.store.database import Store

    sweep = resolved.load(args.spec, storage=args.storage)  # no torch when kept
    store = Store.from_url(sweep.storage)
    reachable(sweep.storage)
    if not store.exists():
        print(f"no store at {redact(sweep.storage)} yet: no trial has run", file=sys.stderr)
        statuses = [status.StudyStatus(p.name, p.label, p.n_trials, 0, 0, 0, 0, None, {},
                                       fingerprint=p.fingerprint, state="not started")
                    for p in sweep.studies]
    else:
        statuses = status.sweep_status(sweep, store)
    _print_status(sweep, statuses)
    return 0


def _table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    line = "  ".join(c.ljust(widths[c]) for c in columns)
    body = ["  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join([line, "  ".join("-" * widths[c] for c in columns), *body])


# --------------------------------------------------------------------------------- commands

def _print_status(sweep, statuses) -> None:
    from workbench.common.fingerprint import SHORT

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


def cmd_report(args) -> int:
    from workbench import report
    from workbench.common.validation import shorten
    from workbench.spec import sweep as spec
    from workbench.spec.plan import ReportPlan
    from workbench.spec.schema import NAME_PATTERN
    from workbench.store.database import default_storage, normalise_storage

    if (args.spec is None) == (args.sweep is None):
        raise UsageError("name either a spec (a sweep or report spec) or, with --sweep NAME, "
                         "a sweep in the store")
    if args.sweep is not None:
        if not re.match(NAME_PATTERN, args.sweep):
            raise UsageError(f"--sweep: {shorten(args.sweep)} is not a sweep name; allowed: a "
                             "letter or digit, then up to 99 of [A-Za-z0-9_.-]")
        url = (normalise_storage(args.storage, "--storage", "") if args.storage
               else default_storage())
        plan = ReportPlan(args.sweep, [], None)
        refs = [report.SweepRef(args.sweep, url, include_superseded=args.include_superseded)]
    else:
        from workbench.spec import resolved

        plan = spec.load_report(args.spec, storage=args.storage, load_sweep=resolved.load)
        # what each spec would run now, on either device kind: a study not among them is stale
        refs = [report.SweepRef(sweep.name, sweep.storage, sweep.any_device(),
                                args.include_superseded) for sweep in plan.sweeps]
    out = Path(args.out) if args.out else Path("reports") / "out" / plan.name
    try:
        report.replaceable(out)
    except report.ReportError as err:
        raise UsageError(f"--out: {err}") from None
    writable_folder(out)
    for url in dict.fromkeys(ref.storage for ref in refs):
        reachable(url)
    try:
        written = report.build(refs, out, title=plan.name, options=plan.options,
                               say=lambda line: print(f"warning: {line}", file=sys.stderr))
    except report.ReportError as err:  # no store, no such sweep, no runs: refused, exit 2
        raise UsageError(str(err)) from None
    print(f"{len(written)} files in {out}; open {out / 'index.html'}")
    return 0


def cmd_credit(args) -> int:
    from workbench.credit import plan as credit_plan

    plan = credit_plan.load(args.spec)
    from workbench import report
    from workbench.credit import entry as credit
    from workbench.engine.workers import resolve_device

    device = resolve_device(args.device)
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
    if args.status:
        return _reproduce_status(chosen)
    from workbench.reproduce import entry

    if args.out is not None and (not args.out.strip() or (Path(args.out).exists()
                                                          and not Path(args.out).is_dir())):
        raise UsageError(f"--out {args.out!r}: allowed: a folder (absent or existing)")
    out = Path(args.out) if args.out else None
    if out is not None:
        writable_folder(out / "NAME")
    failed = 0
    for name, (folder, claim) in chosen.items():
        command = " ".join(["workbench reproduce", name, *(["--quick"] if args.quick else [])])
        places = reproduce.places(name, args.quick, out)
        say = lambda line: print(line, file=sys.stderr)  # noqa: E731
        try:
            done = entry.run(name, folder, claim, places, args.quick, command, say=say)
            if not args.quick:  # the quick form's numbers from the same code, kept beside
                quick = entry.run(name, folder, claim, reproduce.quick_places(places), True,
                                  command + " (its quick form)", say=say)
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
        if args.quick:
            failed += not _same_as_committed(name, folder, claim, done.results, out is None)
        else:
            print(f"  its quick form: {'holds' if quick.passed else 'DOES NOT HOLD'}; numbers "
                  f"in {quick.results}")
            failed += not quick.passed
    return 1 if failed else 0


def _same_as_committed(name: str, folder: Path, claim, results: Path, record: bool) -> bool:
    """Compare a quick form's numbers with the committed ones (``results/quick``); print what
    moved. Equal, and ``record``: ``results/quick/verified.json`` says on which code."""
    from workbench.reproduce import numbers, provenance

    committed = folder / "results" / provenance.QUICK
    if not committed.is_dir():
        print(f"  no committed quick numbers ({committed}): `workbench reproduce {name}` "
              "makes them with the full results")
        return True
    moved = numbers.differences(committed, results, claim.quick_tolerance)
    tolerance = claim.quick_tolerance
    if moved:
        print(f"  MOVED: the quick form's numbers differ from {committed} (rtol "
              f"{tolerance.rtol:g}, atol {tolerance.atol:g}):")
        for line in moved:
            print(f"    {line}")
        return False
    print(f"  the quick form gives the committed quick numbers (rtol {tolerance.rtol:g}, "
          f"atol {tolerance.atol:g})")
    if record:
        provenance.write_verified(committed, results)
    return True


def _reproduce_status(chosen: dict) -> int:
    """``workbench reproduce --status``: each reproduction current, stale (what changed) or
    missing."""
    from workbench.reproduce import provenance

    states = [provenance.status(name, folder, claim)
              for name, (folder, claim) in chosen.items()]
    for state in states:
        print(state.line())
    counts = {k: sum(s.state == k for s in states) for k in ("current", "stale", "missing")}
    print(", ".join(f"{n} {k}" for k, n in counts.items()))
    return 0
