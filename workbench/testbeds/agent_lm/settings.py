"""The turn loop's knobs, declared without importing transformers (so listing the tasks or
checking a spec never pays for it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workbench.testbeds.agent.sampling import TreeSampling
from workbench.testbeds.settings import Settings


class TurnSettings(TreeSampling, Settings):
    """The turn loop's knobs (how rollouts are sampled: ``TreeSampling``, as the network
    loop's; a tree's shared turns are restored states, the prompt being the observation)."""

    instances_per_update: int = Field(8, ge=1, le=65_536, description="M: task instances per "
                                                                       "update")
    group_size: int = Field(4, ge=1, le=1024, description="G: rollouts of each instance")
    segment_branching: list[int] = Field(
        [2, 2], min_length=1, max_length=16, description="segments sampling: the branches "
        "at the start of each depth's segment (their product is group_size, the most leaves "
        "a tree has)")
    epochs: int = Field(1, ge=1, le=100)
    minibatches: int = Field(2, ge=1, le=1024)
    clip: float = Field(0.2, gt=0.0, le=10.0)
    max_grad_norm: float | None = Field(1.0, gt=0.0)
    value_coef: float = Field(0.5, ge=0.0, description="weight of the turn-level value loss "
                                                         "(estimators that read values)")
    temperature: float = Field(1.0, gt=0.0, le=10.0, description="sampling temperature of "
                                                                  "the actions")
    max_new_tokens: int = Field(8, ge=1, le=64, description="longest action text, <eos> "
                                                            "included")
    malformed_penalty: float = Field(0.0, ge=0.0, le=10.0, description="reward subtracted at "
                                     "a turn whose text names no action (a no-op)")
    eval_every: int = Field(10, ge=1, le=1_000_000, description="updates between held-out "
                                                                 "evaluations")
    kl_coef: float = Field(0.0, ge=0.0, le=100.0, description="weight of the KL penalty to the "
                           "reference model (a frozen copy of the initial one) in the loss; "
                           "0: off (train/kl_ref is logged whenever a reference is kept)")
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k3", description="the per-token KL estimator (shared.losses.kl_penalty)")
