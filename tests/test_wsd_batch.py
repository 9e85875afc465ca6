"""wsd_batch (methods/batch_size/wsd_batch.py): its stages by hand on both triggers, the hold
through the decay phase, the loss smoothing, and the real loop."""

import math

import torch

from workbench import registry
from workbench.testbeds import Budget
from workbench.testbeds.optimisation.logreg import LogReg

# target 32 from 4 by doubling: stages 4, 8, 16, 32 (K = 3); 100 planned steps of 32: 3200
INFO = {"batch_size": 32, "n_samples": 1000, "total_steps": 100}


def method(**params):
    return registry.get("batch_size", "wsd_batch")(**params)


def drive(m, info, losses, samples):
    sizes = [m.start(info)]
    for step, (loss, seen) in enumerate(zip(losses, samples, strict=True), start=1):
        sizes.append(m.next_batch_size(step, {"loss": loss, "samples": seen, "grad_sq": 1.0,
                                              "batch_size": sizes[-1], "n_samples": 1000}))
    return sizes


def test_loss_thresholds_by_hand():
    m = method(start_size=4, smoothing=0.0)
    # thresholds 2 * 0.5^k: 1.0 -> stage 1; 1.2 keeps it (stages never fall); 0.4: log2(5) =
    # 2.3 -> 2; 0.1: log2(20) = 4.3 -> capped at K = 3
    losses = [2.0, 1.5, 1.0, 1.2, 0.4, 0.1]
    assert drive(m, INFO, losses, [10 * i for i in range(1, 7)]) == [4, 4, 4, 8, 8, 16, 32]
    # loss_ratio 0.8: 1.5 / 2 = 0.75 -> log(0.75) / log(0.8) = 1.29 -> 1
    m = method(start_size=4, smoothing=0.0, loss_ratio=0.8)
    assert drive(m, INFO, [2.0, 1.5], [10, 20]) == [4, 4, 8]


def test_held_through_the_decay_phase():
    m = method(start_size=4, smoothing=0.0)
    # 2900 of 3200 planned samples is past 1 - 0.1: the 0.1 loss no longer grows the batch
    assert drive(m, INFO, [2.0, 1.0, 0.1], [10, 20, 2900]) == [4, 4, 8, 8]
    m = method(start_size=4, smoothing=0.0, decay_fraction=0.0)
    assert drive(m, INFO, [2.0, 1.0, 0.1], [10, 20, 2900]) == [4, 4, 8, 32]


def test_smoothed_loss_is_bias_corrected():
    # smoothing 0.5, losses 2 then 0.5: corrected EMA 2, 1.0 (= 2 * 0.5: stage 1), then
    # 0.714, 0.6, 0.548, ... -> 0.5 from above, never reaching 2 * 0.5^2 (stage 2); an
    # uncorrected EMA would read 1.0 at the first step and grow at once
    m = method(start_size=4, smoothing=0.5)
    assert drive(m, INFO, [2.0] + [0.5] * 6, [10] * 7) == [4, 4, 8, 8, 8, 8, 8, 8]


def test_progress_trigger_by_hand():
    # stable phase 0.9 * 3200 = 2880 samples cut into K + 1 = 4 shares: 720, 1440, 2160
    m = method(start_size=4, trigger="progress")
    samples = [100, 719, 720, 1500, 2200, 3000]
    assert drive(m, INFO, [1.0] * 6, samples) == [4, 4, 4, 8, 16, 32, 32]
    # decay from half the run: stable phase 1600 samples, shares of 400; 1700 is decaying
    m = method(start_size=4, trigger="progress", decay_fraction=0.5)
    assert drive(m, INFO, [1.0] * 2, [500, 1700]) == [4, 8, 8]


def test_without_a_planned_horizon_progress_stays_at_zero():
    info = {"batch_size": 32, "n_samples": 1000}
    assert drive(method(start_size=4, trigger="progress"), info, [1.0] * 3,
                 [100, 10**6, 10**9]) == [4] * 4
    # the loss trigger still works (never in a decay phase)
    assert drive(method(start_size=4, smoothing=0.0), info, [2.0, 0.25],
                 [10, 10**9]) == [4, 4, 32]


def test_factor_rounding_and_bounds():
    # factor 1.5 from 3 to 20: 3, 4.5 -> 4 (half to even), 6.75 -> 7, 10.1, 15.2, 22.8 -> 20;
    # max_size 12 clips
    m = method(start_size=3, factor=1.5, smoothing=0.0, loss_ratio=0.5)
    info = {"batch_size": 20, "n_samples": 100, "total_steps": 50}
    losses = [1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125]
    assert drive(m, info, losses, [1] * 6) == [3, 3, 4, 7, 10, 15, 20]
    m = method(start_size=3, factor=1.5, smoothing=0.0, max_size=12)
    assert drive(m, info, losses, [1] * 6) == [3, 3, 4, 7, 10, 12, 12]
    # a first loss that is not positive leaves the loss trigger at the first stage
    assert drive(method(start_size=4, smoothing=0.0), INFO, [0.0, -1.0], [1, 2]) == [4, 4, 4]


def test_in_the_logreg_loop():
    log = []
    m = method(start_size=2, smoothing=0.0, loss_ratio=0.9)
    LogReg().run(LogReg.Params(n_samples=256, dim=5, batch_size=16),
                 {"step_size": registry.get("step_size", "constant")(lr=0.5),
                  "batch_size": m},
                 seed=0, device=torch.device("cpu"), budget=Budget(steps=40),
                 log=lambda step, metrics: log.append(dict(metrics)))
    sizes = [int(metrics["batch/size"]) for metrics in log[1:]]
    assert sizes[0] == 2 and sizes[-1] > 2
    assert all(b >= a for a, b in zip(sizes, sizes[1:], strict=False))
    assert set(sizes) <= {2, 4, 8, 16}
    assert all(math.isfinite(metrics["train/loss"]) for metrics in log)
