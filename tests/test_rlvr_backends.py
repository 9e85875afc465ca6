"""The rollout backend contract (workbench.testbeds.rlvr.backends), the same tests for every
backend.

The policy is a tiny freshly initialised Llama over the character tokenizer, saved with
``save_pretrained`` and loaded with ``load_policy``. Such a model with tied embeddings echoes
its last input token under greedy or near-greedy decoding (a token's embedding is most similar
to itself; margins of ~0.3 in the logits), which shows which prompt a completion came from
without depending on float details; at temperature 1 its samples are close to uniform, so
different seeds give different completions and some of them stop at eos.

The vllm parameter runs only where vllm imports and CUDA exists; the hf backend is also run on
CUDA by a test marked gpu.
"""

from __future__ import annotations

import importlib.util
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.backends import VLLM_MISSING, HFBackend, Rollouts
from workbench.testbeds.rlvr.model import ModelConfig, build_model, load_policy
from workbench.testbeds.rlvr.problems import generate as generate_problems
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_CUDA = torch.cuda.is_available()
VLLM_SKIP = "vllm is not importable here (it needs CUDA; not exercised on this machine)"
BACKEND_NAMES = [
    "hf",
    pytest.param("vllm", marks=[
        pytest.mark.gpu,
        pytest.mark.skipif(not HAS_VLLM, reason=VLLM_SKIP),
        pytest.mark.skipif(not HAS_CUDA, reason="the vllm backend needs CUDA"),
    ]),
]
# head_dim 32: a size every vLLM attention kernel supports (16 is not).
TINY = ModelConfig(hidden=64, layers=1, heads=2, intermediate=128)
ADD_PROMPTS = [problem.prompt for problem in generate_problems("add", 8, seed=0)]
ECHO_PROMPTS = ["12+34=", "7+5", "300*2", "9-", "ab:c", "x"]  # distinct last characters


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    tokenizer = build_char_tokenizer()
    directory = tmp_path_factory.mktemp("tiny-policy")
    build_model(TINY, tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def open_backend(name: str, policy_dir, device: str):
    model, tokenizer = load_policy(policy_dir, device=device)
    options = dict(gpu_memory_utilization=0.2) if name == "vllm" else {}
    backend = make_backend(name, model, tokenizer, policy_dir, device, **options)
    return SimpleNamespace(backend=backend, model=model, tokenizer=tokenizer)


@pytest.fixture(scope="module", params=BACKEND_NAMES)
def setup(request, policy_dir):
    device = "cuda" if request.param == "vllm" else "cpu"
    opened = open_backend(request.param, policy_dir, device)
    yield opened
    opened.backend.close()


def assert_well_formed(rollouts: Rollouts, tokenizer, prompts, n, max_new_tokens):
    eos = tokenizer.eos_token_id
    expected_prompts = [ids for ids in tokenizer(prompts)["input_ids"] for _ in range(n)]
    assert rollouts.prompt_ids == expected_prompts
    assert all(ids[0] == tokenizer.bos_token_id for ids in rollouts.prompt_ids)
    for field in (rollouts.response_ids, rollouts.texts, rollouts.finished):
        assert len(field) == len(prompts) * n
    for ids, text, finished in zip(rollouts.response_ids, rollouts.texts, rollouts.finished,
                                   strict=True):
        assert isinstance(ids, list) and all(isinstance(token, int) for token in ids)
        assert 0 < len(ids) <= max_new_tokens
        assert eos not in ids[:-1]
        assert finished == (ids[-1] == eos)
        assert finished or len(ids) == max_new_tokens
        assert text == tokenizer.decode(ids, skip_special_tokens=True)


def echo(prompt: str, length: int) -> str:
    return prompt[-1] * length


def check_order(backend, tokenizer):
    """Completion j of prompt i sits at i * n + j, greedy and sampled."""
    n, length = 3, 6
    for options in (dict(greedy=True), dict(temperature=0.01, seed=3)):
        rollouts = backend.generate(ECHO_PROMPTS, n, max_new_tokens=length, **options)
        assert_well_formed(rollouts, tokenizer, ECHO_PROMPTS, n, length)
        assert rollouts.texts == [echo(p, length) for p in ECHO_PROMPTS for _ in range(n)]


def check_sampling(backend, tokenizer):
    """Seeded sampling: well formed, reproducible, seed-dependent, some stopped at eos."""
    first = backend.generate(ADD_PROMPTS, 4, max_new_tokens=16, seed=0)
    assert_well_formed(first, tokenizer, ADD_PROMPTS, 4, 16)
    assert any(first.finished) and not all(first.finished)
    assert backend.generate(ADD_PROMPTS, 4, max_new_tokens=16, seed=0) == first
    other = backend.generate(ADD_PROMPTS, 4, max_new_tokens=16, seed=1)
    assert other.response_ids != first.response_ids
    assert len(set(map(tuple, first.response_ids))) > len(first.response_ids) // 2


def global_rng_states():
    states = [torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()]
    if HAS_CUDA and torch.cuda.is_initialized():
        states.append(torch.cuda.get_rng_state())
    return states


def check_global_rng_untouched(backend):
    before = global_rng_states()
    backend.generate(ADD_PROMPTS[:2], 2, max_new_tokens=4, seed=5)
    after = global_rng_states()
    assert torch.equal(before[0], after[0])
    assert before[1] == after[1]
    assert np.array_equal(before[2], after[2])
    if len(before) == 4:
        assert torch.equal(before[3], after[3])


@pytest.mark.parametrize("n", [1, 3])
def test_order_prompt_ids_and_texts(setup, n):
    check_order(setup.backend, setup.tokenizer)
    rollouts = setup.backend.generate(ADD_PROMPTS, n, max_new_tokens=8, seed=0)
    assert_well_formed(rollouts, setup.tokenizer, ADD_PROMPTS, n, 8)


def test_seeded_sampling_is_reproducible_and_depends_on_the_seed(setup):
    check_sampling(setup.backend, setup.tokenizer)


def test_max_new_tokens_is_respected(setup):
    for length in (1, 5):
        rollouts = setup.backend.generate(ADD_PROMPTS, 2, max_new_tokens=length, seed=2)
        assert_well_formed(rollouts, setup.tokenizer, ADD_PROMPTS, 2, length)
    empty = setup.backend.generate(ADD_PROMPTS[:3], 2, max_new_tokens=0)
    assert empty.response_ids == [[]] * 6 and empty.texts == [""] * 6
    assert empty.finished == [False] * 6 and len(empty.prompt_ids) == 6


def test_greedy_ignores_temperature_and_seed_and_repeats_for_the_n_copies(setup):
    first = setup.backend.generate(ADD_PROMPTS, 3, max_new_tokens=10, greedy=True, seed=0)
    again = setup.backend.generate(ADD_PROMPTS, 3, max_new_tokens=10, greedy=True,
                                   temperature=7.0, seed=9)
    assert first == again
    for i in range(len(ADD_PROMPTS)):
        group = first.response_ids[3 * i:3 * i + 3]
        assert group[0] == group[1] == group[2]


def test_sync_weights_makes_the_backend_sample_from_the_new_weights(setup):
    backend, model = setup.backend, setup.model
    kwargs = dict(max_new_tokens=10, seed=4)
    before = backend.generate(ADD_PROMPTS, 2, **kwargs)
    original = {name: p.detach().clone() for name, p in model.named_parameters()}
    generator = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn(param.shape, generator=generator).to(param) * 0.5)
        backend.sync_weights(model)
        changed = backend.generate(ADD_PROMPTS, 2, **kwargs)
        assert changed.response_ids != before.response_ids
    finally:
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(original[name])
        backend.sync_weights(model)
    assert backend.generate(ADD_PROMPTS, 2, **kwargs) == before


def test_generate_leaves_the_global_rng_untouched(setup):
    check_global_rng_untouched(setup.backend)


def test_bad_arguments_are_rejected(setup):
    with pytest.raises(ValueError, match="n "):
        setup.backend.generate(ADD_PROMPTS, 0, max_new_tokens=4)
    with pytest.raises(ValueError, match="temperature"):
        setup.backend.generate(ADD_PROMPTS, 2, max_new_tokens=4, temperature=0.0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        setup.backend.generate(ADD_PROMPTS, 2, max_new_tokens=-1)
    assert setup.backend.generate([], 2, max_new_tokens=4) == Rollouts([], [], [], [], [])


def test_hf_backend_batches_do_not_change_greedy_outputs_and_check_their_model(policy_dir):
    opened = open_backend("hf", policy_dir, "cpu")
    small = HFBackend(opened.model, opened.tokenizer, max_batch_size=4)
    kwargs = dict(max_new_tokens=6, greedy=True)
    assert (small.generate(ECHO_PROMPTS, 3, **kwargs)
            == opened.backend.generate(ECHO_PROMPTS, 3, **kwargs))
    other, _ = load_policy(policy_dir)
    with pytest.raises(ValueError, match="different model"):
        opened.backend.sync_weights(other)
    with pytest.raises(ValueError, match="device"):
        make_backend("hf", opened.model, opened.tokenizer, None, "cuda")
    with pytest.raises(ValueError, match="unknown rollout backend"):
        make_backend("sglang", opened.model, opened.tokenizer, None, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_hf_backend_on_cuda(policy_dir):
    opened = open_backend("hf", policy_dir, "cuda")
    check_order(opened.backend, opened.tokenizer)
    check_sampling(opened.backend, opened.tokenizer)
    check_global_rng_untouched(opened.backend)


@pytest.mark.skipif(HAS_VLLM, reason="vllm imports here")
def test_vllm_backend_without_vllm_names_the_gpu_extra(policy_dir):
    model, tokenizer = load_policy(policy_dir)
    with pytest.raises(ImportError, match="`gpu` extra") as error:
        make_backend("vllm", model, tokenizer, policy_dir, "cpu")
    assert str(error.value) == VLLM_MISSING


def test_log_probs_are_those_of_the_distribution_sampled(setup):
    """The sampler's log-probabilities after temperature agree with the trainer's recomputed
    ones (fp32 on both sides; vLLM's kernels differ in the last bits)."""
    from workbench.testbeds.rlvr.loop import build_batch, response_log_probs

    rollouts = setup.backend.generate(ADD_PROMPTS, 2, max_new_tokens=8, temperature=0.7,
                                      seed=6)
    problems = generate_problems("add", len(rollouts.texts), seed=0)
    batch = build_batch(rollouts, problems, list(range(len(problems))),
                        setup.tokenizer.pad_token_id, 0.0, setup.model.device)
    with torch.no_grad():
        trainer = response_log_probs(setup.model, batch, 0.7)[0]
    assert torch.allclose(batch.rollout_log_probs, trainer, atol=2e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_VLLM and HAS_CUDA), reason=VLLM_SKIP)
def test_vllm_engine_is_reused_across_runs_and_sleeps_while_training(policy_dir):
    first = open_backend("vllm", policy_dir, "cuda")
    before = first.backend.generate(ADD_PROMPTS, 2, max_new_tokens=8, seed=3)
    first.backend.idle()
    assert first.backend.generate(ADD_PROMPTS, 2, max_new_tokens=8, seed=3) == before
    engine = first.backend._llm
    first.backend.close()
    second = open_backend("vllm", policy_dir, "cuda")
    assert second.backend._llm is engine
    assert second.backend.generate(ADD_PROMPTS, 2, max_new_tokens=8, seed=3) == before
