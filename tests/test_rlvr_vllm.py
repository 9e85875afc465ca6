"""The parts of the vllm backend (workbench.testbeds.rlvr.vllm_backend) that run without vLLM:
bounded weight chunks, the engine options and their errors, the task's options, the extra's
floor and the ImportError. The backend itself runs in tests/test_rlvr_backends.py where vLLM
and CUDA exist."""

from __future__ import annotations

import importlib
import importlib.util
import tomllib
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from workbench.testbeds import get_task
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.backends import VLLM_MISSING
from workbench.testbeds.rlvr.model import ModelConfig, build_model
from workbench.testbeds.rlvr.task import backend_options
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer
from workbench.testbeds.rlvr.vllm_backend import (
    EngineOptions,
    VLLMWeightReceiver,
    weight_chunks,
)

ROOT = Path(__file__).resolve().parents[1]


def nbytes(chunk):
    return sum(t.numel() * t.element_size() for t in chunk.values())


def test_weight_chunks_are_bounded_ordered_and_complete():
    generator = torch.Generator().manual_seed(0)
    sizes = [10, 300, 7, 1000, 64, 64, 64, 5000, 1]
    named = [(f"w{i}", torch.randn(n, generator=generator)) for i, n in enumerate(sizes)]
    limit = 1200 * 4  # float32: 1200 elements
    chunks = list(weight_chunks(named, limit))
    assert [name for chunk in chunks for name in chunk] == [name for name, _ in named]
    for chunk in chunks:
        assert nbytes(chunk) <= limit or len(chunk) == 1  # only a tensor over the bound alone
    # 10 + 300 + 7 = 317 elements; 1000 + 3 * 64 = 1192 <= 1200; 5000 alone; then 1
    assert [list(c) for c in chunks] == [["w0", "w1", "w2"], ["w3", "w4", "w5", "w6"], ["w7"],
                                         ["w8"]]
    assert list(weight_chunks([], 10)) == []
    with pytest.raises(ValueError, match="max_bytes"):
        list(weight_chunks(named, 0))


def test_a_model_is_sent_in_chunks_no_bigger_than_the_bound_in_the_engines_dtype():
    model = build_model(ModelConfig(), build_char_tokenizer())
    named = [(n, p.detach().to(torch.bfloat16)) for n, p in model.named_parameters()]
    total = sum(t.numel() * 2 for _, t in named)
    chunks = list(weight_chunks(named, 256 * 2**10))
    assert len(chunks) > 1 and sum(nbytes(c) for c in chunks) == total
    assert max(len(save(c)) for c in chunks) < 256 * 2**10 + 64 * 2**10  # + the header


class StandInWorker(VLLMWeightReceiver):
    """A stand-in for a vLLM worker (``model_runner.model.load_weights``), recording what the
    receiver hands to the model's loader."""

    def __init__(self):
        self.loaded = {}
        self.model_runner = type("Runner", (), {})()
        self.model_runner.model = type("Model", (), {})()
        self.model_runner.model.load_weights = lambda weights: self.loaded.update(weights)


def test_the_receiver_loads_each_chunk_it_is_sent():
    model = build_model(ModelConfig(hidden=32, layers=1, heads=2, intermediate=64),
                        build_char_tokenizer())
    named = [(n, p.detach().contiguous()) for n, p in model.named_parameters()]
    worker = StandInWorker()
    counts = [worker.load_weight_chunk(save(chunk)) for chunk in weight_chunks(named, 8192)]
    assert sum(counts) == len(named) and len(counts) > 1
    for name, tensor in named:
        assert torch.equal(worker.loaded[name], tensor)


def test_engine_options_take_the_runs_precision_and_reject_bad_values():
    kwargs = EngineOptions("/m", "bf16", 0.5, 1024, False, 2, True).llm_kwargs()
    assert kwargs["dtype"] == "bfloat16" and kwargs["max_model_len"] == 1024
    assert kwargs["logprobs_mode"] == "processed_logprobs" and kwargs["enable_sleep_mode"]
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["enforce_eager"] is False
    module, _, name = kwargs["worker_extension_cls"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is VLLMWeightReceiver
    plain = EngineOptions("/m").llm_kwargs()
    assert plain["dtype"] == "float32" and "max_model_len" not in plain
    assert EngineOptions("/m") == EngineOptions("/m")  # equal options share one engine
    for bad, match in [(dict(precision="fp16"), "precision"),
                       (dict(gpu_memory_utilization=0.0), "gpu_memory_utilization"),
                       (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
                       (dict(max_model_len=0), "max_model_len"),
                       (dict(tensor_parallel_size=0), "tensor_parallel_size")]:
        with pytest.raises(ValueError, match=match):
            EngineOptions("/m", **bad)


def test_the_task_passes_its_vllm_options_and_checks_them():
    params = get_task("rlvr-arith").Params
    options = backend_options(params(backend="vllm", precision="bf16",
                                     vllm_gpu_memory_utilization=0.6, vllm_max_model_len=512,
                                     vllm_enforce_eager=False, vllm_tensor_parallel_size=2,
                                     vllm_sleep=False))
    assert options == {"precision": "bf16", "gpu_memory_utilization": 0.6,
                       "max_model_len": 512, "enforce_eager": False,
                       "tensor_parallel_size": 2, "sleep": False}
    assert backend_options(params()) == {"precision": "fp32"}
    for bad in (dict(vllm_gpu_memory_utilization=0), dict(vllm_gpu_memory_utilization=1.2),
                dict(vllm_tensor_parallel_size=0), dict(vllm_max_model_len=8)):
        with pytest.raises(ValueError):
            params(**bad)


def test_the_gpu_extra_says_the_real_floor():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["gpu"] == ["vllm>=0.19.1"]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm imports here")
def test_without_vllm_the_error_names_the_extra_and_its_own_environment():
    tokenizer = build_char_tokenizer()
    model = build_model(ModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer)
    with pytest.raises(ImportError) as error:
        make_backend("vllm", model, tokenizer, "/nowhere", "cpu")
    assert str(error.value) == VLLM_MISSING
    assert "0.19.1" in VLLM_MISSING and "own environment" in VLLM_MISSING
