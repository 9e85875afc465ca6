"""``Task.run`` of the optimisation testbeds is the seed axis with one seed: it logs, step by
step, the numbers that the sequential loop it replaced logged, recorded by running that loop
(``tests/recorded/one_seed_loop.py``): line searches, margins, hvp and logit_jvp inputs,
per-sample-gradient batch sizes (methods that cannot run on a seed axis of several seeds), a
budget in samples, a target, float32, divergence, the networks.

The numbers were recorded on one CPU and are compared on whichever CPU runs the suite, so they
are held to the precision a CPU can promise, not to their bits (``TOLERANCE``): PyTorch's CPU
kernels and MKL pick their code path by the instruction set found at run time (AVX-512, AVX2,
SSE, and another path on AMD), and a different vector width sums in a different order, which
changes the last bits of a result; a training loop feeds those bits into every later step.
Measured on an AVX-512 Xeon against the recording, as found and with other code paths forced
(``ATEN_CPU_CAPABILITY=avx2`` or ``default``, ``MKL_ENABLE_INSTRUCTIONS=AVX2``,
``MKL_CBWR=COMPATIBLE``): float32 cases move by up to 4e-7 relative, float64 cases by up to
1e-13 relative, and a value that is zero in exact arithmetic (a point's infeasibility on the
simplex) by 2.2e-16 absolute. What a run decides (``DISCRETE``: batch sizes, step and
evaluation counts, the step a target was reached, divergence) is compared exactly; in the row
where a run diverged, only that (``agrees``: its numbers come from a blown-up iterate)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.recorded.one_seed_loop import CASES, run_case
from workbench.testbeds import get_task

RECORDED = json.loads((Path(__file__).resolve().parent / "recorded" / "one_seed_loop.json")
                      .read_text())


class Tolerance(NamedTuple):
    rtol: float
    atol: float


TOLERANCE = {
    # float32: eps 1.2e-7; a kernel's summation order moves a result by a few eps and the
    # steps carry it on (4e-7 seen over 60 Adam steps of the MLP): 1e-5 is 25 times that,
    # and still 100 times finer than a change of 1e-3 in any value
    "float32": Tolerance(rtol=1e-5, atol=1e-6),
    # float64: eps 2.2e-16; 1e-13 seen after 25 Polyak steps on a condition number of 50:
    # 1e-9 leaves four orders of magnitude for other CPUs and longer runs; the absolute part
    # is for values that are zero in exact arithmetic and come out as rounding residue
    "float64": Tolerance(rtol=1e-9, atol=1e-12),
}
# the decisions a run makes: a different CPU must make the same ones
DISCRETE = {"batch/size", "cost/samples", "cost/grad_evals", "cost/loss_evals",
            "train/steps_to_target", "steps", "diverged"}
# tasks whose Params have no dtype field: the precision their model is built in
FIXED_DTYPE = {"mlp": "float32"}  # the MLP and the CNN (workbench/testbeds/optimisation/mlp.py)


def case_dtype(task_name: str, params: dict) -> str:
    """The floating-point type a case trains in, from its params (the task's default if the
    case does not set it)."""
    task = get_task(task_name)
    if "dtype" in task.Params.model_fields:
        return task.Params(**params).dtype
    assert task_name in FIXED_DTYPE, f"{task_name}: say which dtype its Params train in"
    return FIXED_DTYPE[task_name]


def agrees(key: str, recorded, got, tol: Tolerance, *, blown_up: bool = False) -> bool:
    """``got`` is ``recorded`` to the precision a CPU can promise. ``blown_up``: the values of
    the step at which a run diverged; they come from an iterate that has blown up (logreg-aicn:
    a margin of -1.9e229), and that step amplifies a last-bit difference without bound (its
    step size 1e-76 on the recording CPU, 2e-63 with AVX2 kernels): only the decisions and the
    loss's being non-finite are compared there."""
    if key in DISCRETE or isinstance(recorded, bool) or not isinstance(recorded, float):
        return recorded == got or (isinstance(recorded, float) and isinstance(got, float)
                                   and math.isnan(recorded) and math.isnan(got))
    got = float(got)
    if blown_up:
        return key != "train/loss" or not (math.isfinite(recorded) or math.isfinite(got))
    if math.isnan(recorded) or math.isinf(recorded):
        return got == recorded or (math.isnan(recorded) and math.isnan(got))
    return math.isclose(got, recorded, rel_tol=tol.rtol, abs_tol=tol.atol)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_run_logs_the_numbers_of_the_sequential_loop(case):
    label, task_name, params, chosen, budget, seed = case
    tol = TOLERANCE[case_dtype(task_name, params)]
    rows, final = run_case(task_name, params, chosen, budget, seed)
    want = RECORDED[label]
    assert [step for step, _ in rows] == [step for step, _ in want["rows"]]
    diverged = want["final"]["diverged"]
    last = len(want["rows"]) - 1
    for i, ((step, got), (_, recorded)) in enumerate(zip(rows, want["rows"], strict=True)):
        assert got.keys() == recorded.keys(), (step, got.keys() ^ recorded.keys())
        for key, value in recorded.items():
            assert agrees(key, value, got[key], tol, blown_up=diverged and i == last), (
                label, step, key, value, got[key], tol)
    assert final.keys() == want["final"].keys()
    for key, value in want["final"].items():
        assert agrees(key, value, final[key], tol, blown_up=diverged), (
            label, "final", key, value, final[key], tol)


def test_the_comparison_tells_a_change_from_rounding():
    """The tolerances pass what another CPU's rounding does and fail a real change."""
    f32, f64 = TOLERANCE["float32"], TOLERANCE["float64"]
    # recorded on one CPU, computed on an AMD EPYC (logreg-adam-float32-target)
    assert agrees("train/grad_norm", 0.7151964911986053, 0.7151965328687223, f32)
    assert agrees("train/infeasibility", 0.0, 2.220446049250313e-16, f64)
    assert agrees("method/step_size", math.nan, math.nan, f64)
    for tol in (f32, f64):
        assert not agrees("train/loss", 2.0, 2.0 * (1 + 1e-3), tol)
        assert not agrees("train/loss", 2.0, math.nan, tol)
        assert not agrees("batch/size", 16.0, 16.000001, tol)
        assert not agrees("train/steps_to_target", 15.0, math.nan, tol)
        assert not agrees("diverged", True, False, tol)
    assert not agrees("train/grad_norm", 0.7, 0.7 * (1 + 1e-7), f64)
    # the step at which a run blew up: its loss must still be non-finite
    assert agrees("method/step_size", 1.03e-76, 2.04e-63, f64, blown_up=True)
    assert agrees("train/loss", math.nan, math.inf, f64, blown_up=True)
    assert not agrees("train/loss", math.nan, 3.0, f64, blown_up=True)
    assert not agrees("cost/grad_evals", 4.0, 5.0, f64, blown_up=True)


def test_the_cases_train_in_the_dtype_they_are_held_to():
    assert {label: case_dtype(task, params) for label, task, params, *_ in CASES
            if case_dtype(task, params) == "float32"}.keys() == {
        "logreg-adam-float32-target", "mlp-sgd_momentum-eval3", "cnn-armijo",
        "mlp-adam-60-steps", "mlp-noise_scale-per_sample"}


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
