"""Rollout backends: sample P prompts x n completions from the policy behind one small contract.

``backend_factory.make_backend(name, model, tokenizer, model_dir, device, **options)``
returns a ``RolloutBackend`` whose ``generate(prompts, n, max_new_tokens=..., temperature=1.0,
greedy=False, seed=0, stop=())`` gives ``Rollouts`` with completion j of prompt i at index
``i * n + j``:

- ``prompt_ids``: the prompt's token ids as the policy sees them (the tokenizer's own ids, bos
  included where the tokenizer adds one, no padding), the same list for the n copies;
- ``response_ids``: the generated ids up to and including the first end-of-sequence id
  (``tokenizer.eos_token_id``) when one was generated, no padding; empty only when
  ``max_new_tokens == 0``;
- ``texts``: ``tokenizer.decode(response_ids, skip_special_tokens=True)`` (what the checker
  reads), decoded here for both backends so they agree exactly;
- ``finished``: True where the response ends with eos or a stop string, False where it was
  cut at ``max_new_tokens``;
- ``log_probs``: when sampling, the sampler's log-probability of each response token under
  the distribution it drew from (softmax(logits / temperature), float32); None when greedy.

``stop`` strings end a response after the token whose decoded prefix (special tokens kept)
first contains one of them (``cut_at_stop``, applied here to both backends' output; the
engines are also asked to stop there, to save work).

Sampling draws from softmax(logits / temperature) over the whole vocabulary: no top-k, top-p,
min-p or repetition penalty, whatever the model's ``generation_config`` says, because the RL
loss needs the sampling distribution to be the policy's. ``greedy=True`` ignores
``temperature`` and returns the same argmax completion n times (computed once). The same
``seed`` gives the same rollouts (for the same prompts, n and batch options), and ``generate``
leaves the global RNGs (torch CPU and CUDA, ``random``, numpy) as they were. Generation stops at
``tokenizer.eos_token_id`` only (a model whose ``generation_config`` lists more end ids, such as
an instruct model's end-of-turn token, is not stopped by those; give it as a stop string), so
both backends end responses at the same token. ``precision`` (``fp32`` or ``bf16``) is the
run's one precision setting, the same as the trainer's.

Backends:

- ``hf`` (default, CPU or CUDA): ``model.generate`` with KV cache on the training model itself,
  left padding, at most ``max_batch_size`` sequences per call (option, default 512), under bf16
  autocast for ``bf16``. The temperature is applied by ``SamplerLogProbs``, a logits processor
  that also records the sampled tokens' log-probabilities (transformers runs custom processors
  before its own warpers, so ``temperature=1`` is passed to ``generate``). ``sync_weights`` has
  nothing to copy (it samples from the very object being trained) and only checks that it is
  given that object.
- ``vllm`` (optional ``gpu`` extra, CUDA only): ``vllm_backend.VLLMBackend``, imported only
  when asked for; without vLLM ``make_backend("vllm", ...)`` raises an ImportError naming the
  ``gpu`` extra.
"""

from __future__ import annotations

import contextlib
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

BACKENDS = ("hf", "vllm")
PRECISIONS = ("fp32", "bf16")
VLLM_MISSING = (
    "the 'vllm' rollout backend needs vLLM (>= 0.19.1), which is not installed here: install "
    "the optional `gpu` extra (pip install -e '.[gpu]') in its own environment on a machine "
    "with a CUDA GPU (vLLM brings its own pinned torch), or use the 'hf' backend"
)

# Generation options that would make HF's sampling distribution differ from the policy's;
# passed explicitly so that a model's generation_config (e.g. top_k=20, repetition_penalty=1.05)
# cannot switch them on.
NEUTRAL_HF_SAMPLING = dict(
    top_k=None, top_p=None, min_p=None, typical_p=None, epsilon_cutoff=None, eta_cutoff=None,
    repetition_penalty=None, no_repeat_ngram_size=None, bad_words_ids=None, sequence_bias=None,
    suppress_tokens=None, begin_suppress_tokens=None, min_new_tokens=None,
    forced_bos_token_id=None, forced_eos_token_id=None, exponential_decay_length_penalty=None,
)


@dataclass
class Rollouts:
    """P prompts x n completions, completion j of prompt i at index ``i * n + j``."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    texts: list[str]
    finished: list[bool]
    log_probs: list[list[float]] | None = None  # the sampler's, per response token


@contextlib.contextmanager
def preserved_global_rng(seed: int | None = None) -> Iterator[None]:
    """Run the block with the global RNGs (torch CPU and every initialised CUDA device,
    ``random``, numpy) restored afterwards; torch is seeded with ``seed`` inside when given."""
    cuda_devices = (list(range(torch.cuda.device_count()))
                    if torch.cuda.is_available() and torch.cuda.is_initialized() else [])
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=cuda_devices):
            if seed is not None:
                # Not torch.manual_seed: it would queue a seed for a CUDA not yet initialised.
                torch.default_generator.manual_seed(seed)
                if cuda_devices:
                    torch.cuda.manual_seed_all(seed)
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def cut_at_eos(ids: Sequence[int], eos_token_id: int) -> list[int]:
    """``ids`` up to and including the first ``eos_token_id`` (all of them when none)."""
    ids = list(ids)
    try:
        return ids[:ids.index(eos_token_id) + 1]
    except ValueError:
        return ids


def cut_at_stop(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int],
                stop: Sequence[str]) -> tuple[list[int], bool]:
    """(``ids`` up to and including the token whose prefix's text, decoded with special
    tokens kept, first contains one of ``stop``; whether one was found)."""
    ids = list(ids)
    if not any(s in tokenizer.decode(ids, skip_special_tokens=False) for s in stop):
        return ids, False
    for end in range(1, len(ids) + 1):
        text = tokenizer.decode(ids[:end], skip_special_tokens=False)
        if any(s in text for s in stop):
            return ids[:end], True
    return ids, False


class RolloutBackend(ABC):
    """Samples completions of prompts from a policy (see the module docstring for the contract).

    Subclasses implement ``_sample`` (response ids per completion, cut at the first eos) and
    ``sync_weights``; tokenising, greedy copies, decoding and ``finished`` are shared here so
    every backend fills ``Rollouts`` the same way."""

    name: ClassVar[str]

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token: rollouts need one to end responses")
        self.tokenizer = tokenizer
        self.eos_token_id: int = tokenizer.eos_token_id

    def generate(
        self,
        prompts: Sequence[str],
        n: int,
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        greedy: bool = False,
        seed: int = 0,
        stop: Sequence[str] = (),
    ) -> Rollouts:
        """``n`` completions of each prompt, completion j of prompt i at index ``i * n + j``;
        ``greedy`` ignores ``temperature``; the same ``seed`` gives the same output; a
        response is cut after the token that completes the first of the ``stop`` strings."""
        prompts = list(prompts)
        stop = tuple(stop)
        if not all(isinstance(prompt, str) for prompt in prompts):
            raise TypeError("prompts must be strings")
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop strings must be non-empty strings, got {stop!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n (completions per prompt) must be an integer >= 1, got {n!r}")
        if (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
                or max_new_tokens < 0):
            raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
        if not greedy and not (temperature > 0 and np.isfinite(temperature)):
            raise ValueError(f"temperature must be positive and finite when sampling, got "
                             f"{temperature!r} (use greedy=True for argmax decoding)")
        prompt_ids = self.tokenizer(prompts)["input_ids"] if prompts else []
        copies = 1 if greedy else n
        log_probs: list[list[float]] | None = None
        if max_new_tokens == 0 or not prompts:
            responses = [[] for _ in range(len(prompts) * copies)]
            log_probs = None if greedy else [[] for _ in responses]
        else:
            responses, log_probs = self._sample(
                prompt_ids, copies, max_new_tokens=max_new_tokens,
                temperature=None if greedy else float(temperature), seed=seed, stop=stop,
            )
        stopped = [False] * len(responses)
        if stop:
            cut = [cut_at_stop(self.tokenizer, ids, stop) for ids in responses]
            responses, stopped = [ids for ids, _ in cut], [flag for _, flag in cut]
            if log_probs is not None:
                log_probs = [lp[:len(ids)] for lp, ids in zip(log_probs, responses, strict=True)]
        texts = self.tokenizer.batch_decode(responses, skip_special_tokens=True)
        if copies != n:
            responses = [list(ids) for ids in responses for _ in range(n)]
            texts = [text for text in texts for _ in range(n)]
            stopped = [flag for flag in stopped for _ in range(n)]
        return Rollouts(
            prompt_ids=[list(ids) for ids in prompt_ids for _ in range(n)],
            response_ids=responses,
            texts=texts,
            finished=[flag or (bool(ids) and ids[-1] == self.eos_token_id)
                      for ids, flag in zip(responses, stopped, strict=True)],
            log_probs=log_probs,
        )

    @abstractmethod
    def _sample(
        self, prompt_ids: list[list[int]], copies: int, *, max_new_tokens: int,
        temperature: float | None, seed: int, stop: tuple[str, ...] = (),
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """``copies`` responses per prompt (prompt-major), each cut after its first eos
        (``stop`` may be used to end generation early; ``generate`` cuts at them), and,
        when sampling, the sampler's log-probability of each response token (None when
        greedy); ``temperature`` None means greedy."""

    @abstractmethod
    def sync_weights(self, model: PreTrainedModel) -> None:
        """Make the backend sample from ``model``'s current weights."""

    @abstractmethod
    def close(self) -> None:
        """Release what the backend holds (idempotent)."""

    def idle(self) -> None:
        """The loop stops sampling for a while (training): a backend may free memory until
        its next ``sync_weights`` or ``generate`` (vllm's sleep mode); nothing by default."""
        return None

    def __enter__(self) -> RolloutBackend:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class SamplerLogProbs(LogitsProcessor):
    """A logits processor that divides the scores by the temperature and records the
    log-probability log softmax(z / T)[x_t] of each token the sampler then draws (read from
    the next call's input ids, the last one from the output) in float32; one (rows, V) tensor
    is held at a time."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.previous: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor):
        if self.previous is not None:
            self.steps.append(self.previous.gather(1, input_ids[:, -1:]).squeeze(1))
        scores = scores / self.temperature
        self.previous = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def result(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """(rows, T) log-probabilities of ``new_tokens`` (generate's new columns)."""
        steps = list(self.steps)
        if self.previous is not None and len(steps) < new_tokens.shape[1]:
            steps.append(self.previous.gather(1, new_tokens[:, len(steps), None]).squeeze(1))
        self.previous, self.steps = None, []
        if not steps:
            return new_tokens.new_zeros(new_tokens.shape, dtype=torch.float32)
        return torch.stack(steps, dim=1).cpu()


class HFBackend(RolloutBackend):
    """``model.generate`` on the training model itself (KV cache, left padding, batched)."""

    name = "hf"

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        device: str | torch.device | None = None,
        max_batch_size: int = 512,
        precision: Literal["fp32", "bf16"] = "fp32",
    ):
        super().__init__(tokenizer)
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; choose one of "
                             f"{', '.join(PRECISIONS)}")
        self.precision = precision
        if device is not None:
            wanted, actual = torch.device(device), model.device
            if wanted.type != actual.type or (wanted.index is not None
                                              and wanted.index != actual.index):
                raise ValueError(f"the hf backend samples on the model's own device, which is "
                                 f"{actual}, not {wanted}: move the model first")
        self.model = model
        self.max_batch_size = max_batch_size
        self.pad_token_id = (tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                             else self.eos_token_id)

    def _sample(self, prompt_ids, copies, *, max_new_tokens, temperature, seed, stop=()):
        # the temperature is applied by the recorder (HF runs custom processors before its
        # own warpers), so the log-probs it records are those of the distribution sampled
        sampling = dict(do_sample=False) if temperature is None else dict(do_sample=True,
                                                                          temperature=1.0)
        stopping = dict(stop_strings=list(stop), tokenizer=self.tokenizer) if stop else {}
        prompts_per_call = max(1, self.max_batch_size // copies)
        was_training = self.model.training
        self.model.eval()
        responses: list[list[int]] = []
        log_probs: list[list[float]] | None = None if temperature is None else []
        try:
            with preserved_global_rng(seed), torch.no_grad(), self.autocast():
                for start in range(0, len(prompt_ids), prompts_per_call):
                    input_ids, attention_mask = self._left_pad(
                        prompt_ids[start:start + prompts_per_call])
                    recorder = None if temperature is None else SamplerLogProbs(temperature)
                    output = self.model.generate(
                        input_ids=input_ids, attention_mask=attention_mask,
                        max_new_tokens=max_new_tokens, num_return_sequences=copies,
                        pad_token_id=self.pad_token_id, eos_token_id=self.eos_token_id,
                        logits_processor=LogitsProcessorList([recorder] if recorder else []),
                        **NEUTRAL_HF_SAMPLING, **sampling, **stopping,
                    )
                    new_tokens = output[:, input_ids.shape[1]:]
                    rows = self._split_at_eos(new_tokens)
                    responses += rows
                    if recorder is not None:
                        recorded = recorder.result(new_tokens).tolist()
                        log_probs += [lp[:len(row)] for lp, row in zip(recorded, rows,
                                                                       strict=True)]
        finally:
            self.model.train(was_training)
        return responses, log_probs

    def autocast(self):
        """bf16 autocast on the model's device where ``precision`` is bf16, else nothing."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.model.device.type, dtype=torch.bfloat16)

    def _left_pad(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(row) for row in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            if row:
                input_ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
                attention_mask[i, width - len(row):] = 1
        device = self.model.device
        return input_ids.to(device), attention_mask.to(device)

    def _split_at_eos(self, new_tokens: torch.Tensor) -> list[list[int]]:
        """Rows of ``new_tokens`` up to and including their first eos (padding after it
        dropped), found with tensor ops and one transfer to Python."""
        is_eos = new_tokens == self.eos_token_id
        lengths = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1) + 1,
                              new_tokens.shape[1])
        return [row[:length] for row, length in zip(new_tokens.tolist(), lengths.tolist(),
                                                     strict=True)]

    def sync_weights(self, model: PreTrainedModel) -> None:
        """Nothing to copy: the backend samples from the training model object itself."""
        if model is not self.model:
            raise ValueError("the hf backend samples from the training model object it was "
                             "built with; sync_weights was given a different model")

    def close(self) -> None:
        """Nothing to release (the model belongs to the caller)."""
