"""Provenance: beside every figure and table a JSON file with the query that read it (store,
experiments, filters), its run ids, their git commits, the statistics settings and the time the
report was built; ``provenance.json`` says the same for the whole report."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd

from workbench.report.data import SweepData
from workbench.stats import aggregates as stats
from workbench.store.database import redact
from workbench.store.study_record import ReportOptions


class Provenance:
    def __init__(self, options: ReportOptions):
        self.options = options
        self.created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")

    def settings(self) -> dict:
        o = self.options
        return {"aggregate": o.aggregate, "confidence": o.confidence,
                "intervals": {how: stats.INTERVAL_METHODS[how] for how in ("iqm", "mean",
                                                                          o.aggregate)},
                "bootstrap": "percentile, only for scores pooled over several sweeps "
                             "(stratified by sweep) and the best-of-k band",
                "resamples": o.resamples, "seed": 0, "small_n": stats.SMALL_N,
                "best_trial": "best objective among the complete trials the sweep counts (up "
                              "to its N-th finished one) whose objective is over the sweep's "
                              "tuning seeds, chosen on them; shown "
                              "on the held-out seeds where the sweep evaluated it",
                "studies": "current ones (superseded only when asked); each keyed by its "
                           "fingerprint, listed under 'fingerprints'"}

    def write(self, path: Path, run_ids, sweeps: list[SweepData],
              files: list[str] | None = None) -> None:
        """``path`` with the suffix ``.json``: the provenance of the file at ``path`` and of
        ``files``, the names of the others it covers (a figure's PDF and the CSV of its
        numbers, a table's other formats)."""
        runs = pd.concat([d.runs for d in sweeps])
        used = runs[runs["run_id"].isin(set(run_ids))]
        record = {
            "artifact": path.name, "files": sorted({path.name, *(files or [])}),
            "created": self.created,
            "query": {"store": sorted({redact(d.storage) for d in sweeps}),
                      "experiments": {d.name: d.experiment for d in sweeps},
                      "filters": "runs.lifecycle_stage = 'active'; tags workbench.kind in "
                                 "(study, trial, seed)"},
            "run_ids": sorted(set(run_ids)),
            "git_commits": sorted(used.get("git.commit", pd.Series(dtype=str)).dropna()
                                  .unique().tolist()),
            "statistics": self.settings(),
            "fingerprints": {f"{d.name}/{m.label}": m.fingerprint for d in sweeps
                             for m in d.methods},
        }
        path.with_suffix(".json").write_text(json.dumps(record, indent=1))
