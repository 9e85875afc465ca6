"""The rollout / training mismatch (workbench.testbeds.rlvr.mismatch), the sampler's log-probs
of the hf backend, bf16 precision, and truncated importance sampling in the loop."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget, get_task
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.loop import RLSettings, build_batch, response_log_probs
from workbench.testbeds.rlvr.mismatch import importance_weights, mismatch_metrics, tis_weights
from workbench.testbeds.rlvr.model import ModelConfig, build_model
from workbench.testbeds.rlvr.problems import generate
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer
from workbench.testbeds.shared.losses import ppo_clip_loss

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [p.prompt for p in generate("add", 6, seed=0)]
TINY = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "warmup_steps": 5,
        "warmup_batch": 8, "n_train": 60, "n_eval": 4, "eval_k_prompts": 2, "eval_k": 2,
        "prompts": 2, "group_size": 4, "eval_every": 5, "digits_min": 1, "digits_max": 2,
        "warmup_target": None, "max_new_tokens": 6}


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def policy():
    tokenizer = build_char_tokenizer()
    model = build_model(ModelConfig(hidden=64, layers=2, heads=2, intermediate=128), tokenizer)
    return model, tokenizer


def trainer_log_probs(model, tokenizer, rollouts, temperature, precision="fp32"):
    batch = build_batch(rollouts, generate("add", len(rollouts.texts), seed=0),
                        list(range(len(rollouts.texts))), tokenizer.pad_token_id, 0.0, "cpu")
    context = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
               else torch.no_grad())
    with torch.no_grad(), context:
        log_probs = response_log_probs(model, batch, temperature)[0]
    return batch, log_probs


def test_the_hf_backend_returns_the_log_probs_it_sampled_from_after_temperature(policy):
    model, tokenizer = policy
    backend = make_backend("hf", model, tokenizer, None, "cpu")
    rollouts = backend.generate(PROMPTS, 3, max_new_tokens=8, temperature=0.7, seed=1)
    assert [len(lp) for lp in rollouts.log_probs] == [len(r) for r in rollouts.response_ids]
    batch, expected = trainer_log_probs(model, tokenizer, rollouts, 0.7)
    assert torch.allclose(batch.rollout_log_probs, expected, atol=1e-4)
    assert batch.rollout_log_probs.abs().sum() > 0
    greedy = backend.generate(PROMPTS, 2, max_new_tokens=4, greedy=True)
    assert greedy.log_probs is None


def test_bf16_sampling_differs_from_fp32_by_a_small_kl(policy):
    model, tokenizer = policy
    bf16 = make_backend("hf", model, tokenizer, None, "cpu", precision="bf16")
    rollouts = bf16.generate(PROMPTS, 3, max_new_tokens=8, seed=2)
    batch, fp32 = trainer_log_probs(model, tokenizer, rollouts, 1.0)
    assert not torch.allclose(batch.rollout_log_probs, fp32, atol=1e-4)
    metrics = mismatch_metrics(fp32, batch.rollout_log_probs, batch.response_mask)
    assert 0 < metrics["train/rollout_kl"] < 0.05
    with pytest.raises(ValueError, match="precision"):
        make_backend("hf", model, tokenizer, None, "cpu", precision="fp16")


def test_mismatch_metrics_and_weights_by_hand():
    old = torch.tensor([[-1.0, -0.5, -3.0]])
    rollout = torch.tensor([[-2.0, -0.25, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    w = importance_weights(old, rollout, mask)
    assert torch.allclose(w, torch.tensor([[math.e, math.exp(-0.25), 0.0]]))
    metrics = mismatch_metrics(old, rollout, mask, cap=2.0)
    k3 = ((math.e - 1 - 1.0) + (math.exp(-0.25) - 1 + 0.25)) / 2
    assert metrics["train/rollout_kl"] == pytest.approx(k3)
    assert metrics["train/rollout_is_mean"] == pytest.approx((math.e + math.exp(-0.25)) / 2)
    assert metrics["train/rollout_is_max"] == pytest.approx(math.e)
    assert metrics["train/rollout_is_capped_frac"] == 0.5
    assert "train/rollout_is_capped_frac" not in mismatch_metrics(old, rollout, mask)


def test_truncated_importance_sampling_matches_verls_vanilla_loss_by_hand():
    """Reference-checked: verl's compute_policy_loss_vanilla with tis_imp_ratio_cap = 2 (and
    TRL's GRPO with vllm_importance_sampling_cap = 2) multiply the clipped per-token loss
    (after the dual clip) by min(exp(old - rollout), 2), then aggregate (token-mean). By hand,
    A = (1, -1, 2), ratios (1, 1.5, 0.5), clip 0.2, dual clip 3: per-token losses
    max(-1, -1) = -1, min(max(1.5, 1.2), 3) = 1.5, max(-1, -1.6) = -1; weights
    min(e, 2) = 2, exp(-0.25), min(exp(0.9), 2) = 2."""
    old = torch.tensor([[-1.0, -0.5, -1.0]])
    new = old + torch.log(torch.tensor([[1.0, 1.5, 0.5]]))
    rollout = torch.tensor([[-2.0, -0.25, -1.9]])
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3)
    weight = tis_weights(old, rollout, mask, cap=2.0)
    assert torch.allclose(weight, torch.tensor([[2.0, math.exp(-0.25), 2.0]]))
    loss, _ = ppo_clip_loss(new, old, adv, mask, 0.2, 0.2, dual_clip=3.0, weight=weight)
    expected = (-1.0 * 2.0 + 1.5 * math.exp(-0.25) + -1.0 * 2.0) / 3
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="tis_cap"):
        tis_weights(old, rollout, mask, cap=0.0)


def run(advantage: str = "grpo", **params):
    task = get_task("rlvr-arith")
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", advantage)()
    logged = []
    result = task().run(task.Params(**{**TINY, **params}), methods, seed=0,
                        device=torch.device("cpu"), budget=Budget(steps=2),
                        log=lambda step, m: logged.append((step, dict(m))))
    return result, logged


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_loop_logs_precision_and_the_mismatch_every_step(precision):
    result, logged = run(precision=precision, tis_cap=2.0)
    assert result["train/precision_bits"] == (16.0 if precision == "bf16" else 32.0)
    for step, metrics in logged[1:]:
        for name in ("train/rollout_kl", "train/rollout_is_mean", "train/rollout_is_max",
                     "train/rollout_is_capped_frac", "time/weight_sync_seconds"):
            assert math.isfinite(metrics[name]), (step, name)
    kl = [m["train/rollout_kl"] for _, m in logged[1:]]
    if precision == "fp32":  # KV-cache sampling against a full forward pass: last bits only
        assert max(kl) < 1e-5
    assert math.isfinite(result["train/policy_loss"])


def test_bf16_trains_a_value_head_in_float32():
    result, logged = run("gae", precision="bf16")
    assert math.isfinite(result["train/value_loss"]) and math.isfinite(result["adv/std"])
    assert "train/rollout_is_capped_frac" not in result  # no cap: TIS off


def test_settings_reject_a_bad_precision_or_cap():
    base = dict(max_new_tokens=4)
    fields = {name: getattr(RLSettings(**base), name) for name in RLSettings.model_fields}
    with pytest.raises(ValueError):
        RLSettings(**{**fields, "precision": "fp16"})
    with pytest.raises(ValueError):
        RLSettings(**{**fields, "tis_cap": 0.0})


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_token_benchmark_takes_the_precision_flag(tmp_path, precision):
    """benchmarks/gpu_check.sh calls ``rlvr_tokens.py --precision {fp32,bf16}``."""
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rlvr_tokens.py"), "--quick",
                    "--device", "cpu", "--prompts", "2", "--samples", "2",
                    "--max-new-tokens", "4", "--precision", precision, "--json", str(out)],
                   check=True, capture_output=True, cwd=ROOT, timeout=300)
    written = json.loads(out.read_text())
    assert written["precision"] == precision
    assert [row["precision"] for row in written["rows"]] == [precision]
    assert written["rows"][0]["train_tokens_per_s"] > 0
