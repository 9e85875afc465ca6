"""seq_ramp (methods/batch_size/seq_ramp.py): the batch-and-sequence stages by hand (even and
given starts, doubling and the T^(2/3) sizing), the family's sequence_length hook and its
default, and the RLVR loop capping each step's rollouts at the hooked length."""

from __future__ import annotations

import math

import pytest
import torch

from methods.batch_size.seq_ramp import batch_times_sequence
from tests.test_rlvr_loop import cache, run_rlvr  # noqa: F401 (cache: the autouse fixture)
from workbench import registry
from workbench.families import BatchSlot
from workbench.testbeds.rlvr.backends import HFBackend


def method(**params):
    return registry.get("batch_size", "seq_ramp")(**params)


def drive(m, batch_size, n_samples, samples, configured=16):
    """(batch size, sequence length) from start and after each consumed-sample count."""
    slot = BatchSlot(m, n_samples)
    sizes = [(slot.start(batch_size), slot.sequence_length(0, configured))]
    for step, seen in enumerate(samples, start=1):
        size = slot.after_step(step, loss=1.0, grad_sq=1.0, batch_size=sizes[-1][0],
                               samples=seen)
        sizes.append((size, slot.sequence_length(step, configured)))
    return sizes


def test_even_doubling_by_hand():
    # K = 2 growths at 1/3 and 2/3 of N = 1200: samples 400 and 800; B = 128 from 128 / 4 = 32,
    # S = 16 from 16 / 4 = 4, both doubling
    assert drive(method(), 128, 1200, [399, 400, 799, 800, 5000]) == [
        (32, 4), (32, 4), (64, 8), (64, 8), (128, 16), (128, 16)]


def test_given_starts_and_rounding_by_hand():
    # K = 3 starts 0.1, 0.3, 0.5 of N = 1000 (total_samples overrides the budget's 10**6):
    # 100, 300, 500 samples; B = 100 from 100 / 8 = 12.5 -> 12 (half to even), 25, 50, 100;
    # S = 10 from 1.25 -> 1, 2.5 -> 2, 5, 10
    m = method(stages=3, first_start=0.1, last_start=0.5, total_samples=1000)
    assert drive(m, 100, 10**6, [99, 100, 300, 500], configured=10) == [
        (12, 1), (12, 1), (25, 2), (50, 5), (100, 10)]


def test_start_size_and_length_cap_at_the_targets():
    # b_0 = 48: 48, 96 -> B = 64; S_0 = 12: 12, 24 -> 16
    m = method(start_size=48, start_length=12)
    assert drive(m, 64, 900, [300, 600]) == [(48, 12), (64, 16), (64, 16)]


def test_t23_sizing_by_hand():
    # stage k sizes B and S by f_{k+1}^(1/3), f = 1/3, 2/3, 1: 0.6934, 0.8736, 1:
    # B = 128: 88.75 -> 89, 111.8 -> 112, 128; S = 16: 11.09 -> 11, 13.98 -> 14, 16; the
    # product 128 * 16 * (1/3)^(2/3) = 984.6 ~ 89 * 11 = 979
    assert drive(method(sizing="t23"), 128, 1200, [400, 800]) == [
        (89, 11), (112, 14), (128, 16)]
    assert batch_times_sequence(8.0) == pytest.approx(4.0)
    assert batch_times_sequence(1e6, 0.5) == pytest.approx(5e3)


def test_one_stage_and_bad_starts():
    assert drive(method(stages=1, last_start=0.5), 64, 100, [49, 50]) == [
        (32, 8), (32, 8), (64, 16)]
    # starts given in the wrong order are taken in order (a tuned trial never fails on them)
    assert method(first_start=0.5, last_start=0.2).starts() == pytest.approx([0.2, 0.5])
    assert method(first_start=0.2, last_start=0.5).starts() == pytest.approx([0.2, 0.5])


def test_without_a_method_or_the_hook_the_configured_cap_stays():
    assert BatchSlot(None, 100).sequence_length(3, 12) == 12
    constant = registry.get("batch_size", "constant")()
    slot = BatchSlot(constant, 100)
    slot.start(8)
    assert slot.sequence_length(0, 12) == 12


def test_the_rlvr_loop_caps_rollouts_at_the_hooked_length(monkeypatch):
    calls = []
    original = HFBackend.generate

    def spy(self, prompts, n, *args, **kwargs):
        out = original(self, prompts, n, *args, **kwargs)
        calls.append((kwargs["max_new_tokens"], max(len(r) for r in out.response_ids)))
        return out

    monkeypatch.setattr(HFBackend, "generate", spy)
    # B = 4 x 4 = 16 (batch_axis prompts), K = 2 at 8 and 16 of total_samples 24: sizes 4, 8,
    # 16 and caps 8 / 4 = 2, 4, 8. Steps consume 4, 4, 8 completions: the growths come after
    # step 2 (8 samples) and step 3 (16)
    ramp = method(total_samples=24)
    _, logged = run_rlvr({"batch_size": ramp}, steps=4, max_new_tokens=8)
    steps = [m for step, m in logged if step > 0 and "batch/sequence_length" in m]
    assert [m["batch/sequence_length"] for m in steps] == [2.0, 2.0, 4.0, 8.0]
    assert [m["batch/size"] for m in steps] == [4.0, 4.0, 8.0, 16.0]
    for m in steps:
        assert m["train/response_length"] <= m["batch/sequence_length"]
    assert all(longest <= cap for cap, longest in calls)
    assert {cap for cap, _ in calls} == {2, 4, 8}  # the evaluation keeps the configured 8
    assert all(math.isfinite(m["train/policy_loss"]) for m in steps)
    assert torch.tensor([m["batch/sequence_length"] for m in steps]).max() == 8.0


def test_the_contract_refuses_a_cap_outside_the_configured_one():
    from workbench.families._checks import ContractViolation
    from workbench.families.batch_size import check_configuration

    base = registry.get("batch_size", "seq_ramp")

    class Longer(base):
        def sequence_length(self, step, configured):
            return configured + 1

    with pytest.raises(ContractViolation, match="sequence_length"):
        check_configuration(Longer, {}, Longer())
    check_configuration(base, {}, base())
    check_configuration(base, {"sizing": "t23", "stages": 3}, base(sizing="t23", stages=3))
