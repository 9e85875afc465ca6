"""The RLVR policy pieces: character tokenizer, model builder and loader, per-token
log-probabilities and entropies, and the cached supervised warm-up."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Qwen2Config,
)

from workbench.testbeds.rlvr import warmup
from workbench.testbeds.rlvr.model import (
    ModelConfig,
    build_model,
    generate_completions,
    load_policy,
    sequence_log_probs,
)
from workbench.testbeds.rlvr.problems import ALPHABET, Difficulty, generate, splits
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer

TINY = ModelConfig(hidden=32, layers=2, heads=2, intermediate=64, max_positions=64, seed=3)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.fixture(scope="module")
def reloaded_tokenizer(tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(path)
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=ALPHABET, max_size=40))
def test_tokenizer_round_trips_every_alphabet_string(tokenizer, reloaded_tokenizer, text):
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_token_id
    assert len(ids) == len(text) + 1  # one token per character, spaces and newlines included
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert reloaded_tokenizer.encode(text) == ids
    assert reloaded_tokenizer.decode(ids, skip_special_tokens=True) == text


def test_tokenizer_special_tokens_and_left_padding(reloaded_tokenizer):
    tok = reloaded_tokenizer
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    # no string over the alphabet spells a special token
    assert tok.encode("<eos>", add_special_tokens=False) == tok.convert_tokens_to_ids(list("<eos>"))
    assert len(tok) == 4 + len(ALPHABET)
    batch = tok(["1+2=", "333+444="], padding=True)
    assert batch["input_ids"][0][:4] == [0, 0, 0, 0]
    assert batch["attention_mask"][0] == [0] * 4 + [1] * 5
    assert tok.decode(batch["input_ids"][0], skip_special_tokens=True) == "1+2="


def test_model_config_validation_and_seeded_init(tokenizer):
    with pytest.raises(ValueError, match="multiple of heads"):
        ModelConfig(hidden=30, heads=4)
    state = torch.random.get_rng_state()
    first, again = build_model(TINY, tokenizer), build_model(TINY, tokenizer)
    other = build_model(TINY.model_copy(update={"seed": 4}), tokenizer)
    assert torch.equal(torch.random.get_rng_state(), state)
    weights = [p for p in first.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(weights, again.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(weights, other.parameters(), strict=True))
    n_params = sum(p.numel() for p in build_model(ModelConfig(), tokenizer).parameters())
    assert 1_000_000 <= n_params <= 1_100_000


def _padded_batch(tokenizer):
    """Left-padded prompts followed by responses of different lengths (right-padded)."""
    rows = [("1+2=", "3"), ("333+444=", "777"), ("9+99=", "108")]
    prompts = tokenizer([p for p, _ in rows], padding=True, return_tensors="pt")
    width = prompts["input_ids"].shape[1]
    answers = [tokenizer.encode(a, add_special_tokens=False) + [tokenizer.eos_token_id]
               for _, a in rows]
    longest = max(map(len, answers))
    input_ids = torch.full((len(rows), width + longest), tokenizer.pad_token_id)
    attention_mask = torch.zeros_like(input_ids)
    response_mask = torch.zeros_like(input_ids)
    input_ids[:, :width] = prompts["input_ids"]
    attention_mask[:, :width] = prompts["attention_mask"]
    for i, answer in enumerate(answers):
        input_ids[i, width:width + len(answer)] = torch.tensor(answer)
        attention_mask[i, width:width + len(answer)] = 1
        response_mask[i, width:width + len(answer)] = 1
    return input_ids, attention_mask, response_mask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sequence_log_probs_match_unpadded_manual_gather(tokenizer, temperature):
    model = build_model(TINY, tokenizer)
    input_ids, attention_mask, response_mask = _padded_batch(tokenizer)
    log_probs, entropy = sequence_log_probs(model, input_ids, attention_mask, response_mask,
                                            temperature=temperature)
    assert log_probs.shape == entropy.shape == input_ids.shape
    assert torch.all(log_probs[response_mask == 0] == 0)
    assert torch.all(entropy[response_mask == 0] == 0)
    with torch.no_grad():
        for row in range(input_ids.shape[0]):
            real = attention_mask[row].bool()
            ids = input_ids[row][real]
            logits = model(input_ids=ids[None]).logits[0] / temperature
            manual_log_probs = torch.log_softmax(logits, dim=-1)
            # logits at position i predict token i + 1
            expected = manual_log_probs[:-1].gather(-1, ids[1:, None]).squeeze(-1)
            probs = manual_log_probs.exp()
            expected_entropy = -(probs * manual_log_probs).sum(-1)[:-1]
            in_response = response_mask[row][real][1:].bool()
            got = log_probs[row][real][1:]
            got_entropy = entropy[row][real][1:]
            torch.testing.assert_close(got[in_response], expected[in_response],
                                       atol=1e-5, rtol=0)
            torch.testing.assert_close(got_entropy[in_response], expected_entropy[in_response],
                                       atol=1e-5, rtol=0)
    # differentiable: the RL loss back-propagates through both
    (log_probs.sum() + entropy.sum()).backward()
    assert model.get_input_embeddings().weight.grad.abs().sum() > 0


def test_sequence_log_probs_match_generate_scores(tokenizer):
    model = build_model(TINY, tokenizer)
    prompts = tokenizer(["1+2=", "333+444="], padding=True, return_tensors="pt")
    out = model.generate(**prompts, max_new_tokens=4, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, eos_token_id=None,
                         pad_token_id=tokenizer.pad_token_id)
    width = prompts["input_ids"].shape[1]
    attention_mask = torch.cat(
        [prompts["attention_mask"], torch.ones_like(out.sequences[:, width:])], dim=1)
    response_mask = torch.zeros_like(out.sequences)
    response_mask[:, width:] = 1
    with torch.no_grad():
        log_probs, _ = sequence_log_probs(model, out.sequences, attention_mask, response_mask)
    from_generate = torch.stack(out.logits, dim=1).log_softmax(-1)
    from_generate = from_generate.gather(-1, out.sequences[:, width:, None]).squeeze(-1)
    torch.testing.assert_close(log_probs[:, width:], from_generate, atol=1e-5, rtol=0)


def _qwen2_model(tokenizer):
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=64, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen2"])
def test_checkpoint_round_trip_gives_same_log_probs(tokenizer, tmp_path, arch):
    if arch == "qwen2":  # the architecture of Qwen2.5-0.5B, as a user's local directory
        model = _qwen2_model(tokenizer)
    else:
        model = build_model(TINY.model_copy(update={"arch": arch}), tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load_policy(tmp_path, device="cpu")
    assert type(loaded) is type(model)
    assert loaded_tokenizer.encode("37+485=") == tokenizer.encode("37+485=")
    batch = _padded_batch(loaded_tokenizer)
    with torch.no_grad():
        before = sequence_log_probs(model, *batch)
        after = sequence_log_probs(loaded, *batch)
    for expected, got in zip(before, after, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_load_policy_pads_with_eos_when_the_tokenizer_has_none(tokenizer, tmp_path):
    no_pad = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.backend_tokenizer, bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token, unk_token=tokenizer.unk_token, padding_side="right",
        clean_up_tokenization_spaces=False)
    assert no_pad.pad_token is None
    no_pad.save_pretrained(tmp_path)
    build_model(TINY, tokenizer).save_pretrained(tmp_path)
    model, loaded = load_policy(tmp_path, dtype=torch.float32)
    assert loaded.pad_token_id == loaded.eos_token_id == tokenizer.eos_token_id
    assert loaded.padding_side == "left"
    assert model.generation_config.pad_token_id == loaded.eos_token_id
    prompts = ["1+2=", "333+444="]
    completions = generate_completions(model, loaded, prompts, max_new_tokens=3,
                                       do_sample=True, num_return_sequences=2, seed=5)
    again = generate_completions(model, loaded, prompts, max_new_tokens=3,
                                 do_sample=True, num_return_sequences=2, seed=5)
    assert len(completions) == 4 and completions == again
    # filters in a model's generation config do not apply: top_k=1 would make samples greedy
    model.generation_config.top_k = 1
    samples = generate_completions(model, loaded, ["1+2="], max_new_tokens=4, do_sample=True,
                                   num_return_sequences=8, seed=0)
    assert len(set(samples)) > 1


def test_load_policy_rejects_a_directory_without_a_model(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_policy(tmp_path)


WARMUP_ARGS = dict(task_kind="add", difficulty=Difficulty(digits_min=1, digits_max=2),
                   model_config=TINY, max_steps=3, target=None, batch_size=8, lr=1e-3, seed=0)


def test_warm_up_writes_the_cache_once_and_reuses_it(tmp_path, monkeypatch):
    path = warmup.warm_up(**WARMUP_ARGS, cache_dir=tmp_path)
    assert path.parent == tmp_path / "rlvr-warmup"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no staging left
    metadata = json.loads((path / warmup.METADATA_FILE).read_text())
    assert metadata["max_steps"] == 3 and metadata["steps_taken"] == 3
    assert metadata["target"] is None and metadata["reached_target"]
    assert metadata["model_config"]["hidden"] == 32
    assert metadata["difficulty"]["digits_max"] == 2
    assert 0.0 <= metadata["held_out_greedy_accuracy"] <= 1.0
    assert 0.0 <= metadata["held_out_pass@1_sampled"] <= metadata["held_out_pass@8"] <= 1.0

    def no_training(*args, **kwargs):
        raise AssertionError("the cached checkpoint should have been reused")

    monkeypatch.setattr(warmup, "train_supervised", no_training)
    assert warmup.warm_up(**WARMUP_ARGS, cache_dir=tmp_path) == path
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path))
    assert warmup.warm_up(**WARMUP_ARGS) == path
    threads = torch.get_num_threads()
    try:  # the thread count changes only last bits: not part of the key
        torch.set_num_threads(1 if threads > 1 else 2)
        assert warmup.warm_up(**WARMUP_ARGS) == path
    finally:
        torch.set_num_threads(threads)
    for other in [{"seed": 1}, {"max_steps": 4}, {"target": 0.5}]:  # each another checkpoint
        with pytest.raises(AssertionError, match="reused"):
            warmup.warm_up(**{**WARMUP_ARGS, **other}, cache_dir=tmp_path)

    # the loader takes the saved directory through AutoModelForCausalLM / AutoTokenizer
    model, tokenizer = load_policy(path)
    assert model.config.model_type == "llama" and tokenizer.padding_side == "left"
    _, held_out = splits("add", 0, 0, warmup.N_HELD_OUT, WARMUP_ARGS["difficulty"])
    accuracy = warmup.greedy_accuracy(model, tokenizer, held_out)
    assert accuracy == metadata["held_out_greedy_accuracy"]


def scripted_accuracy(monkeypatch, validation: list[float], held_out: float = 0.3):
    """Replace the warm-up's measurements: greedy accuracy on the validation split follows
    ``validation``, the held-out figures are fixed; returns the validation calls' steps."""
    _, held = splits("add", 0, 0, warmup.N_HELD_OUT, WARMUP_ARGS["difficulty"])
    held_prompts = {p.prompt for p in held}
    remaining = list(validation)

    def greedy(model, tokenizer, problems, **kwargs):
        if {p.prompt for p in problems} == held_prompts:
            return held_out
        assert not {p.prompt for p in problems} & held_prompts  # never the held-out set
        return remaining.pop(0)

    monkeypatch.setattr(warmup, "greedy_accuracy", greedy)
    monkeypatch.setattr(warmup, "sampled_accuracy", lambda *args, **kwargs: (0.2, 0.6))


def test_warm_up_stops_at_the_first_check_that_reaches_the_target(tmp_path, monkeypatch):
    scripted_accuracy(monkeypatch, [0.05, 0.2, 0.41, 0.9])
    path = warmup.warm_up(**{**WARMUP_ARGS, "max_steps": 20, "target": 0.4, "eval_every": 4},
                          cache_dir=tmp_path)
    metadata = json.loads((path / warmup.METADATA_FILE).read_text())
    assert metadata["steps_taken"] == 12 and metadata["reached_target"]
    assert metadata["max_steps"] == 20 and metadata["target"] == 0.4
    assert [point["step"] for point in metadata["validation_curve"]] == [4, 8, 12]
    assert metadata["validation_greedy_accuracy"] == 0.41
    assert metadata["held_out_greedy_accuracy"] == 0.3 and metadata["held_out_pass@8"] == 0.6
    assert metadata["n_validation"] == warmup.N_VALIDATION


def test_warm_up_that_ends_at_its_cap_short_of_the_target_warns(tmp_path, monkeypatch):
    scripted_accuracy(monkeypatch, [0.05, 0.1, 0.15])
    with pytest.warns(RuntimeWarning, match="cap of 10 steps .* short of its target 0.4"):
        path = warmup.warm_up(**{**WARMUP_ARGS, "max_steps": 10, "target": 0.4,
                                 "eval_every": 4}, cache_dir=tmp_path)
    metadata = json.loads((path / warmup.METADATA_FILE).read_text())
    assert metadata["steps_taken"] == 10 and not metadata["reached_target"]
    # the cap fell between checks: the accuracy where it ended is measured too
    assert [point["step"] for point in metadata["validation_curve"]] == [4, 8, 10]
    assert metadata["validation_greedy_accuracy"] == 0.15


def test_warm_up_killed_while_saving_leaves_no_checkpoint(tmp_path, monkeypatch):
    def crash(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", crash)
    with pytest.raises(KeyboardInterrupt):
        warmup.warm_up(**WARMUP_ARGS, cache_dir=tmp_path)
    assert list((tmp_path / "rlvr-warmup").iterdir()) == []


def test_problem_sets_keep_held_out_prompts_apart_even_in_a_small_space(monkeypatch):
    difficulty = Difficulty(digits_min=2, digits_max=3)
    train, validation, held_out = warmup.problem_sets("add", difficulty, seed=0, n_train=500,
                                                      n_validation=100)
    assert len(held_out) == warmup.N_HELD_OUT and len(validation) == 100 and len(train) == 500
    assert len({p.prompt for p in train}) == 500  # distinct when the space allows
    sets = [{p.prompt for p in part} for part in (train, validation, held_out)]
    assert not sets[0] & sets[1] and not sets[0] & sets[2] and not sets[1] & sets[2]
    # the held-out set is the stream's first prompts whatever else is asked for
    assert warmup.problem_sets("add", difficulty, seed=0, n_train=10)[2] == held_out
    # one-digit addition has 100 prompts: 60 held out, 10 to validate on, 30 left to train on,
    # with repeats
    monkeypatch.setattr(warmup, "N_HELD_OUT", 60)
    small = Difficulty(digits_min=1, digits_max=1)
    train, validation, held_out = warmup.problem_sets("add", small, seed=0, n_train=300,
                                                      n_validation=10)
    assert len(held_out) == 60 and len(validation) == 10 and len(train) == 300
    sets = [{p.prompt for p in part} for part in (train, validation, held_out)]
    assert not sets[0] & sets[1] and not sets[0] & sets[2] and not sets[1] & sets[2]
    assert len(sets[0]) == 30


def test_training_lowers_the_completion_loss_and_accuracy_uses_the_checker(tokenizer):
    problems = generate("add", 16, seed=0, difficulty=Difficulty(digits_min=1, digits_max=1))
    model = build_model(TINY, tokenizer)
    losses = []
    taken, _ = warmup.train_supervised(
        model, tokenizer, problems, steps=60, batch_size=16, lr=1e-2, seed=0,
        log=lambda step, metrics: losses.append(metrics["train/loss"]))
    # 60 steps: greedy accuracy 0.62-1.0 over initial weights 0-5 (40 steps: 0.38-0.56)
    assert taken == len(losses) == 60 and losses[-1] < 0.5 * losses[0]
    # memorised single-digit sums: greedy decoding now answers most of the training problems
    assert warmup.greedy_accuracy(model, tokenizer, problems) >= 0.5
    with pytest.raises(ValueError, match="k=1"):
        warmup.pass_at_k(model, tokenizer, problems, k=2, temperature=None)
