"""The policy: a small causal LM built from a config, a loader for any local Hugging Face model
directory, and the per-token log-probabilities and entropies the RL loss needs.

``build_model`` makes a Llama- or GPT-2-style model with transformers' own classes
(``AutoModelForCausalLM.from_config``), seeded, dropout off, so the same code path that trains
the default 1 M-parameter model also loads a checkpoint written by ``save_pretrained`` or a
model a user has on disk (e.g. Qwen2.5-0.5B) through ``load_policy``.

Alignment convention used throughout (``sequence_log_probs``): the logits at position i are the
distribution of token i + 1. Outputs are aligned with ``input_ids``: entry ``[b, t]`` is the
log-probability of ``input_ids[b, t]`` given ``input_ids[b, :t]`` (and the entropy of that
predictive distribution); position 0 has no prediction and is 0. Position ids are
``cumsum(attention_mask) - 1`` so left-padded rows see the same positions as unpadded ones, as
in ``generate``.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GPT2Config,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from workbench.common import seeds
from workbench.common.validation import Strict

# Generation overrides so that samples come from the policy's own distribution (at the given
# temperature): a model's generation_config.json may set filters (Qwen2.5's sets top_k, top_p
# and repetition_penalty) that would make rollouts disagree with sequence_log_probs.
POLICY_DISTRIBUTION = dict(top_k=0, top_p=1.0, min_p=None, repetition_penalty=1.0)


class ModelConfig(Strict):
    """Shape of the from-scratch policy. The default (Llama, 128 wide, 4 layers of 4 heads, MLP
    512, tied embeddings) has 1.06 M parameters; one warm-up step of 64 addition problems
    takes about 0.09 s on one CPU core (``warmup`` module)."""

    arch: Literal["llama", "gpt2"] = "llama"
    hidden: int = Field(128, ge=8, le=8192)
    layers: int = Field(4, ge=1, le=128)
    heads: int = Field(4, ge=1, le=128)
    intermediate: int = Field(512, ge=8, le=65536)
    max_positions: int = Field(256, ge=16, le=131072)
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> ModelConfig:
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        return self


def build_model(config: ModelConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A freshly initialised causal LM of ``config``'s shape over ``tokenizer``'s vocabulary;
    the same ``config.seed`` gives the same weights, and the global RNG is left untouched."""
    special = dict(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    if config.arch == "llama":
        hf_config = LlamaConfig(
            hidden_size=config.hidden, num_hidden_layers=config.layers,
            num_attention_heads=config.heads, num_key_value_heads=config.heads,
            intermediate_size=config.intermediate,
            max_position_embeddings=config.max_positions, **special,
        )
    else:
        hf_config = GPT2Config(
            n_embd=config.hidden, n_layer=config.layers, n_head=config.heads,
            n_inner=config.intermediate, n_positions=config.max_positions,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **special,
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeds.int_seed(config.seed, "init"))  # from_config draws globally
        model = AutoModelForCausalLM.from_config(hf_config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def load_policy(
    path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load any local Hugging Face causal-LM directory (a warm-up checkpoint, a Qwen2.5-0.5B
    on disk, ...) with no network access. The tokenizer pads on the left (batched generation);
    a tokenizer without a pad token pads with its end-of-sequence token."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a model directory (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"{path}: the tokenizer has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    model.to(device)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if model.generation_config.eos_token_id is None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions counted over real tokens only (left padding gets position 0)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def sequence_log_probs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities and entropies of the response tokens, in one forward pass.

    With z = logits / temperature at position t - 1 (which predicts token t):
    ``log_probs[b, t] = z[x_t] - logsumexp(z)`` and
    ``entropy[b, t] = logsumexp(z) - sum_v softmax(z)_v z_v``, both (B, T), aligned with
    ``input_ids``, computed in float32, differentiable, and zero where ``response_mask`` is 0
    (and at t = 0).
    """
    outputs = model(
        input_ids=input_ids, attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask), use_cache=False,
    )
    logits = outputs.logits[:, :-1].float() / temperature
    targets = input_ids[:, 1:].unsqueeze(-1)
    log_norm = torch.logsumexp(logits, dim=-1)
    token_log_probs = logits.gather(-1, targets).squeeze(-1) - log_norm
    entropy = log_norm - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    mask = response_mask[:, 1:].to(token_log_probs.dtype)
    first = token_log_probs.new_zeros(input_ids.shape[0], 1)
    return (
        torch.cat([first, token_log_probs * mask], dim=1),
        torch.cat([first, entropy * mask], dim=1),
    )


@torch.no_grad()
def generate_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    *,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    num_return_sequences: int = 1,
    batch_size: int = 256,
    seed: int | None = None,
) -> list[str]:
    """Completions of ``prompts`` by ``model.generate`` (KV cache, left padding), greedy or
    sampled from the policy's distribution at ``temperature`` (no top-k/top-p/repetition
    filters), decoded without special tokens; prompt i's samples are at
    ``i * num_return_sequences + j``. Sampling with a ``seed`` leaves the global RNG as it was."""
    device = model.device
    was_training = model.training
    model.eval()
    rng_devices = [device] if device.type == "cuda" else []
    rng = torch.random.fork_rng(devices=rng_devices) if seed is not None else nullcontext()
    # the model's stop tokens (Qwen's instruct models list several), else the tokenizer's eos
    stop_ids = model.generation_config.eos_token_id or tokenizer.eos_token_id
    completions: list[str] = []
    with rng:
        if seed is not None:  # generate samples from the global RNG: seeded inside fork_rng
            torch.manual_seed(seed)
        for start in range(0, len(prompts), batch_size):
            batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt",
                              padding=True).to(device)
            output = model.generate(
                **batch, max_new_tokens=max_new_tokens, do_sample=do_sample,
                temperature=temperature if do_sample else None,
                num_return_sequences=num_return_sequences,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=stop_ids,
                **POLICY_DISTRIBUTION,
            )
            new_tokens = output[:, batch["input_ids"].shape[1]:]
            completions += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    model.train(was_training)
    return completions
