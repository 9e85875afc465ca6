"""The RLVR testbed's knobs, declared without importing transformers (so ``workbench tasks``
and a spec's validation never pay for it): the loop's settings and the warm-up's defaults
(their reasons are in ``warmup``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workbench.testbeds.settings import Settings

DEFAULT_TARGET = 0.35
DEFAULT_MAX_STEPS = 3000
DEFAULT_BATCH_SIZE = 64
DEFAULT_LR = 1e-3


class RLSettings(Settings):
    """Everything the loop reads, with its bounds."""

    prompts: int = Field(16, ge=1, description="P: prompts per step")
    group_size: int = Field(8, ge=1, description="G: completions per prompt")
    batch_axis: Literal["prompts", "group_size"] = Field(
        "prompts", description="what the batch_size slot changes")
    max_new_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, gt=0)
    epochs: int = Field(1, ge=1)
    minibatches: int = Field(1, ge=1)
    clip: float = Field(0.2, gt=0)
    dual_clip: float | None = Field(None, gt=1)
    ratio_level: Literal["token", "sequence", "prefix"] = Field(
        "token", description="the importance ratio of the clipped loss: per token (PPO), the "
        "sequence's geometric mean (GSPO) or each prefix's geometric mean (PNPO)")
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                      "seq-mean-token-sum-norm"] = "token-mean"
    loss_constant: Literal["longest", "max_new_tokens"] = Field(
        "longest", description="the constant seq-mean-token-sum-norm divides token sums by: "
        "the step's longest response, or max_new_tokens (verl pads every response to the "
        "maximum length, so its constant is that one, whatever the batch)")
    kl_coef: float = Field(0.0, ge=0)
    kl_kind: Literal["k1", "k2", "k3"] = "k3"
    value_coef: float = Field(0.5, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0)
    format_reward: float = Field(0.0, ge=0, le=1)
    dynamic_sampling: bool = False
    max_refills: int = Field(4, ge=0)
    eval_every: int = Field(10, ge=1)
    eval_k: int = Field(8, ge=1)
    eval_k_prompts: int = Field(64, ge=1)
    prompt_template: Literal["raw", "few-shot", "chat"] = Field(
        "raw", description="raw: the bare problem, the whole completion is the answer; "
        "few-shot/chat: the answer is read after the last '####' (prompting)")
    shots: int = Field(4, ge=1, le=64, description="worked examples of the few-shot template")
    stop: list[str] | None = Field(None, description="strings that end a response; None: "
                                   "the template's default ('\\n\\n' for few-shot)")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="the policy's forward passes, rollout and training alike: fp32, "
        "or bf16 autocast over fp32 master weights")
    tis_cap: float | None = Field(
        None, gt=0, description="truncated importance sampling: scale each token's policy "
        "loss by min(exp(logp_old - logp_rollout), tis_cap); None: off")
    staleness: int = Field(
        0, ge=0, le=10_000, description="k: completions are sampled by the policy as it was k "
        "updates ago (the initial one before that), as an asynchronous actor's would be; the "
        "loss's ratio is taken against the current policy and tis_cap corrects for the "
        "sampler (staleness); 0: on-policy")
