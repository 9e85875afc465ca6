"""`workbench methods`, `tasks`, `new-method` and `check`: the registry's methods and the
testbeds' tasks listed (from the catalogue, without importing torch), written from a
template, checked against their family's contracts."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.cli.usage import UsageError


def cmd_methods(args) -> int:
    from workbench.catalogue import cache as catalogue
    from workbench.cli import listing
    from workbench.common.validation import did_you_mean

    details = catalogue.load()["methods"]
    if args.method and args.family and args.method.partition("/")[0] != args.family:
        raise UsageError(f"{args.method} is no {args.family} method; allowed: a method of "
                         "--family, or no --family with FAMILY/NAME")
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
    from workbench.cli import scaffold

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
    except OSError as err:  # a read-only or full disk: say where
        raise UsageError(f"cannot write {err.filename}: {err.strerror}") from None
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
    from workbench.catalogue import cache as catalogue
    from workbench.cli import listing
    from workbench.common.validation import did_you_mean

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


