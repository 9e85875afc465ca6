"""`workbench run TASK SLOT=METHOD ...`: one configuration run once, without tuning; its
command line (slots, method and task parameters, budget) built into a one-trial sweep spec
and checked by the same rules as a spec file."""

from __future__ import annotations

import json
import math
import re
import time

from workbench.cli.usage import UsageError


def _parse_value(text: str):
    """A command-line value as YAML reads it, the string itself where YAML cannot; YAML that
    nests or expands too far, or repeats a key, is an error."""
    import yaml

    from workbench.common import yamlsafe
    from workbench.common.validation import shorten

    try:
        return yamlsafe.load(text)
    except yamlsafe.Refused as err:
        raise UsageError(f"the value {shorten(text)}: {err}") from None
    except (yaml.YAMLError, ValueError, TypeError, LookupError, AttributeError, OverflowError):
        return text  # not a YAML scalar: keep the string (and let validation say why)


def cmd_run(args) -> int:
    import torch

    from workbench import registry
    from workbench.common import seeds
    from workbench.common.validation import SpecError
    from workbench.engine.workers import resolve_device
    from workbench.spec import sweep as spec
    from workbench.spec.resolve import fitting_methods
    from workbench.spec.schema import MAX_SEED
    from workbench.testbeds import Budget, get_task

    source = "workbench run"
    try:
        task = get_task(args.task)
    except LookupError as err:
        raise SpecError(source, "TASK", str(err)) from None
    chosen, method_values, task_values = {}, {}, {}
    for item in args.assignments:
        if "=" not in item:
            raise SpecError(source, item, "expected SLOT=METHOD, SLOT.PARAM=VALUE or "
                                 "PARAM=VALUE")
        key, value = item.split("=", 1)
        is_method = key in task.slots and value in registry.available(key)
        if key in task.slots and (is_method or key not in task.Params.model_fields):
            if key in chosen:  # a slot; `batch_size=64` names the task's parameter
                raise SpecError(source, key, f"two methods for one slot: {chosen[key]} "
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
    for slot in method_values:  # SLOT.PARAM=VALUE with SLOT unnamed: the default method's
        if slot not in chosen and slot in task.default_methods:
            chosen[slot] = task.default_methods[slot]
    missing = [s for s in task.slots if s not in chosen and s not in task.default_methods]
    if missing:
        raise SpecError(source, missing[0], f"name a method: {missing[0]}=NAME; allowed: "
                             + ", ".join(fitting_methods(task, missing[0])))
    if not 0 <= args.seed <= MAX_SEED:
        raise SpecError(source, "--seed", f"allowed: an integer in [0, {MAX_SEED}]")
    document = {"task": {"name": args.task, "params": task_values},
                "methods": {slot: [{"name": name, "fixed": method_values.get(slot, {})}]
                            for slot, name in chosen.items()},
                "seeds": [args.seed], "trials": 1, "budget": run_budget(args)}
    try:
        sweep = spec.check(document, source)
    except SpecError as err:  # in the words the user typed, not the spec's key paths
        problems = [(_as_typed(path, chosen), message) for path, message in err.problems]
        raise SpecError(source, *problems[0], more=problems[1:]) from None
    methods = {m.slot: m.cls(**m.fixed) for m in sweep.studies[0].methods}
    device = resolve_device(args.device)
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
    from workbench.common.budget import MAX_STEPS

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
    (``workbench.stats.objective.Divergence``)."""

    def __init__(self, metric: str, direction: str):
        from workbench.stats.objective import Divergence

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
    if match := re.fullmatch(r"methods\.(\w+)\[0\]\.fixed\.(.*)", path):
        return f"{match[1]}.{match[2]}"
    if match := re.fullmatch(r"methods\.(\w+)(\[0\](\.name)?)?", path):
        return f"{match[1]}={chosen.get(match[1], 'METHOD')}"
    if path.startswith("task.params."):
        return path.removeprefix("task.params.")
    return {"budget.steps": "--steps", "budget.samples": "--samples",
            "budget.wall_seconds": "--wall-seconds", "seeds": "--seed",
            "task.name": "TASK"}.get(path, path)


