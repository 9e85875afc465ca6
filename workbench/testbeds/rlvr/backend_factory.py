"""``make_backend``: the rollout backend a run asks for by name (``backends``' contract):
``hf`` (``backends.HFBackend``) or ``vllm`` (``vllm_backend.VLLMBackend``, imported only when
asked for, CUDA only)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from workbench.testbeds.rlvr.backends import BACKENDS, VLLM_MISSING, HFBackend, RolloutBackend


def _import_vllm():
    if importlib.util.find_spec("vllm") is None:
        raise ImportError(VLLM_MISSING)
    return importlib.import_module("vllm")


def make_backend(
    name: Literal["hf", "vllm"],
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    model_dir: str | Path | None,
    device: str | torch.device,
    **options: Any,
) -> RolloutBackend:
    """The rollout backend ``name`` for ``model`` (on ``device``), loaded from ``model_dir``
    where the backend needs the directory (vllm; hf ignores it). ``options``: both
    ``precision``; hf ``max_batch_size``; vllm those of ``vllm_backend.VLLMBackend``
    (``gpu_memory_utilization``, ``max_model_len``, ``enforce_eager``,
    ``tensor_parallel_size``, ``sleep``, ``sync_chunk_bytes``, any other ``vllm.LLM``
    argument)."""
    if name == "hf":
        return HFBackend(model, tokenizer, device=device, **options)
    if name == "vllm":
        _import_vllm()
        if torch.device(device).type != "cuda" or not torch.cuda.is_available():
            raise ValueError(f"the vllm backend needs CUDA (the policy is on {device}); use "
                             "the 'hf' backend on this machine")
        if model_dir is None:
            raise ValueError("the vllm backend loads the model directory: pass model_dir")
        from workbench.testbeds.rlvr.vllm_backend import VLLMBackend

        return VLLMBackend(model, tokenizer, model_dir, **options)
    raise ValueError(f"unknown rollout backend {name!r}; choose one of {', '.join(BACKENDS)}")
