"""Each batch-size scheme against hand-computed sequences, its reference's rule, and the loop."""

import math

import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget
from workbench.testbeds.optimisation.logreg import LogReg
from workbench.testbeds.optimisation.loop import Problem, per_sample_stats


def method(name, **params):
    return registry.get("batch_size", name)(**params)


def drive(m, info, stats_per_step):
    """start(info), then next_batch_size on each step's stats: every answer, first included."""
    sizes = [m.start(info)]
    for step, stats in enumerate(stats_per_step, start=1):
        sizes.append(m.next_batch_size(step, stats))
    return sizes


def logreg_run(batch_method, steps=40, lr=0.5):
    """The real loop: (step, metrics) of every step of a small logistic regression."""
    log = []
    LogReg().run(LogReg.Params(n_samples=256, dim=5, batch_size=16),
                 {"step_size": registry.get("step_size", "constant")(lr=lr),
                  "batch_size": batch_method},
                 seed=0, device=torch.device("cpu"), budget=Budget(steps=steps),
                 log=lambda step, metrics: log.append((step, dict(metrics))))
    return log


def sizes_and_samples(log):
    sizes = [int(metrics["batch/size"]) for _, metrics in log]
    samples = [int(metrics["cost/samples"]) for _, metrics in log]
    assert samples[0] == 0
    assert all(samples[s] == samples[s - 1] + sizes[s] for s in range(1, len(log)))
    return sizes, samples


# ---- linear_ramp: Megatron-LM's --rampup-batch-size ------------------------------------------

def megatron_rampup(consumed, start, increment, ramp_samples, target):
    """Re-derivation of Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator rule: the
    (target - start) / increment increments share the ramp's samples equally; the batch is
    start plus one increment per share fully consumed, and the target once the ramp is over."""
    if consumed > ramp_samples:
        return target
    share = ramp_samples / ((target - start) // increment)
    return start + int(consumed / share) * increment


def megatron_schedule(start, increment, ramp_samples, target, steps):
    """Megatron's training loop: update on the samples consumed so far, then consume a batch."""
    consumed, sizes = 0, []
    for _ in range(steps):
        size = megatron_rampup(consumed, start, increment, ramp_samples, target)
        sizes.append(size)
        consumed += size
    return sizes


def linear_ramp_sizes(steps, target, **params):
    m = method("linear_ramp", **params)
    sizes, consumed = [m.start({"batch_size": target, "n_samples": 10**6})], 0
    for step in range(1, steps):
        consumed += sizes[-1]
        sizes.append(m.next_batch_size(step, {"samples": consumed}))
    return sizes


@pytest.mark.parametrize("start, increment, ramp_samples, target", [
    (16, 16, 96, 32), (4, 6, 1000, 64), (3, 5, 1001, 98), (1, 1, 1500, 100)])
def test_linear_ramp_reproduces_megatron_schedule(start, increment, ramp_samples, target):
    ours = linear_ramp_sizes(120, target, start_size=start, increment=increment,
                             ramp_samples=ramp_samples)
    assert ours == megatron_schedule(start, increment, ramp_samples, target, 120)
    assert ours[0] == start and ours[-1] == target


def test_linear_ramp_matches_megatrons_own_unit_test():
    # tests/unit_tests/test_num_microbatches_calculator.py::test_ramp_up: rampup [16, 16, 96],
    # global batch size 32; consumed samples after each step
    sizes = linear_ramp_sizes(11, 32, start_size=16, increment=16, ramp_samples=96)
    consumed = [sum(sizes[:k]) for k in range(12)]
    assert consumed == [0, 16, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256]


def test_linear_ramp_in_the_loop_follows_consumed_samples():
    log = logreg_run(method("linear_ramp", start_size=2, increment=3, ramp_samples=120))
    sizes, samples = sizes_and_samples(log)
    # batch size of step s: the rule at the samples consumed before it (target 16, 2 + 3k <= 16
    # in ceil(14 / 3) = 5 increments: the last one is cut at 16)
    expected = [min(16, megatron_rampup(samples[s - 1], 2, 3, 120, 17)) for s in range(1, 41)]
    assert sizes[1:] == expected
    assert sizes[1] == 2 and sizes[-1] == 16 and len(set(sizes)) == 6


def test_linear_ramp_over_steps_and_its_bounds():
    steps = [{"samples": 0}] * 8
    info = {"batch_size": 11, "n_samples": 100}
    ramp = {"trigger": "steps", "start_size": 2, "ramp_steps": 6}
    # 3 increments over 6 steps: one every 2 steps
    assert drive(method("linear_ramp", increment=3, **ramp), info, steps) == [
        2, 2, 5, 5, 8, 8, 11, 11, 11]
    # increment 4: 2, 6, 10, then cut at the target 11
    assert drive(method("linear_ramp", increment=4, **ramp), info, steps) == [
        2, 2, 6, 6, 10, 10, 11, 11, 11]
    assert drive(method("linear_ramp", increment=4, max_size=7, **ramp), info, steps) == [
        2, 2, 6, 6, 7, 7, 7, 7, 7]
    assert drive(method("linear_ramp", increment=4, min_size=5, **ramp), info, steps) == [
        5, 5, 6, 6, 10, 10, 11, 11, 11]
    # no task batch size: ramp to n_samples; start above the target: the target throughout
    full = drive(method("linear_ramp", increment=40, **ramp), {"batch_size": None,
                                                                "n_samples": 100}, steps)
    assert full == [2, 2, 42, 42, 82, 82, 100, 100, 100]
    assert drive(method("linear_ramp", start_size=50), info, steps) == [11] * 9


# ---- geometric_ramp ---------------------------------------------------------------------------

def test_geometric_ramp_over_steps():
    info = {"batch_size": 20, "n_samples": 100}
    steps = [{"samples": 0}] * 8
    m = method("geometric_ramp", trigger="steps", start_size=3, factor=2.0, every_steps=2)
    assert drive(m, info, steps) == [3, 3, 6, 6, 12, 12, 20, 20, 20]
    # factor 1.5: 2, 3, 4.5 -> 4 (round half to even), 6.75 -> 7, 10.125, 15.19, 22.78, capped
    m = method("geometric_ramp", trigger="steps", start_size=2, factor=1.5, every_steps=1,
               max_size=30)
    assert drive(m, {"batch_size": 64, "n_samples": 100}, steps) == [
        2, 3, 4, 7, 10, 15, 23, 30, 30]


def test_geometric_ramp_over_samples():
    m = method("geometric_ramp", start_size=4, factor=3.0, every_samples=10)
    consumed = [{"samples": c} for c in (4, 8, 12, 24, 36, 70, 10**9)]
    # growths: floor(c / 10) = 0, 0, 1, 2, 3, 7, ... -> 4, 4, 12, 36, 108 capped at the target 50
    assert drive(m, {"batch_size": 50, "n_samples": 1000}, consumed) == [
        4, 4, 4, 12, 36, 50, 50, 50]


def test_geometric_ramp_in_the_loop():
    log = logreg_run(method("geometric_ramp", trigger="steps", start_size=2, every_steps=10))
    sizes, _ = sizes_and_samples(log)
    assert sizes[1:] == [2] * 10 + [4] * 10 + [8] * 10 + [16] * 10


# ---- noise_scale ------------------------------------------------------------------------------

def norm_stats(grad_sq, trace, big, small=1):
    """Expected squared norms at batch sizes big and small for |G|^2 and tr(Sigma)."""
    return {"grad_sq_big": grad_sq + trace / big, "big_batch_size": big,
            "grad_sq_small": grad_sq + trace / small, "small_batch_size": small}


def test_noise_scale_hand_computed():
    info = {"batch_size": 16, "n_samples": 1000}
    m = method("noise_scale", beta=0.0, every=2)
    assert m.start(info) == 16
    assert all(math.isnan(v) for v in m.diagnostics().values())
    # |G|^2 = 1, tr(Sigma) = 20: B_simple = 20, applied at step 2 only
    assert m.next_batch_size(1, norm_stats(1.0, 20.0, 10)) == 16
    assert m.diagnostics() == pytest.approx({"batch/noise_scale": 20.0,
                                             "batch/grad_sq_est": 1.0,
                                             "batch/trace_cov_est": 20.0})
    assert m.next_batch_size(2, norm_stats(1.0, 20.0, 10)) == 20
    assert m.next_batch_size(3, norm_stats(2.0, 20.0, 10)) == 20
    assert m.next_batch_size(4, norm_stats(2.0, 20.0, 10)) == 10
    # scaled; a negative |G|^2 estimate with positive noise: the largest batch; negative noise:
    # the smallest
    m = method("noise_scale", beta=0.0, every=1, scale=0.5, max_size=300)
    m.start(info)
    assert m.next_batch_size(1, norm_stats(1.0, 30.0, 8)) == 15
    assert m.next_batch_size(2, norm_stats(-1.0, 30.0, 8)) == 300
    assert m.next_batch_size(3, norm_stats(1.0, -30.0, 8)) == 2
    # a batch of one measures nothing: the batch is kept and the estimates too
    assert m.next_batch_size(4, norm_stats(5.0, 5.0, 1)) == 2
    assert m.diagnostics()["batch/noise_scale"] == pytest.approx(-30.0)


def test_noise_scale_averages_the_estimates_not_their_ratio():
    m = method("noise_scale", beta=0.5, every=1, max_size=10**6)
    m.start({"batch_size": 16, "n_samples": 10**6})
    m.next_batch_size(1, norm_stats(1.0, 10.0, 4))
    m.next_batch_size(2, norm_stats(3.0, 90.0, 4))
    # EMAs (m_0 = 0): |G|^2: 0.25 * 1 + 0.5 * 3 = 1.75, S: 0.25 * 10 + 0.5 * 90 = 47.5
    correction = 1 - 0.5**2
    assert m.diagnostics() == pytest.approx({"batch/noise_scale": 47.5 / 1.75,
                                             "batch/grad_sq_est": 1.75 / correction,
                                             "batch/trace_cov_est": 47.5 / correction})


def gpt_neox_noise_scale(norms, batch_small, n_batches, beta):
    """Re-derivation of gpt-neox's GradientNoiseScale on given squared norms: one estimate per
    n_batches calls, B_big = n_batches * B_small; each estimate averaged as
    m = beta m + (1 - beta) x from m = 0 and reported as m / (1 - beta^(i + 1)), i counting
    calls; noise scale = reported S / reported |G|^2. Returns (m_G, m_S, reported G, reported S,
    noise scale) after each estimate."""
    batch_big = batch_small * n_batches
    m_grad, m_trace, out = 0.0, 0.0, []
    for j, (small_sq, big_sq) in enumerate(norms):
        calls_so_far = n_batches * j + n_batches - 1
        grad_sq = (batch_big * big_sq - batch_small * small_sq) / (batch_big - batch_small)
        trace = (small_sq - big_sq) / (1 / batch_small - 1 / batch_big)
        m_grad = beta * m_grad + (1 - beta) * grad_sq
        m_trace = beta * m_trace + (1 - beta) * trace
        shown_grad = m_grad / (1 - beta ** (calls_so_far + 1))
        shown_trace = m_trace / (1 - beta ** (calls_so_far + 1))
        out.append((m_grad, m_trace, shown_grad, shown_trace, shown_trace / shown_grad))
    return out


def test_noise_scale_reproduces_gpt_neox_estimates():
    gen = torch.Generator().manual_seed(3)
    grad_sq = 2.0 + torch.rand(30, generator=gen, dtype=torch.float64)
    trace = 40.0 * (1.0 + torch.rand(30, generator=gen, dtype=torch.float64))
    small, n_batches, beta = 4, 10, 0.99
    norms = [(float(g + t / small), float(g + t / (small * n_batches)))
             for g, t in zip(grad_sq, trace, strict=True)]
    reference = gpt_neox_noise_scale(norms, small, n_batches, beta)
    m = method("noise_scale", beta=beta, every=5, max_size=10**6)
    m.start({"batch_size": 16, "n_samples": 10**6})
    for step, ((small_sq, big_sq), (m_grad, m_trace, _, _, scale)) in enumerate(
            zip(norms, reference, strict=True), start=1):
        size = m.next_batch_size(step, {"grad_sq_big": big_sq, "big_batch_size": 40,
                                        "grad_sq_small": small_sq, "small_batch_size": small})
        shown = m.diagnostics()
        assert shown["batch/noise_scale"] == pytest.approx(scale, rel=1e-12)
        # our bias correction counts estimates (gpt-neox counts its 10 calls per estimate)
        assert shown["batch/grad_sq_est"] * (1 - beta**step) == pytest.approx(m_grad, rel=1e-12)
        assert shown["batch/trace_cov_est"] * (1 - beta**step) == pytest.approx(m_trace,
                                                                                rel=1e-12)
        if step % 5 == 0:
            assert size == round(scale)
    assert reference[-1][4] == pytest.approx(reference[-1][1] / reference[-1][0], rel=1e-12)


def test_noise_scale_recovers_known_noise_scale():
    """Gaussian per-sample gradients N(G, Sigma): B_simple = tr(Sigma) / |G|^2 = 40, measured
    through the loop's per-sample statistics on fresh samples each step."""
    steps, batch, dim, true_scale = 400, 32, 20, 40.0
    gen = torch.Generator().manual_seed(0)
    sd = torch.linspace(0.5, 2.0, dim, dtype=torch.float64)
    direction = torch.randn(dim, generator=gen, dtype=torch.float64)
    mean = direction / direction.norm() * math.sqrt(float((sd**2).sum()) / true_scale)
    grads = mean + sd * torch.randn(steps * batch, dim, generator=gen, dtype=torch.float64)
    x = torch.zeros(dim, dtype=torch.float64, requires_grad=True)
    problem = Problem([x], steps * batch, lambda idx: None, dict,
                      sample_loss=lambda variables, g: variables[0] @ g, data=(grads,))
    m = method("noise_scale", beta=0.995, max_size=1000)
    m.start({"batch_size": batch, "n_samples": 10**6})
    for step in range(1, steps + 1):
        _, stats = per_sample_stats(problem, torch.arange((step - 1) * batch, step * batch))
        size = m.next_batch_size(step, stats)
    assert m.diagnostics()["batch/noise_scale"] == pytest.approx(true_scale, rel=0.1)
    assert m.diagnostics()["batch/trace_cov_est"] == pytest.approx(float((sd**2).sum()),
                                                                   rel=0.05)
    assert size == pytest.approx(true_scale, rel=0.1)


def test_noise_scale_in_the_loop():
    m = method("noise_scale", every=5, scale=2.0)
    log = logreg_run(m)
    sizes, _ = sizes_and_samples(log)
    noise = [metrics["batch/noise_scale"] for _, metrics in log[1:]]
    assert all(math.isfinite(v) and v > 0 for v in noise)
    assert sizes[0] == sizes[1] == 16
    for step in range(1, 40):
        if step % 5 == 0:
            assert sizes[step + 1] == max(2, min(256, round(2.0 * noise[step - 1])))
        else:
            assert sizes[step + 1] == sizes[step]
    assert len(set(sizes)) > 2


# ---- norm_test --------------------------------------------------------------------------------

def variance_stats(variance, grad_sq, batch):
    return {"grad_var": variance, "grad_sq_big": grad_sq, "big_batch_size": batch}


def test_norm_test_hand_computed():
    m = method("norm_test", eta=1.0, every=2, max_size=50)
    assert m.start({"batch_size": 4, "n_samples": 1000}) == 4
    assert math.isnan(m.diagnostics()["batch/norm_test_stat"])
    # step 1 tested: V / b = 8 / 4 > 1 * |g|^2 = 1 -> ceil(8 / 1) = 8
    assert m.next_batch_size(1, variance_stats(8.0, 1.0, 4)) == 8
    assert m.diagnostics()["batch/norm_test_stat"] == 2.0
    # step 2 not tested
    assert m.next_batch_size(2, variance_stats(100.0, 1.0, 8)) == 8
    # step 3: 8.5 / 8 > 1 -> 9; step 5: passes (never decreases); step 7: 100 capped at 50
    assert m.next_batch_size(3, variance_stats(8.5, 1.0, 8)) == 9
    assert m.next_batch_size(5, variance_stats(0.1, 1.0, 9)) == 9
    assert m.next_batch_size(7, variance_stats(100.0, 1.0, 9)) == 50
    # eta = 0.5: V / b = 3 / 9 > 0.25 * 1 -> ceil(3 / 0.25) = 12
    m = method("norm_test", eta=0.5)
    m.start({"batch_size": 9, "n_samples": 1000})
    assert m.next_batch_size(1, variance_stats(3.0, 1.0, 9)) == 12
    # zero gradient with noise: the largest batch
    assert m.next_batch_size(2, variance_stats(3.0, 0.0, 12)) == 1000


def adadagrad_reference(per_sample_batches, eta, interval, max_batch_size):
    """Re-derivation of the AdAdaGrad authors' norm test and loop (timlautk/AdAdaGrad): at
    iterations 0, interval, ... while below the largest batch, V = sum over parameters and
    coordinates of the unbiased per-coordinate variance of the per-sample gradients, and the
    next batch is ceil(max(b, V / (eta^2 |g|^2))), capped."""
    sizes = []
    for iteration, grads in enumerate(per_sample_batches):
        batch = grads[0].shape[0]
        size = batch
        if iteration % interval == 0 and batch < max_batch_size:
            variance = sum(float(g.var(dim=0, correction=1).abs().sum()) for g in grads)
            grad_sq = sum(float(g.mean(dim=0).square().sum()) for g in grads)
            size = min(math.ceil(max(batch, variance / (eta**2 * grad_sq))), max_batch_size)
        sizes.append(size)
    return sizes


def test_norm_test_reproduces_adadagrad_reference():
    """Two parameter tensors; per-sample gradients whose mean shrinks: batch sizes of the
    reference rule and of ours, number for number."""
    gen = torch.Generator().manual_seed(1)
    x = [torch.zeros(3, dtype=torch.float64, requires_grad=True),
         torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)]

    def sample_loss(variables, a, b):  # per-sample gradients (a, b)
        return variables[0] @ a + (variables[1] * b).sum()

    m = method("norm_test", eta=0.3, every=3, max_size=300)
    size = m.start({"batch_size": 4, "n_samples": 10**6})
    batches, ours = [], []
    for step in range(1, 41):
        shrink = 0.9**step
        a = shrink * torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + torch.randn(
            size, 3, generator=gen, dtype=torch.float64)
        b = shrink * torch.ones(2, 2, dtype=torch.float64) + 0.5 * torch.randn(
            size, 2, 2, generator=gen, dtype=torch.float64)
        problem = Problem(x, size, lambda idx: None, dict, sample_loss=sample_loss, data=(a, b))
        _, stats = per_sample_stats(problem, None)
        batches.append((a, b))
        size = m.next_batch_size(step, stats)
        ours.append(size)
    reference = adadagrad_reference(batches, eta=0.3, interval=3, max_batch_size=300)
    assert ours == reference
    assert len(set(ours)) > 3 and ours[-1] == 300


def test_norm_test_grows_the_batch_as_the_gradient_shrinks():
    eta = 0.5
    log = logreg_run(method("norm_test", eta=eta))
    sizes, _ = sizes_and_samples(log)
    grad_norms = [metrics["train/grad_norm"] for _, metrics in log[1:]]
    stats = [metrics["batch/norm_test_stat"] for _, metrics in log[1:]]
    assert sizes[0] == sizes[1] == 16
    assert all(later >= earlier for earlier, later in zip(sizes, sizes[1:], strict=False))
    assert sizes[-1] >= 4 * sizes[1]
    assert sum(grad_norms[-10:]) < 0.5 * sum(grad_norms[:10])
    for step in range(1, 40):
        grew = sizes[step + 1] > sizes[step]
        assert grew == (stats[step - 1] > eta**2 and sizes[step] < 256)
        if grew:  # the smallest batch that passes: ceil(V / (eta^2 |g|^2)), at most n_samples
            needed = stats[step - 1] * sizes[step] / eta**2
            assert sizes[step + 1] == pytest.approx(min(needed, 256), abs=1.0)


# ---- shared behaviour -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["linear_ramp", "geometric_ramp", "noise_scale", "norm_test",
                                  "wsd_batch", "seq_ramp"])
def test_bounds_follow_the_task(name):
    info = {"batch_size": 8, "n_samples": 5}
    # min_size above n_samples is lowered to it; max_size 0 is n_samples
    assert method(name, min_size=9, start_size=3).start(info) == 5
    assert method(name, max_size=4, start_size=30).start(info) <= 4
    assert method(name, min_size=3, max_size=4, start_size=1).start(info) == 3


@pytest.mark.parametrize("name, params", [
    ("linear_ramp", {"start_size": 2, "increment": 2, "ramp_samples": 64}),
    ("geometric_ramp", {"start_size": 2, "trigger": "steps", "every_steps": 5}),
    ("noise_scale", {"every": 5}),
    ("norm_test", {"eta": 0.5}),
    ("wsd_batch", {"start_size": 2, "smoothing": 0.0, "loss_ratio": 0.9}),
])
def test_a_method_instance_restarts_fresh(name, params):
    m = method(name, **params)
    first = [int(metrics["batch/size"]) for _, metrics in logreg_run(m, steps=20)]
    second = [int(metrics["batch/size"]) for _, metrics in logreg_run(m, steps=20)]
    assert first == second and len(set(first)) > 1
