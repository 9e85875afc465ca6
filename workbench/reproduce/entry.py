"""Run one reproduction: its sweeps into a fresh store, their reports, then the results kept
beside the claim and its checks.

For each sweep of the claim (merged with its ``quick`` keys under ``--quick``): the spec as run
goes to ``WORK/SWEEP.yaml``, its studies run on the CPU into ``WORK/workbench.db``, and its
report is built into ``WORK/report/SWEEP/``. Kept in the results folder: the report's results
table (``table_SWEEP.csv`` and ``.md``), the figures the claim names, a CSV per curve it names
(``curve_SWEEP_METRIC.csv``: per step, each method's IQM over its best trial's seeds, held-out
seeds where the sweep ran them), the paper's numbers beside ours (``paper_vs_ours.csv`` and
``.md``) where it gives them, ``checks.json`` and ``run.json`` (the command, CPU and wall
seconds, the machine's load while it ran, commit), ``provenance.json`` (what determined the
results: ``workbench.reproduce.provenance``). For each credit spec of the claim (merged with
its ``quick`` keys): the spec as run goes to ``WORK/NAME.yaml``, ``workbench credit`` writes
into ``WORK/credit/``, and its table and figure are kept as ``credit_STUDY.csv``, ``.md`` and
``.png``.
"""

from __future__ import annotations

import datetime
import json
import os
import resource
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from workbench.common.validation import SpecError
from workbench.reproduce import checks, fits, provenance
from workbench.reproduce.claim import Claim

WORK_MARK = ".reproduce-work"  # a work folder this command made (and may clear)
KEPT_SUFFIXES = (".csv", ".md", ".png", ".json")  # what a results folder holds


@dataclass
class Places:
    work: Path  # the store, the specs as run, the full reports (cleared before each run)
    results: Path  # what is kept


@dataclass
class Outcome:
    name: str
    results: Path
    outcomes: list[checks.Outcome]
    cpu_seconds: float
    wall_seconds: float

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)


def prepare(places: Places) -> None:
    """An empty work folder (refusing one this command did not make) and a results folder
    without the files of an earlier run."""
    if places.work.exists():
        if not (places.work / WORK_MARK).is_file():
            raise SpecError("--out", "", f"{places.work} exists and was not made by `workbench "
                                         "reproduce`: remove it or name another folder")
        shutil.rmtree(places.work)
    places.work.mkdir(parents=True)
    (places.work / WORK_MARK).touch()
    if places.results.is_dir():
        for path in places.results.iterdir():
            if path.is_file() and path.suffix in KEPT_SUFFIXES:
                path.unlink()
    places.results.mkdir(parents=True, exist_ok=True)


def specs(claim: Claim, folder: Path, work: Path, quick: bool) -> list[Path]:
    """Each sweep spec as it will run, written into ``work`` (merged with the claim's quick
    keys under ``quick``); every one checked before anything runs."""
    from workbench.spec import sweep as spec

    written = []
    for name in claim.sweeps:
        path = written_spec(claim, folder, work, name, quick)
        spec.load(path, storage=storage_url(work), device="cpu")  # bad input: before running
        written.append(path)
    return written


def written_spec(claim: Claim, folder: Path, work: Path, name: str, quick: bool) -> Path:
    """The claim's spec ``name`` written into ``work`` as it will run (merged with the
    claim's quick keys under ``quick``)."""
    from workbench.spec import sweep as spec

    document = spec.read_yaml(folder / name)
    if quick:
        document = merged(document, claim.quick.get(name, {}))
    path = work / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def credit_specs(claim: Claim, folder: Path, work: Path, quick: bool) -> list:
    """Each credit spec as it will run, written into ``work`` and checked (its plan)."""
    from workbench.credit import plan as credit_plan

    return [credit_plan.load(written_spec(claim, folder, work, name, quick))
            for name in claim.credit]


def run_credit(plan, work: Path, results: Path, say: Callable[[str], None]) -> None:
    """Run one credit study into ``work/credit/NAME`` and keep its table and figure."""
    import torch

    from workbench.credit import entry as credit

    out = work / "credit" / plan.name
    credit.run(plan, out, torch.device("cpu"), say=say)
    for source, kept in (("table.csv", ".csv"), ("table.md", ".md"), ("figure.png", ".png")):
        shutil.copyfile(out / source, results / f"credit_{plan.name}{kept}")


def merged(base: dict, extra: dict) -> dict:
    """``base`` with ``extra``'s keys, mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def storage_url(work: Path) -> str:
    return f"sqlite:///{(work / 'workbench.db').resolve()}"


def run(name: str, folder: Path, claim: Claim, places: Places, quick: bool, command: str,
        say: Callable[[str], None]) -> Outcome:
    """Run the reproduction ``name`` and evaluate its checks on what it kept."""
    from workbench import report
    from workbench.engine.sweep_run import run_sweep
    from workbench.engine.workers import quiet_libraries
    from workbench.spec import sweep as spec

    started, cpu, load = time.perf_counter(), _cpu_seconds(), LoadWatch()
    commit = _commit()  # before the results files it replaces count as changes
    prepare(places)
    paths = specs(claim, folder, places.work, quick)
    plans = credit_specs(claim, folder, places.work, quick)
    quiet_libraries()
    names, sweeps = [], []
    for path in paths:
        sweep = spec.load(path, storage=storage_url(places.work), device="cpu")
        sweeps.append(sweep)
        say(f"{name}: sweep {sweep.name} ({len(sweep.studies)} studies)")
        final = run_sweep(sweep, workers=1, device="cpu", say=say)
        short = [f"{s.label}: {s.shortfall()}" for s in final if s.shortfall()]
        if short:
            raise RuntimeError(f"{name}: sweep {sweep.name} ended short: " + "; ".join(short))
        out = places.work / "report" / sweep.name
        report.build(report.SweepRef(sweep.name, sweep.storage), out, title=sweep.name,
                     say=say)
        keep(claim, sweep.name, out, places.results, several=len(paths) > 1)
        for metric in claim.curves:
            curve(sweep.name, sweep.storage, metric).to_csv(
                places.results / checks.curve_file(sweep.name, metric), index=False,
                float_format="%.6g")
        names.append(sweep.name)
    for plan in plans:
        say(f"{name}: credit {plan.name}")
        run_credit(plan, places.work, places.results, say)
    if claim.paper is not None:
        paper_table(claim, places.results, names)
    fits.write(claim, places.results, names, say)  # fit_NAME*.csv, from the curves
    outcomes = checks.evaluate(claim, places.results, names, quick)
    wall, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
    (places.results / "checks.json").write_text(json.dumps(
        [o.as_dict() for o in outcomes], indent=1) + "\n")
    (places.results / provenance.PROVENANCE_FILE).write_text(json.dumps(
        provenance.record(claim, folder, sweeps), indent=1) + "\n")
    (places.results / "run.json").write_text(json.dumps({
        "command": command, "quick": quick, "cpu_seconds": round(cpu, 1),
        "wall_seconds": round(wall, 1), **load.stop(), "commit": commit,
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }, indent=1) + "\n")
    return Outcome(name, places.results, outcomes, cpu, wall)


class LoadWatch:
    """The machine's 1-minute load average, sampled every ``every`` seconds in a daemon thread
    from its start until ``stop``: a CPU time measured on a loaded machine says so."""

    def __init__(self, every: float = 5.0):
        self.samples = [os.getloadavg()[0]]
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(every,), daemon=True)
        self._thread.start()

    def _watch(self, every: float) -> None:
        while not self._done.wait(every):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict:
        """``load_mean``, ``load_max`` (of the samples) and ``cpus`` (``os.cpu_count``)."""
        self._done.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])
        return {"load_mean": round(sum(self.samples) / len(self.samples), 2),
                "load_max": round(max(self.samples), 2), "cpus": os.cpu_count()}


def keep(claim: Claim, sweep: str, report_dir: Path, results: Path, several: bool) -> None:
    """Copy the sweep's results table, its fitted rates (``rates_*.csv``: per seed and the
    summary with intervals) and the claim's figures from its report."""
    for suffix in (".csv", ".md"):
        shutil.copyfile(report_dir / f"table_{sweep}{suffix}", results / f"table_{sweep}{suffix}")
    for fitted in sorted(report_dir.glob("rates_*.csv")):
        shutil.copyfile(fitted, results / (f"{sweep}_{fitted.name}" if several else fitted.name))
    for figure in claim.figures:
        source = report_dir / figure
        if source.is_file():
            shutil.copyfile(source, results / (f"{sweep}_{figure}" if several else figure))


def curve(sweep: str, storage: str, metric: str) -> pd.DataFrame:
    """Per logged step: each method's IQM of ``metric`` over its best trial's seeds (held-out
    seeds where it has them) as column LABEL, and each seed's value as ``LABEL seed S``."""
    from workbench import api
    from workbench.stats import aggregates as stats
    from workbench.store import runs

    points = api.load_metrics(sweep, [metric], storage)
    points = points[points["best"]]
    columns = {}
    for label, of_method in points.groupby("method", sort=False):
        held_out = of_method[of_method["kind"] == runs.EVALUATION]
        shown = held_out if not held_out.empty else of_method
        table = shown.pivot_table(index="step", columns="seed", values="value")
        columns[label] = table.apply(lambda row: stats.aggregate(row.dropna(), "iqm"), axis=1)
        for seed in table.columns:
            columns[f"{label} seed {seed}"] = table[seed]
    frame = pd.DataFrame(columns)
    frame.index.name = "step"
    return frame.reset_index()


def paper_table(claim: Claim, results: Path, sweeps: list[str]) -> None:
    """The paper's numbers beside ours, per method: ``paper_vs_ours.csv`` and ``.md``."""
    paper = claim.paper
    sweep = paper.sweep or sweeps[0]
    ours = pd.read_csv(results / checks.table_file(sweep)).set_index("method")[paper.column]
    rows = [{"method": label, "paper": value, "ours": float(ours.get(label, float("nan"))),
             "difference": float(ours.get(label, float("nan"))) - value}
            for label, value in paper.values.items()]
    frame = pd.DataFrame(rows)
    frame.to_csv(results / "paper_vs_ours.csv", index=False)
    lines = [f"{paper.column}: the paper's value beside ours (sweep {sweep})", "",
             "| method | paper | ours | difference |", "|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['paper']:g} | {r['ours']:g} | {r['difference']:+g} |"
              for r in rows]
    (results / "paper_vs_ours.md").write_text("\n".join(lines) + "\n")


def _cpu_seconds() -> float:
    """User and system seconds of this process and the children it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _commit() -> str:
    from workbench.store import runs

    tags = runs.provenance()
    dirty = " (dirty)" if tags.get("git.dirty") == "true" else ""
    return f"{tags.get('git.commit', 'unknown')}{dirty}"
