"""The MLflow layout of a sweep, owned here: run kinds, tag keys and the outcome -> status map.

One experiment per sweep; a run per study (kind ``study``), a child run per trial (``trial``)
and a run per seed under its trial (``seed``). The engine writes these names
(``workbench.tracking``), the report and ``workbench.results`` read them back; neither spells
them itself. Importing this module imports nothing heavy.
"""

from __future__ import annotations

# run kinds (the value of the KIND tag)
STUDY, TRIAL, SEED = "study", "trial", "seed"

# tag keys
KIND = "workbench.kind"
SWEEP = "workbench.sweep"
STUDY_NAME = "workbench.study"
METHOD = "workbench.method"  # the study's label; METHOD + ".SLOT": the slot's method name
TASK = "workbench.task"
FIDELITY = "workbench.fidelity"  # one fidelity or "mixed"; FIDELITY + ".SLOT": per slot
SEED_TAG = "workbench.seed"
FAIL_REASON = "workbench.fail_reason"
PRUNE_REASON = "workbench.prune_reason"
PRUNE_DETAIL = "workbench.prune_detail"
UNUSED_KNOBS = "workbench.unused_knobs"
# on a study run: what the report reads back instead of the spec, as JSON
# (workbench.study_record); a long one continues in STUDY_RECORD + ".1", ".2", ...
STUDY_RECORD = "workbench.study_record"
TAG_VALUE_CHARS = 8000  # MLflow's longest tag value

# a trial's outcome -> the MLflow status of its runs
STATUS = {"complete": "FINISHED", "pruned": "KILLED", "fail": "FAILED"}
FINISHED, KILLED, FAILED, RUNNING = "FINISHED", "KILLED", "FAILED", "RUNNING"


def slot_tag(key: str, slot: str) -> str:
    """The per-slot form of METHOD or FIDELITY, e.g. ``workbench.method.step_size``."""
    return f"{key}.{slot}"
