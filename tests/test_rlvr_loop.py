"""The RLVR loop: batch layout, log-probability alignment, every slot end to end on a tiny model,
dynamic sampling, and (slow) learning above the warm-up checkpoint."""

from __future__ import annotations

import json
import math

import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget, get_task
from workbench.testbeds.rlvr import warmup
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.backends import Rollouts
from workbench.testbeds.rlvr.loop import RLSettings, build_batch, response_log_probs, sample_batch
from workbench.testbeds.rlvr.model import ModelConfig, build_model, sequence_log_probs
from workbench.testbeds.rlvr.problems import generate
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer

TINY = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "warmup_steps": 30,
        "warmup_batch": 16, "n_train": 200, "n_eval": 16, "eval_k_prompts": 4, "eval_k": 2,
        "prompts": 4, "group_size": 4, "eval_every": 2, "digits_min": 1, "digits_max": 2,
        "format_reward": 0.5, "warmup_target": None}  # 30 fixed steps: no validation checks


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def tiny_policy():
    tokenizer = build_char_tokenizer()
    model = build_model(ModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer)
    return model, tokenizer


def test_batch_puts_the_reward_at_the_last_response_token_and_aligns_log_probs(tiny_policy):
    model, tokenizer = tiny_policy
    problems = generate("add", 3, seed=0)
    eos = tokenizer.eos_token_id
    prompt_ids = [tokenizer(p.prompt)["input_ids"] for p in problems]
    answers = [p.answer for p in problems]
    responses = [tokenizer(answers[0], add_special_tokens=False)["input_ids"] + [eos],
                 tokenizer("1", add_special_tokens=False)["input_ids"],  # cut, wrong
                 tokenizer(answers[2] + "x", add_special_tokens=False)["input_ids"] + [eos]]
    texts = [answers[0], "1", answers[2] + "x"]
    rollouts = Rollouts(prompt_ids, responses, texts, [True, False, True])
    batch = build_batch(rollouts, problems, [0, 0, 1], tokenizer.pad_token_id, 0.0, "cpu")
    assert batch.scores.tolist() == [1.0, 0.0, 0.0]
    lengths = [len(r) for r in responses]
    assert batch.response_mask.sum(1).tolist() == lengths
    rewards = batch.rewards
    assert rewards[0, lengths[0] - 1] == 1 and rewards.sum() == 1
    with torch.no_grad():
        ours, entropy, _ = response_log_probs(model, batch, 1.0)
        full_mask = torch.zeros_like(batch.attention_mask)
        full_mask[:, batch.prompt_width:] = 1
        full_mask *= batch.attention_mask
        reference, ref_entropy = sequence_log_probs(model, batch.input_ids,
                                                    batch.attention_mask, full_mask)
    torch.testing.assert_close(ours, reference[:, batch.prompt_width:])
    torch.testing.assert_close(entropy, ref_entropy[:, batch.prompt_width:])


def test_dynamic_sampling_keeps_only_groups_with_reward_variance(tiny_policy):
    model, tokenizer = tiny_policy
    backend = make_backend("hf", model, tokenizer, "unused", "cpu")
    train = generate("add", 50, seed=1)
    settings = RLSettings(max_new_tokens=4, dynamic_sampling=True, max_refills=20,
                          format_reward=0.5)
    import random

    batch, stats = sample_batch(backend, train, random.Random(0), settings, prompts=3,
                                group_size=6, pad_id=tokenizer.pad_token_id, seed=0,
                                device="cpu")
    scores = batch.scores.view(-1, 6)
    if stats["train/rollout_draws"] <= settings.max_refills:
        assert (scores.max(1).values > scores.min(1).values).all()
    assert stats["train/zero_variance_groups"] > 0  # a random model solves nothing
    assert batch.scores.numel() == 18


def run_rlvr(methods: dict, steps: int = 2, **params):
    task = get_task("rlvr-arith")
    chosen = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    chosen.update(methods)
    logged = []
    result = task().run(task.Params(**{**TINY, **params}), chosen, seed=0,
                        device=torch.device("cpu"), budget=Budget(steps=steps),
                        log=lambda step, m: logged.append((step, dict(m))))
    return result, logged


@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo", "rloo", "reinforce_pp",
                                       "reinforce_pp_baseline", "remax", "opo", "gpg",
                                       "pass_at_k", "ddca", "laser", "gae", "vtrace",
                                       "sas"])
def test_every_advantage_method_trains_the_policy(advantage):
    result, logged = run_rlvr({"advantage": registry.get("advantage", advantage)()})
    assert result["steps"] == 2
    assert math.isfinite(result["train/policy_loss"])
    if advantage in ("gae", "vtrace"):  # PPO with a value head
        assert math.isfinite(result["train/value_loss"])
    for name in ["eval/accuracy", "eval/pass@2", "train/reward", "train/entropy",
                 "train/kl_ref", "train/clip_frac_low", "train/clip_frac_high",
                 "train/zero_variance_groups", "adv/mean", "adv/std", "train/response_length",
                 "time/rollout_tokens_per_second", "time/train_tokens_per_second"]:
        assert name in result, name


@pytest.mark.parametrize("entropy", ["constant", "target_entropy", "clip_higher", "clip_cov",
                                     "kl_cov", "top_entropy_tokens"])
def test_every_entropy_method_plugs_into_the_loss(entropy):
    result, _ = run_rlvr({"entropy": registry.get("entropy", entropy)()}, epochs=2)
    assert math.isfinite(result["train/policy_loss"])


@pytest.mark.parametrize("options", [
    {"loss_agg": "seq-mean-token-mean"}, {"loss_agg": "seq-mean-token-sum-norm"},
    {"ratio_level": "sequence"}, {"kl_coef": 0.1, "kl_kind": "k1"},
    {"dynamic_sampling": True, "max_refills": 1}, {"batch_axis": "group_size"},
    {"scratchpad": True, "kind": "sub"},
])
def test_loop_options_run(options):
    result, logged = run_rlvr({"batch_size": registry.get("batch_size", "linear_ramp")(
        start_size=8, increment=8, trigger="steps", ramp_steps=2)}, steps=3, **options)
    assert math.isfinite(result["train/policy_loss"])
    asked = [m["batch/prompts"] * m["batch/group_size"] for _, m in logged if "batch/prompts" in m]
    assert asked[0] == 8 and asked[-1] > 8  # the batch-size slot's answer, P x G


def test_kl_to_the_reference_starts_at_zero_and_grows():
    # dynamic sampling: every step trains on groups with reward variance, so the policy moves
    # (the tiny warm-up's rollouts can otherwise score 0 everywhere for several steps)
    _, logged = run_rlvr({"step_size": registry.get("step_size", "adam_schedule")(lr=0.01)},
                         steps=3, epochs=1, format_reward=0.5, dynamic_sampling=True,
                         max_refills=20)
    kls = [m["train/kl_ref"] for _, m in logged if "train/kl_ref" in m]
    assert kls[0] == pytest.approx(0.0, abs=1e-6)
    assert kls[-1] > 1e-4


# The band the default warm-up lands in (held-out greedy accuracy on its 256 problems): measured
# 0.320 and 0.383 for seeds 0 and 1 with named seed streams; 0.33-0.37 before them, with 1 and 2
# threads, seeds 0 and 1 and perturbed initial weights (warmup.py).
# GRPO has little to do from a checkpoint far below it (too few rewarded samples) or far above
# it (too few wrong ones).
WARM_UP_BAND = (0.25, 0.6)


def check_warm_up_checkpoint() -> dict:
    """The default warm-up's metadata (the checkpoint the rlvr-arith task loads, trained here
    on first use and cached), after checking that its quality is in ``WARM_UP_BAND``."""
    path = warmup.warm_up()
    metadata = json.loads((path / warmup.METADATA_FILE).read_text())
    accuracy, (low, high) = metadata["held_out_greedy_accuracy"], WARM_UP_BAND
    validation = metadata["validation_greedy_accuracy"]
    facts = (f"held-out greedy accuracy {accuracy:.3f} after {metadata['steps_taken']} of at "
             f"most {metadata['max_steps']} steps (validation {validation:.3f}, target "
             f"{metadata['target']}); see {path / warmup.METADATA_FILE}")
    assert accuracy >= low, f"warm-up checkpoint too weak: {facts}, below {low}"
    assert accuracy <= high, f"warm-up checkpoint too strong: {facts}, above {high}"
    return metadata


@pytest.mark.slow
def test_grpo_raises_held_out_accuracy_above_the_warm_up_checkpoint(monkeypatch):
    """The benchmark's run (benchmarks/rlvr_learning.py) in a shorter form: 120 GRPO steps
    (about 2.5 minutes) from the default warm-up checkpoint (trained here on first use, about
    2 minutes, then cached), whose quality is checked first. Measured from the seed-0
    checkpoint on the 2-core machine (held-out greedy 0.39 on its first 200 problems): sampled
    pass@1 0.266 -> 0.324 (50 steps) -> 0.344 (100) -> 0.347 (150); greedy 0.39 -> 0.425 (100).
    The margin asked here, +0.03, is under half the gain at 100 steps."""
    monkeypatch.delenv("WORKBENCH_CACHE", raising=False)  # share the real warm-up cache
    from benchmarks.rlvr_learning import run

    checkpoint = check_warm_up_checkpoint()
    curve = run(minutes=30, seed=0, steps=120, eval_every=120)
    first, last = curve[0], curve[-1]
    # the run starts from the checkpoint checked above (its first 200 held-out problems)
    assert abs(first["greedy"] - checkpoint["held_out_greedy_accuracy"]) <= 0.1, curve
    assert last["step"] == 120
    assert last["sampled"] >= first["sampled"] + 0.03, curve
    assert last["greedy"] >= first["greedy"] - 0.02, curve
