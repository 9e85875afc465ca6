"""The ``vllm`` rollout backend: vLLM's offline ``LLM`` (V1 engine, vLLM >= 0.19.1) on the
policy's model directory, its weights pushed from the policy after every step.

Written against vLLM's documented API; vLLM is not installed on the CPU development machines,
so only the parts that do not need it (``weight_chunks``, ``EngineOptions``, the ImportError)
are tested there. vLLM pins one exact torch: install it in its own environment
(``pip install -e '.[gpu]'`` into a fresh virtual environment, letting vLLM bring its torch).

- **Prompts and sampling**: prompts go in as ``TokensPrompt`` (the HF tokenizer's ids), one
  ``SamplingParams(n, temperature, max_tokens, seed, stop_token_ids=[eos], ignore_eos=True,
  stop, include_stop_str_in_output=True, logprobs=0)`` per prompt, each prompt's seed drawn
  from the call's ``seed`` (temperature 0 when greedy). ``logprobs=0`` returns the sampled
  token's log-probability; the engine is built with ``logprobs_mode="processed_logprobs"`` so
  it is the log-probability after temperature, the distribution actually sampled.
- **Precision**: ``dtype`` is ``float32`` or ``bfloat16`` from the run's ``precision`` (one
  setting for both sides), never vLLM's ``auto`` (which casts an fp32 checkpoint to fp16).
- **Weight sync** (``sync_weights``): the policy's parameters, cast to the engine's dtype,
  travel in chunks of at most ``sync_chunk_bytes`` (``weight_chunks``; a tensor larger than
  that travels alone), each serialized with safetensors and sent by ``LLM.collective_rpc`` to
  ``VLLMWeightReceiver.load_weight_chunk``, mixed into every worker with
  ``worker_extension_cls`` (vLLM's documented RLHF pattern), which calls the model's
  ``load_weights`` (the loader vLLM uses for checkpoints). No message holds the whole model
  (msgpack's 4 GiB limit). The prefix cache is reset afterwards.
- **Engine lifecycle**: one ``vllm.LLM`` per process, kept in ``_ENGINE`` and reused by the
  next backend with the same ``EngineOptions`` (across seeds and trials; a new backend first
  loads its policy's weights, so nothing of the previous run stays); different options shut
  the old engine down first. ``close`` releases the backend, not the engine;
  ``shutdown_engine`` frees it. With ``sleep`` (vLLM's sleep mode, ``enable_sleep_mode``),
  ``idle`` puts the engine to sleep at level 1 while the policy trains (weights offloaded to
  CPU memory, KV cache freed) and the next ``sync_weights`` or ``generate`` wakes it.
- **Reproducibility**: vLLM's V1 engine is reproducible in offline mode only with
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (deterministic scheduling; vLLM's "Reproducibility"
  page), set here before the engine is built unless the environment sets it; with it and the
  per-request seeds the same call gives the same rollouts on the same hardware and vLLM
  version (batch invariance is not asked for: a different batch may change the last bits).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import importlib
import importlib.util
import os
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from workbench.testbeds.rlvr.backends import (
    PRECISIONS,
    VLLM_MISSING,
    RolloutBackend,
    cut_at_eos,
    preserved_global_rng,
)

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
DEFAULT_SYNC_CHUNK_BYTES = 256 * 2**20


def import_vllm():
    """``vllm``, or the ImportError naming the ``gpu`` extra."""
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(VLLM_MISSING)
    return importlib.import_module("vllm")


def weight_chunks(named: Iterable[tuple[str, torch.Tensor]],
                  max_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
    """Consecutive groups of ``named`` tensors, in order, each of at most ``max_bytes`` bytes
    (``numel * element_size``) except a single tensor larger than that, which is a group of
    its own; every tensor in exactly one group."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    chunk: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in named:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > max_bytes:
            yield chunk
            chunk, size = {}, 0
        if name in chunk:
            raise ValueError(f"tensor {name!r} given twice")
        chunk[name] = tensor
        size += nbytes
    if chunk:
        yield chunk


class VLLMWeightReceiver:
    """Mixed into each vLLM worker through ``worker_extension_cls``; ``collective_rpc`` calls
    ``load_weight_chunk`` on every worker with one chunk of the policy's parameters."""

    def load_weight_chunk(self, payload: bytes) -> int:
        """Load safetensors-serialized HF-named tensors into the worker's model; returns how
        many tensors were given."""
        from safetensors.torch import load

        weights = load(bytes(payload))
        self.model_runner.model.load_weights(weights=weights.items())
        return len(weights)


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """What a ``vllm.LLM`` is built with; equal options share one engine."""

    model_dir: str
    precision: str = "fp32"
    gpu_memory_utilization: float = 0.3
    max_model_len: int | None = None
    enforce_eager: bool = True
    tensor_parallel_size: int = 1
    sleep: bool = True
    extra: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of "
                             f"{', '.join(PRECISIONS)}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got "
                             f"{self.gpu_memory_utilization}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got "
                             f"{self.tensor_parallel_size}")

    def llm_kwargs(self) -> dict[str, Any]:
        """The ``vllm.LLM`` keyword arguments."""
        kwargs = dict(model=self.model_dir, tokenizer=self.model_dir,
                      dtype=DTYPES[self.precision],
                      gpu_memory_utilization=self.gpu_memory_utilization,
                      enforce_eager=self.enforce_eager,
                      tensor_parallel_size=self.tensor_parallel_size, seed=0,
                      logprobs_mode="processed_logprobs",
                      worker_extension_cls=f"{__name__}.{VLLMWeightReceiver.__qualname__}",
                      enable_sleep_mode=self.sleep, **dict(self.extra))
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        return kwargs


_ENGINE: dict[str, Any] = {}  # "options" -> EngineOptions, "llm" -> vllm.LLM


def engine(options: EngineOptions):
    """This process's ``vllm.LLM`` for ``options``, built once and reused."""
    if _ENGINE.get("options") == options:
        return _ENGINE["llm"]
    shutdown_engine()
    vllm = import_vllm()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with preserved_global_rng():
        llm = vllm.LLM(**options.llm_kwargs())
    _ENGINE.update(options=options, llm=llm, asleep=False)
    return llm


def shutdown_engine() -> None:
    """Shut this process's engine down and free its GPU memory (idempotent)."""
    llm = _ENGINE.pop("llm", None)
    _ENGINE.clear()
    if llm is None:
        return
    del llm
    gc.collect()
    with contextlib.suppress(ImportError, AttributeError):
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


atexit.register(shutdown_engine)


class VLLMBackend(RolloutBackend):
    """vLLM's offline ``LLM`` on the policy's model directory (see the module docstring)."""

    name = "vllm"

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        model_dir: str | Path,
        *,
        precision: str = "fp32",
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        enforce_eager: bool = True,
        tensor_parallel_size: int = 1,
        sleep: bool = True,
        sync_chunk_bytes: int = DEFAULT_SYNC_CHUNK_BYTES,
        **llm_kwargs: Any,
    ):
        """Other keyword arguments go to ``vllm.LLM`` (they are part of the engine's key)."""
        vllm = import_vllm()
        super().__init__(tokenizer)
        if sync_chunk_bytes < 1:
            raise ValueError(f"sync_chunk_bytes must be >= 1, got {sync_chunk_bytes}")
        self.options = EngineOptions(
            str(model_dir), precision, gpu_memory_utilization, max_model_len, enforce_eager,
            tensor_parallel_size, sleep, tuple(sorted(llm_kwargs.items())))
        self.sync_chunk_bytes = sync_chunk_bytes
        self._vllm = vllm
        self._tokens_prompt = importlib.import_module("vllm.inputs").TokensPrompt
        self._llm = engine(self.options)
        self.sync_weights(model)  # the previous run's weights never leak into this one

    def _awake(self):
        if self._llm is None:
            raise RuntimeError("the vllm backend is closed")
        if _ENGINE.get("asleep"):
            self._llm.wake_up()
            _ENGINE["asleep"] = False
        return self._llm

    def idle(self) -> None:
        """Sleep (level 1: weights to CPU memory, KV cache freed) while the policy trains."""
        if self._llm is not None and self.options.sleep and not _ENGINE.get("asleep"):
            self._llm.sleep(level=1)
            _ENGINE["asleep"] = True

    def _sample(self, prompt_ids, copies, *, max_new_tokens, temperature, seed, stop=()):
        llm = self._awake()
        seeds = random.Random(seed)
        sampling = temperature is not None
        params = [
            self._vllm.SamplingParams(
                n=copies, temperature=temperature if sampling else 0.0,
                max_tokens=max_new_tokens, seed=seeds.randrange(2**31),
                # Stop at the tokenizer's eos only, as the hf backend does (ignore_eos drops
                # the generation_config's other end ids; stop_token_ids still stop).
                stop_token_ids=[self.eos_token_id], ignore_eos=True, skip_special_tokens=True,
                stop=list(stop) or None, include_stop_str_in_output=True,
                logprobs=0 if sampling else None,
            )
            for _ in prompt_ids
        ]
        prompts = [self._tokens_prompt(prompt_token_ids=ids) for ids in prompt_ids]
        with preserved_global_rng():
            outputs = llm.generate(prompts, params, use_tqdm=False)
        completions = [completion for output in outputs
                       for completion in sorted(output.outputs, key=lambda c: c.index)]
        responses = [cut_at_eos(c.token_ids, self.eos_token_id) for c in completions]
        if not sampling:
            return responses, None
        log_probs = [[step[token].logprob for step, token in zip(c.logprobs, ids, strict=False)]
                     for c, ids in zip(completions, responses, strict=True)]
        return responses, log_probs

    def sync_weights(self, model: PreTrainedModel) -> None:
        """Copy ``model``'s parameters into every worker in bounded chunks."""
        from safetensors.torch import save

        llm = self._awake()
        dtype = getattr(torch, DTYPES[self.options.precision])
        named = ((name, param.detach().to("cpu", dtype).contiguous())
                 for name, param in model.named_parameters())
        for chunk in weight_chunks(named, self.sync_chunk_bytes):
            llm.collective_rpc(VLLMWeightReceiver.load_weight_chunk.__name__,
                               args=(save(chunk),))
        reset_prefix_cache = getattr(llm, "reset_prefix_cache", None)
        if reset_prefix_cache is not None:
            reset_prefix_cache()

    def close(self) -> None:
        """Release the backend; the engine stays for the next run (``shutdown_engine``)."""
        self._llm = None
