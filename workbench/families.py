"""The per-family contracts a registered method implements (DESIGN.md, "Method interface").

Each family base class fixes ``family`` and the one or two methods a task calls. A method's
``requires`` names what the task must provide (``Task.provides``); incompatible pairs are
refused when a sweep spec is checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from workbench.registry import Method


class StepSizeMethod(Method):
    """Builds a ``torch.optim.Optimizer`` over the task's parameters.

    The task calls ``optimizer.step(closure)``. ``closure(backward=True)`` evaluates the loss on
    the current minibatch at the current parameters, fills ``.grad`` and returns the loss;
    ``closure(backward=False)`` only evaluates the loss (a line search's trial point). The
    optimizer calls it at least once and sets ``last_step_size`` (a float) on every step.
    ``info`` holds what the task provides (e.g. ``f_star``, ``loss_lower_bound``,
    ``batches_per_epoch``).
    """

    family = "step_size"

    def build(
        self, params: Iterable[torch.Tensor], info: Mapping[str, Any]
    ) -> torch.optim.Optimizer:
        raise NotImplementedError


class BatchSizeMethod(Method):
    """Returns the batch size of the next step from the step and observed statistics
    (``loss``, ``grad_norm``, per-sample gradient variance where the method requires it)."""

    family = "batch_size"

    def next_batch_size(self, step: int, stats: Mapping[str, float]) -> int:
        raise NotImplementedError


class EntropyMethod(Method):
    """Returns the entropy coefficient from the step and the measured policy entropy; may also
    adjust the policy loss (clip bounds, token masks) through ``policy_loss_hook``."""

    family = "entropy"

    def coefficient(self, step: int, entropy: float) -> float:
        raise NotImplementedError

    def policy_loss_hook(self, **inputs: torch.Tensor) -> Mapping[str, torch.Tensor]:
        return {}


class AdvantageMethod(Method):
    """A pure function on tensors (rewards, values, masks, group ids, ... as ``requires``
    names them) returning ``(advantages, returns)``. No hidden state."""

    family = "advantage"

    def compute(self, **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError
