"""Claim-level fits (``fits:`` in claim.yaml, ``workbench.reproduce.fits``): McCandlish et al.'s
S = S_min (1 + B_noise / B) fitted per seed to steps to a target read from curve CSVs, saved
with intervals over seeds where checks read them; censored arms left out; bad entries refused
with one message naming the file and the key."""

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from workbench.common.validation import SpecError
from workbench.reproduce import checks, fits
from workbench.reproduce import claim as claims

BATCHES = {"sgd+b8": 8, "sgd+b32": 32, "sgd+b128": 128, "sgd+b512": 512, "sgd+b2048": 2048,
           "sgd+b8192": 8192}
B_NOISE = 128.0
S_MIN = {"0": 64.0, "1": 128.0, "2": 192.0}  # per seed: S = S_min + S_min * 128 / B, whole
TARGET = 0.5


def linear_curve(steps: np.ndarray, reach: float) -> np.ndarray:
    """A loss falling from 1 that first is <= TARGET at step ``reach`` (a whole number)."""
    return 1.0 - (1.0 - TARGET) * steps / reach


def write_curves(folder, s_min=S_MIN, b_noise=B_NOISE, last=3300, never=()):
    """curve_sweep_train-loss.csv with a 'LABEL seed S' column per arm and seed; the (label,
    seed) pairs in ``never`` stay above the target."""
    steps = np.arange(0, last + 1, dtype=float)
    columns = {"step": steps}
    for label, b in BATCHES.items():
        columns[label] = np.nan  # the IQM column the reproduction writes (not read by fits)
        for seed, s in s_min.items():
            reach = s * (1.0 + b_noise / b)
            values = linear_curve(steps, reach)
            columns[f"{label} seed {seed}"] = 0.9 + 0 * steps if (label, seed) in never \
                else values
    pd.DataFrame(columns).to_csv(folder / checks.curve_file("sweep", "train/loss"), index=False)


def fit_entry(**overrides) -> dict:
    entry = {"name": "cb", "curve": "train/loss", "target": TARGET, "direction": "minimize",
             "model": "batch_noise", "x": dict(BATCHES)}
    entry.update(overrides)
    return entry


def claim_of(entries: list[dict], checks_=None, curves=("train/loss",)) -> claims.Claim:
    return claims.Claim.model_validate({
        "claim": "c", "reference": "r", "sweeps": ["sweep.yaml"], "curves": list(curves),
        "fits": entries, "checks": checks_ or [{"says": "s", "op": ">", "right": 0,
                                                "left": {"method": "x", "column": "iqm"}}]})


def read(folder, name="cb"):
    params, points, seeds = (pd.read_csv(folder / f) for f in fits.files(name))
    return params.set_index("method"), points.set_index("method"), seeds


def test_a_known_s_min_and_b_noise_are_recovered_with_intervals_over_seeds(tmp_path):
    write_curves(tmp_path)
    fits.write(claim_of([fit_entry()]), tmp_path, ["sweep"])
    params, points, seeds = read(tmp_path)
    # each seed's fit is exact (the steps are whole numbers on the model)
    assert seeds["B_noise"].to_numpy() == pytest.approx([B_NOISE] * 3, rel=1e-6)
    assert seeds["S_min"].to_numpy() == pytest.approx(list(S_MIN.values()), rel=1e-6)
    assert seeds["rms_log_residual"].max() < 1e-6
    assert params.loc["B_noise", "estimate"] == pytest.approx(B_NOISE, rel=1e-6)
    assert params.loc["B_crit", "estimate"] == pytest.approx(B_NOISE, rel=1e-6)
    assert params.loc["S_min", "estimate"] == pytest.approx(128.0, rel=1e-6)
    assert params.loc["E_min", "estimate"] == pytest.approx(128.0 * B_NOISE, rel=1e-6)
    # the interval of S_min over seeds 64, 128, 192: mean +- t(2) s / sqrt(3), within [0, inf)
    half = 4.302652729911275 * 64.0 / math.sqrt(3)
    assert params.loc["S_min", "ci_high"] == pytest.approx(128.0 + half, rel=1e-6)
    assert params.loc["S_min", "ci_low"] == 0.0
    assert set(params["n"]) == {3}
    # per arm: steps to target over the seeds, samples = steps x B, the model beside them
    expected = 128.0 * (1 + B_NOISE / 8)
    assert points.loc["sgd+b8", "steps"] == pytest.approx(expected)
    assert points.loc["sgd+b8", "samples"] == pytest.approx(8 * expected)
    assert points.loc["sgd+b8", "samples_high"] == pytest.approx(
        8 * points.loc["sgd+b8", "steps_high"])
    assert points.loc["sgd+b8", "model_steps"] == pytest.approx(expected, rel=1e-6)
    assert points["in_fit"].all() and (points["not_reached"] == 0).all()


def test_the_fit_is_on_log_steps_so_the_large_batches_fix_s_min(tmp_path):
    """Steps that level off at 5 while the smallest batch needs 84 (critical-batch's shape): a
    fit on log S puts S_min near the plateau, where least squares on S would put it at 12."""
    out = fits.fit_batch_noise([8, 32, 128, 512, 2048, 8192], [84, 58, 13, 13, 5, 5])
    assert 5 <= out["S_min"] <= 7 and 100 < out["B_noise"] < 250
    assert out["E_min"] == pytest.approx(out["S_min"] * out["B_noise"])


def test_a_batch_noise_beyond_the_largest_batch_is_not_identified():
    """S still falling as 1/B at the largest B: no level is in sight, the parameters are NaN."""
    out = fits.fit_batch_noise([8, 16, 32], [800, 400, 200])
    assert math.isnan(out["B_noise"]) and math.isnan(out["S_min"])
    assert fits.fit_batch_noise([8, 16, 32], [5, 5, 5])["B_noise"] == pytest.approx(0, abs=1e-6)


def test_an_arm_with_a_seed_that_never_reaches_the_target_is_left_out(tmp_path):
    """Censored: the seed's steps are only a lower bound, so its arm is left out of every
    seed's fit (the others still give the model exactly) and its steps are NaN."""
    write_curves(tmp_path, never={("sgd+b8", "1")})
    fits.write(claim_of([fit_entry()]), tmp_path, ["sweep"])
    params, points, _ = read(tmp_path)
    assert not points.loc["sgd+b8", "in_fit"] and points.loc["sgd+b8", "not_reached"] == 1
    assert math.isnan(points.loc["sgd+b8", "steps"])
    assert points.drop("sgd+b8")["in_fit"].all()
    assert params.loc["B_noise", "estimate"] == pytest.approx(B_NOISE, rel=1e-6)


def test_too_few_arms_reached_gives_nan_and_a_check_on_it_fails(tmp_path):
    never = {(label, "0") for label in list(BATCHES)[:4]}
    write_curves(tmp_path, never=never)
    check = {"says": "B_noise above 10", "op": ">", "right": 10,
             "left": {"method": "B_noise", "file": "fit_cb", "column": "ci_low"}}
    claim = claim_of([fit_entry()], [check])
    fits.write(claim, tmp_path, ["sweep"])
    params, points, _ = read(tmp_path)
    assert points["in_fit"].sum() == 2
    assert params[["estimate", "ci_low", "ci_high"]].isna().all().all()
    [outcome] = checks.evaluate(claim, tmp_path, ["sweep"], quick=False)
    assert not outcome.passed


def test_checks_read_the_fit_and_its_points_by_file(tmp_path):
    write_curves(tmp_path)
    claim = claim_of([fit_entry()], [
        {"says": "B_noise interval above 100", "op": ">", "right": 100,
         "left": {"method": "B_noise", "file": "fit_cb", "column": "ci_low"}},
        {"says": "S falls 10-fold", "op": ">", "factor": 10,
         "left": {"method": "sgd+b8", "file": "fit_cb_points", "column": "steps"},
         "right": {"method": "sgd+b8192", "file": "fit_cb_points", "column": "steps"}},
        {"says": "S falls 10-fold, the intervals apart", "op": ">", "factor": 10,
         "left": {"method": "sgd+b8", "file": "fit_cb_points", "column": "steps_low"},
         "right": {"method": "sgd+b8192", "file": "fit_cb_points", "column": "steps_high"}},
        {"says": "B_noise below 100", "op": "<", "right": 100,
         "left": {"method": "B_noise", "file": "fit_cb", "column": "estimate"}}])
    fits.write(claim, tmp_path, ["sweep"])
    above, falls, apart, below = checks.evaluate(claim, tmp_path, ["sweep"], quick=False)
    assert above.passed and "B_noise.ci_low (fit_cb.csv)" in above.detail
    assert falls.passed and (falls.left, falls.right) == (2176.0, 1300.0)
    # the t(2) interval of 1088, 2176, 3264 steps at B = 8 reaches down to 0
    assert apart.left == 0.0 and not apart.passed
    assert not below.passed


def test_a_measured_quantity_is_read_at_the_step_its_run_reached_the_target(tmp_path):
    """The noise scale a ramp measured, per seed at the first step its loss reached the
    target (its last logged value at or before that step), is a row beside the fit."""
    write_curves(tmp_path)
    steps = np.arange(0, 101, dtype=float)
    loss = {"step": steps, "ramp seed 0": linear_curve(steps, 10),
            "ramp seed 1": linear_curve(steps, 20), "ramp seed 2": 0.9 + 0 * steps}
    pd.DataFrame(loss).to_csv(tmp_path / checks.curve_file("ramp", "train/loss"), index=False)
    logged = steps[1::5]  # 1, 6, 11, 16, 21, ...: seed 0 reached at 10 (read at 6), 1 at 20
    noise = {"step": logged, "ramp seed 0": 100 + logged, "ramp seed 1": 200 + logged,
             "ramp seed 2": 300 + logged}
    pd.DataFrame(noise).to_csv(tmp_path / checks.curve_file("ramp", "batch/noise_scale"),
                               index=False)
    entry = fit_entry(measured={"name": "B_simple", "sweep": "ramp", "method": "ramp",
                                "metric": "batch/noise_scale"})
    fits.write(claim_of([entry], curves=("train/loss", "batch/noise_scale")), tmp_path,
               ["sweep", "ramp"])
    params, _, _ = read(tmp_path)
    assert params.loc["B_simple", "n"] == 2  # seed 2 never reached it: left out
    assert params.loc["B_simple", "estimate"] == pytest.approx((106 + 216) / 2)


SWEEP = {
    "name": "fixed",
    "task": {"name": "logreg", "params": {"n_samples": 64, "dim": 5}},
    "methods": {"step_size": [{"name": "constant", "label": "sgd"}],
                "batch_size": [{"name": "constant", "label": f"b{b}", "fixed": {"size": b}}
                               for b in (8, 16, 32)]},
    "seeds": 2, "trials": 1, "sampler": {"name": "random", "seed": 0}, "pruner": "none",
    "budget": {"steps": 20},
}
GOOD = {"name": "cb", "curve": "train/loss", "target": 0.5, "direction": "minimize",
        "model": "batch_noise", "x": {"sgd+b8": 8, "sgd+b16": 16, "sgd+b32": 32}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A reproduction folder with one resolvable sweep (resolved once: its cache is kept)."""
    path = tmp_path_factory.mktemp("claim")
    (path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP, sort_keys=False))
    return path


def write_claim(folder, fit: dict, curves=("train/loss",)):
    (folder / "claim.yaml").write_text(yaml.safe_dump({
        "claim": "c", "reference": "r", "sweeps": ["sweep.yaml"], "curves": list(curves),
        "fits": [fit], "checks": [{"says": "s", "op": ">", "right": 0,
                                   "left": {"method": "B_noise", "file": "fit_cb",
                                            "column": "ci_low"}}]}))


def test_a_good_fit_entry_loads(folder, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(folder / "cache"))
    write_claim(folder, GOOD)
    assert claims.load(folder).fits[0].x == GOOD["x"]


@pytest.mark.parametrize("change, key, says", [
    ({"x": {"sgd+b8": 8, "sgd+b9": 16, "sgd+b32": 32}}, "fits[0].x.sgd+b9",
     "'sgd+b9' is not a method label of sweep fixed; did you mean 'sgd+b8'?"),
    ({"curve": "train/accuracy"}, "fits[0].curve", "not under curves; allowed: train/loss"),
    ({"sweep": "fixd"}, "fits[0].sweep", "did you mean 'fixed'? allowed: fixed"),
    ({"measured": {"name": "B_simple", "method": "sgd+b8", "metric": "batch/noise_scale"}},
     "fits[0].measured.metric", "batch/noise_scale is not under curves"),
    ({"measured": {"name": "B_simple", "method": "ramp", "metric": "train/loss"}},
     "fits[0].measured.method", "'ramp' is not a method label of sweep fixed"),
    ({"x": {"sgd+b8": 8, "sgd+b16": 8, "sgd+b32": 32}}, "fits[0]", "3 distinct batch sizes"),
    ({"x": {"sgd+b8": 8, "sgd+b16": 0, "sgd+b32": 32}}, "fits[0]", "allowed: a batch size > 0"),
    ({"model": "power"}, "fits[0].model", "allowed: batch_noise"),
    ({"direction": "down"}, "fits[0].direction", "allowed: minimize, maximize"),
    ({"measured": {"name": "S_min", "method": "sgd+b8", "metric": "train/loss"}},
     "fits[0].measured", "a fitted parameter's row"),
])
def test_a_bad_fit_entry_is_one_message_naming_the_file_and_key(folder, monkeypatch, change,
                                                                key, says):
    monkeypatch.setenv("WORKBENCH_CACHE", str(folder / "cache"))
    write_claim(folder, {**GOOD, **change})
    with pytest.raises(SpecError) as err:
        claims.load(folder)
    text = str(err.value)
    assert text.startswith(f"{folder / 'claim.yaml'}: {key}"), text
    assert says in text and "\n" not in text
