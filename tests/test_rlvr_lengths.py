"""Response length split by correctness (Dr. GRPO's length bias): the function against a hand
computation, and the RLVR loop logging the split for training rollouts and evaluations."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.test_rlvr_loop import TINY, run_rlvr
from workbench import registry
from workbench.common import metrics
from workbench.testbeds import Budget, get_task
from workbench.testbeds.rlvr.backends import Rollouts
from workbench.testbeds.rlvr.lengths import lengths_by_correctness
from workbench.testbeds.rlvr.loop import RLSettings, train
from workbench.testbeds.rlvr.model import ModelConfig, build_model
from workbench.testbeds.rlvr.problems import generate
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer

NAMES = [f"{part}/response_length_{kind}" for part in ("train", "eval")
         for kind in ("correct", "incorrect")]


def test_split_means_are_the_hand_computed_means_of_each_subset():
    lengths = torch.tensor([4.0, 10.0, 6.0, 12.0, 3.0])
    correct = torch.tensor([True, False, True, False, False])
    split = lengths_by_correctness(lengths, correct, "train")
    assert split == {"train/response_length_correct": pytest.approx((4 + 6) / 2),
                     "train/response_length_incorrect": pytest.approx((10 + 12 + 3) / 3)}
    # the weighted mean of the two is the mean over all completions
    assert (2 * split["train/response_length_correct"]
            + 3 * split["train/response_length_incorrect"]) / 5 == pytest.approx(
        float(lengths.mean()))


def test_an_empty_subset_is_left_out_not_nan():
    assert lengths_by_correctness([5, 7], [False, False], "eval") == {
        "eval/response_length_incorrect": 6.0}
    assert lengths_by_correctness([5, 7], [True, True], "eval") == {
        "eval/response_length_correct": 6.0}
    assert lengths_by_correctness([], [], "eval") == {}


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="one entry per completion"):
        lengths_by_correctness([1, 2, 3], [True, False], "train")


def test_the_split_names_are_in_the_vocabulary():
    for name in NAMES:
        assert metrics.is_known(name) and metrics.unit(name) == "tokens"


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def check_split(logged: dict, part: str, accuracy: float, count: int):
    """The split is logged exactly for the non-empty subsets, and the two means weighted by
    their counts give ``response_length``."""
    correct = round(accuracy * count)
    total = 0.0
    for kind, n in (("correct", correct), ("incorrect", count - correct)):
        name = f"{part}/response_length_{kind}"
        assert (name in logged) == (n > 0), (name, n)
        if n:
            assert logged[name] >= 1  # every completion has at least its end token
            total += n * logged[name]
    assert total / count == pytest.approx(logged[f"{part}/response_length"])


def test_the_loop_logs_the_split_every_step_for_training_and_evaluation():
    _, logged = run_rlvr({}, steps=3, eval_every=1)
    assert [step for step, _ in logged] == [0, 1, 2, 3]
    for step, m in logged:
        check_split(m, "eval", m["eval/accuracy"], TINY["n_eval"])
        if step:
            check_split(m, "train", m["train/accuracy"], int(m["batch/size"]))


class ScriptedBackend:
    """Answers ``a+b=`` with ``a+b`` (correct) or ``a+b`` followed by ``1`` (wrong, one token
    longer) by the parity of prompt index + completion index, each response ended by <eos>;
    records every call so a test can recompute the split from the rollouts themselves."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def generate(self, prompts, n, *, max_new_tokens, temperature=1.0, greedy=False, seed=0,
                 stop=()):
        copies = 1 if greedy else n
        texts, correct = [], []
        for i, prompt in enumerate(prompts):
            a, b = prompt.removesuffix("=").split("+")
            for j in range(copies):
                right = (i + j) % 2 == 0
                texts.append(str(int(a) + int(b)) + ("" if right else "1"))
                correct.append(right)
        eos = self.tokenizer.eos_token_id
        responses = [self.tokenizer(t, add_special_tokens=False)["input_ids"] + [eos]
                     for t in texts]
        self.calls.append({"greedy": greedy, "n": copies, "lengths": [len(r) for r in responses],
                           "correct": correct})
        prompt_ids = [ids for ids in self.tokenizer(list(prompts))["input_ids"]
                      for _ in range(copies)]
        return Rollouts(prompt_ids, responses, texts, [True] * len(texts))

    def idle(self):
        pass

    def sync_weights(self, policy):
        pass


def hand_split(call: dict) -> dict[str, float]:
    right = [n for n, c in zip(call["lengths"], call["correct"], strict=True) if c]
    wrong = [n for n, c in zip(call["lengths"], call["correct"], strict=True) if not c]
    return {"response_length_correct": sum(right) / len(right),
            "response_length_incorrect": sum(wrong) / len(wrong)}


def test_the_logged_split_equals_the_split_recomputed_from_the_rollouts():
    tokenizer = build_char_tokenizer()
    policy = build_model(ModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer)
    task = get_task("rlvr-arith")
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    problems = generate("add", 40, seed=0)
    backend = ScriptedBackend(tokenizer)
    settings = RLSettings(prompts=3, group_size=4, eval_every=1, eval_k=3, eval_k_prompts=2,
                          max_new_tokens=8)
    logged = []

    def log(step, m):  # the rollouts since the last log: the step's, then the evaluation's
        calls, backend.calls[:] = list(backend.calls), []
        logged.append((step, dict(m), calls))

    train(policy, tokenizer, backend, methods, problems[10:], problems[:10], settings,
          budget=Budget(steps=2), seed=0, log=log, device="cpu")
    assert [step for step, _, _ in logged] == [0, 1, 2]
    for step, m, calls in logged:
        greedy = next(c for c in calls if c["greedy"])
        assert {k: m[f"eval/{k}"] for k in hand_split(greedy)} == pytest.approx(
            hand_split(greedy))
        if step:
            rollout = next(c for c in calls if not c["greedy"] and c["n"] == 4)
            assert {k: m[f"train/{k}"] for k in hand_split(rollout)} == pytest.approx(
                hand_split(rollout))
            assert (m["train/response_length_incorrect"]
                    > m["train/response_length_correct"])  # the wrong texts are longer


def first_step(policy, loss_constant: str) -> tuple[float, list[int]]:
    """The first update's policy loss under Dr. GRPO's aggregation, and the lengths of the
    responses it was computed on."""
    tokenizer = build_char_tokenizer()
    task = get_task("rlvr-arith")
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    problems = generate("add", 40, seed=0)
    backend = ScriptedBackend(tokenizer)
    settings = RLSettings(prompts=3, group_size=4, eval_every=5, eval_k=3, eval_k_prompts=2,
                          max_new_tokens=16, loss_agg="seq-mean-token-sum-norm",
                          loss_constant=loss_constant)
    logged = []
    train(policy, tokenizer, backend, methods, problems[10:], problems[:10], settings,
          budget=Budget(steps=1), seed=0, device="cpu",
          log=lambda step, m: logged.append((step, dict(m), list(backend.calls))))
    rollout = next(c for c in logged[1][2] if not c["greedy"] and c["n"] == 4)
    return logged[1][1]["train/policy_loss"], rollout["lengths"]


def test_the_dr_grpo_constant_is_the_longest_response_or_max_new_tokens():
    tokenizer = build_char_tokenizer()
    policy = build_model(ModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer)
    longest, lengths = first_step(copy.deepcopy(policy), "longest")
    fixed, same = first_step(copy.deepcopy(policy), "max_new_tokens")
    assert lengths == same and max(lengths) < 16 and longest != 0
    # the same token sum, divided by the longest response or by max_new_tokens
    assert longest * max(lengths) == pytest.approx(fixed * 16, rel=1e-5)
