"""``workbench credit SPEC``: a Monte Carlo ground-truth study of step-level credit
assignment, from the spec to the written figure, table and provenance.

For the checkpoint (``checkpoint``), for each G and each sampler the estimators train with
(``sampling``: independent rollouts, or Tree-GRPO's trees for an estimator that reads
``tree_ids``): its rows, the advantages of the estimators measured on them, sampled steps and
their Monte Carlo advantages for every N; for each (estimator, G, N) the agreement measures on
its sampler's steps with bootstrap intervals (``measures``, resamples from
``stream(seed, "rollouts", G, 3, N)``, shared by the estimators: the same instances resampled)
and the environment steps it cost (``env_steps``: its sampler's rows and its own
continuations); then the outputs (``outputs``), built in a hidden folder beside the target and
renamed into place (``report.folder``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from workbench.common import fingerprint, seeds
from workbench.credit import gradient, measures, outputs
from workbench.credit.checkpoint import held_out, train_checkpoint
from workbench.credit.plan import SAMPLERS, CreditPlan
from workbench.credit.sampling import MC_VALUES, STREAMS, GroupSample, sample_groups
from workbench.report import ReportError
from workbench.report import folder as report_folder
from workbench.store import runs

LIBRARIES = ("torch", "numpy", "scipy", "matplotlib", "pydantic")


def writable(out: Path) -> Path:
    """The folder a study writes (``out``, or its symlink's target), checked before anything
    runs: a report or nothing there (``report.folder.replaceable``), and the nearest folder
    above it that exists one this process can write in; a ReportError says why not."""
    target = report_folder.replaceable(out)
    above = target.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir() or not os.access(above, os.W_OK | os.X_OK):
        raise ReportError(f"{out} cannot be written: {above} is not a folder this process "
                          "can write in")
    return target


def run(plan: CreditPlan, out: Path, device: torch.device,
        say: Callable[[str], None] = print) -> list[Path]:
    """Run the study and write its outputs to ``out`` (replaced whole); the files written."""
    target = writable(out)
    started = time.perf_counter()
    checkpoint = train_checkpoint(plan, device)
    trained = time.perf_counter() - started
    shown = _checkpoint_label(plan)
    say(f"checkpoint: {shown} in {trained:.1f} s"
        + (f" (training success {checkpoint.metrics['train/success']:.2f}, held-out greedy "
           f"success {checkpoint.metrics['eval/success']:.2f})" if checkpoint.metrics else ""))
    instances = held_out(plan)
    s, rows, per_group, gradient_rows, truth = plan.spec, [], {}, [], None
    sampled = s.instances * s.steps_per_instance
    for g in s.group_sizes:
        begun = time.perf_counter()
        samples = sample_groups(plan, checkpoint.policy, instances, g, device)
        rows += _rows(plan, samples)
        per_group[g] = {sample.sampler: {"estimators": list(sample.estimates),
                                         "played_steps": sample.played,
                                         "env_steps": sample.env_steps,
                                         "rollout_success": sample.success}
                        for sample in samples}
        per_group[g]["seconds"] = round(time.perf_counter() - begun, 3)
        played = ", ".join(f"{sample.played} steps played ({sample.sampler})"
                           for sample in samples)
        say(f"G = {g}: {played}, {sampled} sampled and "
            f"{2 * max(s.continuations) * sampled} continuations each "
            f"({time.perf_counter() - begun:.1f} s)")
        if s.gradient_batches:
            begun = time.perf_counter()
            found, truth = gradient.study_rows(plan, checkpoint.policy, instances, g, device,
                                               truth)
            gradient_rows += found
            per_group[g]["gradient_seconds"] = round(time.perf_counter() - begun, 3)
            say(f"G = {g}: policy-gradient bias over {s.gradient_batches} batches "
                f"({time.perf_counter() - begun:.1f} s)")
    record = _provenance(plan, checkpoint.metrics, device, per_group,
                         {"checkpoint": round(trained, 3),
                          "total": round(time.perf_counter() - started, 3)})
    building = report_folder.staging(target)
    try:
        building.mkdir(parents=True)
        files = outputs.write_figure(building, outputs.figure(plan, rows, shown))
        files += outputs.write_table(building, rows)
        artifacts = {
            outputs.FIGURE: "each measure against G, a line per estimator, a row of panels "
                            "per N",
            outputs.TABLE: "every (estimator, G, N): the measures with their bootstrap "
                           "intervals"}
        if gradient_rows:
            files += outputs.write_gradient(building, gradient_rows, outputs.gradient_figure(
                plan, gradient_rows, shown))
            artifacts[outputs.GRADIENT] = (
                "every (estimator, G): the bias of its policy gradient against the exact one "
                "(cosine, relative bias norm, scale along it, turn-count bias) with bootstrap "
                "intervals over batches")
        files += outputs.write_provenance(building, record, artifacts)
        report_folder.move_into_place(building, target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return [target / f.name for f in files]


def _rows(plan: CreditPlan, samples: list[GroupSample]) -> list[dict]:
    """A table row per (N, estimator) of one G (the spec's order of estimators), each on its
    sampler's steps: the measures with their intervals."""
    s, g, rows = plan.spec, samples[0].group_size, []
    of = {label: sample for sample in samples for label in sample.estimates}
    for n in s.continuations:
        for estimator in plan.estimators:
            sample = of[estimator.label]
            truth = sample.monte_carlo[n]
            estimate = sample.estimates[estimator.label]
            rng = seeds.numpy_generator(s.seed, "rollouts", g, 3, n)  # same per estimator
            found = measures.measure(estimate, truth, s.confidence, s.resamples, rng)
            row = {"estimator": estimator.label, "G": g, "N": n, "sampler": sample.sampler,
                   "instances": s.instances, "steps": truth.size,
                   "mc_se": float(np.sqrt(np.mean(sample.standard_error[n] ** 2))),
                   "mc_reliability": sample.reliability[n],
                   "zero_share": measures.zero_share(estimate),
                   "mc_zero_share": measures.zero_share(truth),
                   "rollout_success": sample.success,
                   "env_steps": sample.env_steps[estimator.label]}
            for metric, (point, low, high) in found.items():
                row |= {metric: point, f"{metric}_low": low, f"{metric}_high": high}
            rows.append(row)
    return rows


def _checkpoint_label(plan: CreditPlan) -> str:
    c = plan.spec.checkpoint
    if c.updates == 0:
        return f"the initial policy (seed {c.seed})"
    advantage = plan.checkpoint_methods["advantage"]
    return f"{advantage.name}, {c.updates} updates, seed {c.seed}"


def _provenance(plan: CreditPlan, metrics: dict, device: torch.device, per_group: dict,
                seconds: dict) -> dict:
    s = plan.spec
    roots = ["workbench.credit.entry", *{type(m).__module__ for m in
                                         plan.checkpoint_methods.values()},
             *{type(e.method).__module__ for e in plan.estimators}]
    modules, _ = fingerprint.code_hashes(roots)
    tags = runs.provenance()
    spec_text = Path(plan.source).read_bytes() if Path(plan.source).is_file() else b""
    return {
        "created": outputs.now(),
        "spec": {"path": plan.source, "sha256": hashlib.sha256(spec_text).hexdigest(),
                 "checked": plan.document},
        "code": {"git.commit": tags["git.commit"], "git.dirty": tags["git.dirty"],
                 "modules_sha256": fingerprint.digest(modules), "modules": modules},
        "libraries": {"python": tags["python"], **{name: _version(name)
                                                   for name in LIBRARIES}},
        "device": str(device), "host": tags["host"],
        "checkpoint": {
            "methods": {slot: {"name": m.name, "params": m.params}
                        for slot, m in plan.checkpoint_methods.items()},
            "updates": s.checkpoint.updates, "seed": s.checkpoint.seed,
            "value_head": plan.critic,
            "final_metrics": {k: v for k, v in metrics.items()
                              if isinstance(v, int | float | bool | str)}},
        "estimators": {e.label: {"name": e.method.name, "params": e.method.params,
                                 "fidelity": type(e.method).fidelity, "sampler": e.sampler}
                       for e in plan.estimators},
        "samplers": {name: SAMPLERS[name] for name in dict.fromkeys(
            e.sampler for e in plan.estimators)},
        "seeds": {"checkpoint": f"the run seed {s.checkpoint.seed} (streams init, actions, "
                                f"minibatches, prompts as `workbench run`)",
                  "study": s.seed,
                  "streams": {
                      **{f"{sampler} {purpose}": _stream(keys)
                         for sampler, streams in STREAMS.items()
                         if sampler in {e.sampler for e in plan.estimators}
                         for purpose, keys in streams.items()},
                      **{f"mc_values continuations of {e.label}": _stream((MC_VALUES, i))
                         for i, e in enumerate(plan.estimators)
                         if "mc_values" in e.method.requirements(e.method.params)},
                      "bootstrap of (G, N)": "stream(seed, 'rollouts', G, 3, N)"},
                  "instances": f"held-out split 1, indices 0..{s.instances - 1} under "
                               f"instance_seed {plan.task_params.instance_seed}"},
        "statistics": {"interval": "percentile bootstrap over instances (each instance's "
                                   "sampled steps resampled together)",
                       "confidence": s.confidence, "resamples": s.resamples,
                       "measures": measures.METRICS, "zero": measures.ZERO},
        "groups": per_group, "seconds": seconds,
    } | ({"gradient": {
        "batches": s.gradient_batches,
        "streams": {"batch b of G": _stream((gradient.BATCHES, "b")),
                    "mc_values continuations of estimator e in batch b":
                        _stream((MC_VALUES, "e", gradient.BATCHES, "b")),
                    "bootstrap of G": _stream((gradient.BOOTSTRAP,))},
        "measures": gradient.METRICS,
        "interval": "percentile bootstrap over batches",
        "truth": "exact gradient by dynamic programming over each instance's enumerated "
                 "states (credit.gradient.exact_gradient)",
        "left_out": [e.label for e in plan.estimators if e.sampler != "independent"],
    }} if s.gradient_batches else {})


def _stream(keys: tuple[int | str, ...]) -> str:
    return f"stream(seed, 'rollouts', G, {', '.join(map(str, keys))})"


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
