"""SuperFlow's variance-aware per-prompt group sizes: the allocation against hand-derived
numbers and, through the RLVR loop, the groups it builds and what they cost."""

from __future__ import annotations

import random

import pytest
import torch

from methods.batch_size.superflow import allocate
from workbench import families, registry
from workbench.families import BatchSlot
from workbench.testbeds import Budget, get_task
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.loop import RLSettings, sample_batch
from workbench.testbeds.rlvr.model import ModelConfig, build_model
from workbench.testbeds.rlvr.problems import generate
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer
from workbench.testbeds.rlvr.warmup import train_supervised


def test_allocation_follows_the_reward_std_and_clips_at_n_max():
    # sigma = 0, 0.5, 0, 0.25; extra 32 - 8 = 24 -> shares 0, 16, 0, 8; 2 + 16 clipped to 16
    first = [[0.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 1.0]]
    assert allocate(first, 32, n_min=2, n_max=16) == [2, 16, 2, 10]
    assert allocate(first, 32, n_min=2, n_max=8) == [2, 8, 2, 8]


def test_allocation_never_exceeds_the_budget_where_rounding_would():
    # two equal sigmas share 3 extra: rounding 1.5 each gives 2 + 2 > 3; largest remainders
    # give 2 + 1 (the tie to the first prompt)
    assert allocate([[0.0, 1.0], [1.0, 0.0]], 7, n_min=2, n_max=16) == [4, 3]
    # three equal sigmas share 4: 4/3 each -> 1, 1, 1 and the last one to the first
    assert allocate([[0.0, 1.0]] * 3, 10, n_min=2, n_max=16) == [4, 3, 3]
    rng = random.Random(0)
    for _ in range(200):
        prompts, n_min = rng.randint(1, 8), rng.randint(2, 4)
        first = [[rng.choice([0.0, 0.5, 1.0]) for _ in range(n_min)] for _ in range(prompts)]
        budget = prompts * rng.randint(n_min, 16)
        sizes = allocate(first, budget, n_min=n_min, n_max=12)
        assert sum(sizes) <= budget
        assert all(n_min <= n <= max(12, n_min) for n in sizes)


def test_prompts_whose_first_rewards_agree_get_no_more():
    assert allocate([[1.0, 1.0], [0.0, 0.0]], 8, n_min=2, n_max=16) == [2, 2]
    assert allocate([[1.0, 1.0], [0.0, 1.0]], 8, n_min=2, n_max=16) == [2, 6]


def test_the_method_starts_with_n_min_and_keeps_the_batch_size():
    method = registry.get("batch_size", "superflow")(n_min=3)
    assert method.start({"batch_size": 64, "n_samples": 10**6}) == 64
    assert method.next_batch_size(1, {}) == 64
    assert method.first_group_size(8) == 3 and method.first_group_size(2) == 2


@pytest.fixture(scope="module")
def policy():
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer)
    # a short teacher-forced warm-up, so that sampled answers are sometimes well formed
    train_supervised(model, tokenizer, generate("add", 200, seed=2), steps=40, batch_size=16,
                     lr=1e-2, seed=0)
    model.eval()
    return model, tokenizer


def test_the_loop_grows_each_prompts_group_from_its_first_rewards(policy):
    model, tokenizer = policy
    backend = make_backend("hf", model, tokenizer, "unused", "cpu")
    train = generate("add", 50, seed=1)
    settings = RLSettings(max_new_tokens=6, format_reward=0.5)
    slot = BatchSlot(registry.get("batch_size", "superflow")(n_min=2, n_max=8), None)
    prompts, group_size = 16, 4
    batch, stats = sample_batch(backend, train, random.Random(0), settings, prompts=prompts,
                                group_size=group_size, pad_id=tokenizer.pad_token_id, seed=0,
                                device="cpu", batch_slot=slot)
    ids = batch.group_ids.tolist()
    assert ids == sorted(ids) and set(ids) == set(range(prompts))
    sizes = torch.bincount(batch.group_ids).tolist()
    first = [batch.scores[batch.group_ids == g][:2].tolist() for g in range(prompts)]
    assert sizes == allocate(first, prompts * group_size, n_min=2, n_max=8)
    assert len(set(sizes)) > 1, first  # some first rewards vary, some agree
    for g in range(prompts):  # every row of a group answers its prompt
        rows = [i for i, x in enumerate(ids) if x == g]
        assert len({batch.problems[i].prompt for i in rows}) == 1
        prompt_ids = batch.input_ids[rows, :batch.prompt_width]
        assert (prompt_ids == prompt_ids[0]).all()
    assert stats["cost/completions"] == len(batch.scores) == sum(sizes)
    assert stats["cost/generated_tokens"] == float(batch.response_mask.sum())


TINY = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "warmup_steps": 30,
        "warmup_batch": 16, "n_train": 200, "n_eval": 16, "eval_k_prompts": 4, "eval_k": 2,
        "prompts": 4, "group_size": 4, "eval_every": 2, "digits_min": 1, "digits_max": 2,
        "format_reward": 0.5, "warmup_target": None}


def test_a_short_rlvr_run_logs_group_sizes_and_counts_every_sample(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    task = get_task("rlvr-arith")
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    methods["batch_size"] = registry.get("batch_size", "superflow")(n_min=2, n_max=8)
    logged = []
    result = task().run(task.Params(**TINY), methods, seed=0, device=torch.device("cpu"),
                        budget=Budget(steps=3),
                        log=lambda step, m: logged.append((step, dict(m))))
    assert result["steps"] == 3
    steps = [m for step, m in logged if step > 0 and "batch/size" in m]
    total = 0.0
    for m in steps:
        assert m["batch/size"] <= 16 and m["batch/size"] >= 8  # within P x G, at least P x n_min
        assert m["batch/group_size"] == m["batch/size"] / m["batch/prompts"]
        assert 2 <= m["batch/group_size_max"] <= 8
        total += m["cost/completions"]
        assert m["cost/completions"] == m["batch/size"] and m["cost/samples"] == total
    assert any(m["batch/group_size_max"] > m["batch/group_size"] for m in steps)  # unequal


def test_dynamic_sampling_with_group_sizes_is_a_spec_error():
    task = get_task("rlvr-arith")
    method = registry.get("batch_size", "superflow")
    key, message = task.method_problem(task.Params(**TINY, dynamic_sampling=True), method)
    assert key == "dynamic_sampling" and "superflow" in message
    assert task.method_problem(task.Params(**TINY), method) is None


class OverBudget(registry.get("batch_size", "superflow")):
    """Broken on purpose: asks for twice the budget."""

    name = "over_budget"

    def group_sizes(self, first_rewards, budget):
        return [2 * budget // len(first_rewards)] * len(first_rewards)


def test_the_contract_check_catches_group_sizes_above_the_budget():
    assert families.check(registry.get("batch_size", "superflow")) == []
    (problem, *_) = families.check(OverBudget)
    assert "group_sizes" in problem and "budget" in problem
