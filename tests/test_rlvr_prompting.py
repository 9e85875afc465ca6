"""Prompt templates, the '####' answer rule and stop strings (workbench.testbeds.rlvr.prompting),
and the path a pretrained model takes: a tiny randomly initialised Qwen2-architecture model
with a byte-level BPE tokenizer carrying a chat template, saved with ``save_pretrained`` and run
through the rlvr-arith task on the CPU with ``from_pretrained``."""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from workbench import registry
from workbench.testbeds import Budget, get_task
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.backends import cut_at_stop
from workbench.testbeds.rlvr.checker import extract_answer, is_correct, reward
from workbench.testbeds.rlvr.model import load_policy
from workbench.testbeds.rlvr.problems import Difficulty, generate
from workbench.testbeds.rlvr.prompting import PromptFormat, marked_answer
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADD = generate("add", 6, seed=0, difficulty=Difficulty(digits_min=2, digits_max=2))
COUNTDOWN = generate("countdown", 2, seed=0)


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """A Qwen-like tokenizer: byte-level BPE trained here on a few lines (no download)."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    corpus = [f"Compute {p.prompt} The answer is #### {p.answer}\n" for p in
              generate("add", 200, seed=1)] * 3
    core.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>",
                                        pad_token="<|endoftext|>",
                                        additional_special_tokens=SPECIAL[1:])
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    tokenizer = byte_level_tokenizer()
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=512, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    directory = tmp_path_factory.mktemp("tiny-qwen2")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_marked_answer_reads_the_last_mark_to_the_end_of_its_line():
    assert marked_answer("so 12+34 is 46.\n#### 46\nthanks") == "46"
    assert marked_answer("#### 1\n#### 2 ") == "2"
    assert marked_answer("the answer is 46") is None
    assert marked_answer("####") == ""


def test_the_marked_rule_uses_the_same_exact_checker():
    problem = ADD[0]
    good = f"Let me think.\n#### {problem.answer}\n"
    assert is_correct(problem, good, "marked") and reward(problem, good, 0.1, "marked") == 1.0
    assert not is_correct(problem, good)  # the whole completion is not the answer
    assert reward(problem, f"#### 0{problem.answer}", 0.1, "marked") == 0.0  # not canonical
    assert reward(problem, "#### 7", 0.1, "marked") == 0.1  # well formed, wrong
    assert reward(problem, problem.answer, 0.1, "marked") == 0.0  # no mark: malformed
    countdown = COUNTDOWN[0]
    assert is_correct(countdown, f"#### {countdown.solution}", "marked")
    scratch = generate("add", 1, seed=0, difficulty=Difficulty(scratchpad=True))[0]
    assert extract_answer(scratch, f"#### {scratch.answer}", "marked") == scratch.answer
    with pytest.raises(ValueError, match="rule"):
        is_correct(problem, "1", "last-number")


def test_few_shot_prompts_stay_in_the_character_alphabet_and_stop_at_a_blank_line():
    fmt = PromptFormat.build("few-shot", ADD, shots=2)
    assert fmt.stop == ("\n\n",) and fmt.rule == "marked"
    prompt = fmt.render(ADD[3])
    assert prompt == (f"{ADD[0].prompt}\n#### {ADD[0].answer}\n\n"
                      f"{ADD[1].prompt}\n#### {ADD[1].answer}\n\n{ADD[3].prompt}\n")
    tokenizer = build_char_tokenizer()
    assert tokenizer.unk_token_id not in tokenizer(prompt)["input_ids"]
    assert PromptFormat.build("raw", ADD).apply(ADD) == ADD
    assert PromptFormat.build("few-shot", ADD, stop=["x"]).stop == ("x",)
    with pytest.raises(ValueError, match="prompt_template"):
        PromptFormat.build("zero-shot", ADD)
    with pytest.raises(ValueError, match="chat template"):
        PromptFormat.build("chat", ADD).render(ADD[0], tokenizer)


def test_chat_prompts_come_from_the_tokenizers_template(qwen_dir):
    _, tokenizer = load_policy(qwen_dir)
    prompt = PromptFormat.build("chat", ADD).render(ADD[0], tokenizer)
    question = ADD[0].prompt.removesuffix("=")
    assert prompt.startswith(f"<|im_start|>user\nCompute {question}.")
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    countdown = PromptFormat.build("chat", COUNTDOWN).render(COUNTDOWN[0], tokenizer)
    assert f"equal to {COUNTDOWN[0].answer}" in countdown


def test_cut_at_stop_keeps_the_token_that_completes_the_stop_string():
    tokenizer = build_char_tokenizer()
    ids = tokenizer("12\n\n34", add_special_tokens=False)["input_ids"]
    cut, stopped = cut_at_stop(tokenizer, ids, ("\n\n",))
    assert stopped and tokenizer.decode(cut) == "12\n\n"
    assert cut_at_stop(tokenizer, ids, ("#",)) == (ids, False)


def test_stop_strings_end_sampled_responses_and_mark_them_finished():
    tokenizer = build_char_tokenizer()
    from workbench.testbeds.rlvr.model import ModelConfig, build_model

    model = build_model(ModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer)
    backend = make_backend("hf", model, tokenizer, None, "cpu")
    plain = backend.generate([p.prompt for p in ADD], 4, max_new_tokens=24, seed=0)
    stopped = backend.generate([p.prompt for p in ADD], 4, max_new_tokens=24, seed=0,
                               stop=("1",))
    hits = 0
    for full, ids, finished, text in zip(plain.response_ids, stopped.response_ids,
                                         stopped.finished, stopped.texts, strict=True):
        assert full[:len(ids)] == ids  # the same draws, cut earlier
        if "1" in tokenizer.decode(full):
            hits += 1
            assert text.endswith("1") and "1" not in text[:-1] and finished
        else:
            assert ids == full
    assert hits > 0
    assert all(len(lp) == len(ids) for lp, ids in zip(stopped.log_probs,
                                                       stopped.response_ids, strict=True))


def test_a_tiny_qwen2_model_runs_the_chat_template_path_end_to_end(qwen_dir):
    task = get_task("rlvr-arith")
    methods = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    params = task.Params(model=str(qwen_dir), prompt_template="chat", stop=["<|im_end|>"],
                         max_new_tokens=12, n_train=40, n_eval=4, eval_k=2, eval_k_prompts=2,
                         prompts=2, group_size=2, eval_every=2, digits_min=2, digits_max=2)
    logged = []
    result = task().run(params, methods, seed=0, device=torch.device("cpu"),
                        budget=Budget(steps=2), log=lambda step, m: logged.append((step, m)))
    assert result["steps"] == 2 and not result["diverged"]
    assert [step for step, _ in logged] == [0, 1, 2]
    assert math.isfinite(result["train/policy_loss"])
    assert 0 < result["train/response_length"] <= 12
