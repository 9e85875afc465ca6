"""``Task.run`` of the optimisation testbeds is the seed axis with one seed: it logs, step by
step, the very numbers (same bits, CPU) that the sequential loop it replaced logged, recorded
by running that loop (``tests/recorded/one_seed_loop.py``): line searches, margins, hvp and
logit_jvp inputs, per-sample-gradient batch sizes (methods that cannot run on a seed axis of
several seeds), a budget in samples, a target, float32, divergence, the networks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.recorded.one_seed_loop import CASES, run_case

RECORDED = json.loads((Path(__file__).resolve().parent / "recorded" / "one_seed_loop.json")
                      .read_text())


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_run_logs_the_numbers_of_the_sequential_loop(case):
    label, task_name, params, chosen, budget, seed = case
    rows, final = run_case(task_name, params, chosen, budget, seed)
    want = RECORDED[label]
    assert [step for step, _ in rows] == [step for step, _ in want["rows"]]
    for (step, got), (_, recorded) in zip(rows, want["rows"], strict=True):
        assert got.keys() == recorded.keys(), (step, got.keys() ^ recorded.keys())
        for key, value in recorded.items():
            assert same(value, got[key]), (label, step, key, value, got[key])
    assert final.keys() == want["final"].keys()
    assert all(same(v, final[k]) for k, v in want["final"].items()), (final, want["final"])


def test_the_cases_reach_what_they_are_meant_to():
    """The recorded runs cover what they name: a divergence, per-sample-gradient sizes that
    move, backtracking, a target reached, a budget in samples."""
    finals = {label: RECORDED[label]["final"] for label, *_ in CASES}
    assert finals["quadratic-diverges"]["diverged"]
    rows = {label: [m for _, m in RECORDED[label]["rows"]] for label, *_ in CASES}
    assert len({m["batch/size"] for m in rows["logreg-norm_test-samples_budget"]}) > 1
    assert rows["logreg-norm_test-samples_budget"][-1]["cost/samples"] >= 600
    assert rows["logreg-armijo"][-1]["cost/loss_evals"] > 0
    assert not math.isnan(finals["logreg-adam-float32-target"]["train/steps_to_target"])
    assert any("val/loss" in m for m in rows["mlp-sgd_momentum-eval3"][1:])
