"""workbench: compare training-method schemes, each tuned with the same budget over several seeds.

Bad input (a spec, an argument) ends with one message and exit code 2, before anything is
written.
"""

from __future__ import annotations

import argparse
import sys

from workbench.cli.catalogue_commands import cmd_check, cmd_methods, cmd_new_method, cmd_tasks
from workbench.cli.run_command import cmd_run
from workbench.cli.servers import cmd_dashboard, cmd_ui
from workbench.cli.sweep_commands import (
    cmd_credit,
    cmd_report,
    cmd_reproduce,
    cmd_status,
    cmd_sweep,
)
from workbench.cli.usage import EXIT_BAD_INPUT, EXIT_SHORT, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own exit 2, in one line with our wording
        print(f"error: {message} (`{self.prog} --help` lists what is allowed)",
              file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)




# ----------------------------------------------------------------------------------- parser


def _server_parser(sub, name: str, help: str, port: int, func) -> None:
    """A command that serves a web page on a sweep's store (``ui``, ``dashboard``)."""
    p = sub.add_parser(name, help=help)
    p.add_argument("spec", nargs="?", help="a sweep spec whose store to open")
    p.add_argument("--storage", type=STORAGE)
    p.add_argument("--port", type=_port, default=port, help=f"1-65535 (default {port})")
    p.add_argument("--host", default="127.0.0.1", type=_given("an address or host name"),
                   help="interface to listen on (default 127.0.0.1: this machine only; "
                        "another needs --expose)")
    p.add_argument("--expose", action="store_true",
                   help="mean it: listen on a --host beyond this machine")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   type=_given("a host name, with :PORT or without"),
                   help="also answer requests addressed to NAME (Host header; repeatable): "
                        "others are refused, against DNS rebinding")
    p.set_defaults(func=func)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: 1-65535")
    return int(text)


def _given(allowed: str):
    """An argument type that refuses an empty value (which would otherwise mean the default
    silently: ``--storage ''`` the store ./workbench.db, ``--out ''`` the working folder)."""
    def given(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"empty; allowed: {allowed}")
        return text
    return given


STORAGE = _given("sqlite:///FILE or postgresql://USER@HOST/DB")
DEVICE = _given("auto, cpu, cuda or cuda:N")
FOLDER = _given("a folder's path")


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
    p.add_argument("--storage", type=STORAGE, help="store URL (overrides the spec): "
                   "sqlite:///FILE or postgresql://USER@HOST/DB")
    p.add_argument("--device", type=DEVICE, help="auto (default), cpu or cuda")
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
    p.add_argument("--device", type=DEVICE, help="auto (default), cpu or cuda")
    p.add_argument("--json", action="store_true", help="print the final metrics as JSON")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="trials done and best value per study")
    p.add_argument("spec")
    p.add_argument("--storage", type=STORAGE)
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
    p.add_argument("--storage", type=STORAGE)
    p.add_argument("--out", type=FOLDER, help="output folder (default reports/out/SWEEP)")
    p.add_argument("--include-superseded", action="store_true",
                   help="also show the studies that a later version of the sweep replaced")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("credit", help="Monte Carlo ground truth for step-level advantages: "
                                      "every estimator against Q - V on sampled steps of a "
                                      "fixed checkpoint, by G and N (figure, table, provenance)")
    p.add_argument("spec", help="credit spec (YAML), e.g. reports/credit-keydoor.yaml")
    p.add_argument("--out", type=FOLDER, help="output folder (default reports/out/NAME)")
    p.add_argument("--device", type=DEVICE, help="auto (default), cpu or cuda")
    p.set_defaults(func=cmd_credit)

    p = sub.add_parser("reproduce", help="rerun the reproductions of the papers' claims "
                                         "(reproductions/NAME): sweeps, report, results, "
                                         "checks; exit 1 when a claim's shape does not hold")
    p.add_argument("names", nargs="*", metavar="NAME", help="reproductions (default: all)")
    p.add_argument("--quick", action="store_true",
                   help="the tiny sizes of each claim.yaml's quick keys (checks the sign and "
                        "shape only; results in reproductions/out/NAME-quick/)")
    p.add_argument("--out", type=FOLDER, help="put NAME/results and NAME/work (the store, the full "
                                 "reports) here instead")
    p.add_argument("--list", action="store_true", help="list the reproductions and claims")
    p.add_argument("--status", action="store_true",
                   help="say of each reproduction's committed results whether they are "
                        "current, stale (and what changed since) or missing; runs nothing")
    p.set_defaults(func=cmd_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    from workbench.common.validation import SpecError

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
    except Exception as err:  # a full disk, wherever it was met: one line, no traceback
        from workbench.store import disk_space

        if not (isinstance(err, disk_space.StoreFull) or disk_space.is_disk_full(err)):
            raise
        said = err if isinstance(err, disk_space.StoreFull) else disk_space.describe(err)
        print(f"error: {said}", file=sys.stderr)
        return disk_space.EXIT_STORE_FULL
    except KeyboardInterrupt as err:
        requeued = getattr(err, "requeued", None)  # a sweep's (``engine.Interrupted``)
        said = "" if requeued is None else f": {requeued} trial(s) requeued"
        print(f"interrupted{said}; run the same command again to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
