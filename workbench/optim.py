"""Helpers shared by optimizers that treat all parameters as one flat vector."""

from __future__ import annotations

import math

import torch


class FlatOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` with flat-vector helpers; sets ``last_step_size``.

    Scheme state that must survive ``state_dict()`` lives in ``param_groups[0]``.
    """

    last_step_size: float = math.nan

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def step(self, closure):
        """One loss-and-gradient evaluation, then ``_update()`` outside autograd. Schemes that
        re-evaluate the loss (line searches) override ``step`` itself."""
        loss = closure()
        with torch.no_grad():
            self._update()
        return loss

    def _update(self) -> None:
        raise NotImplementedError

    def _live_grads(self) -> list[torch.Tensor]:
        """The current gradients (zeros where a parameter has none), not copied."""
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params()]

    def _grads(self) -> list[torch.Tensor]:
        return [
            p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
            for p in self._params()
        ]

    @staticmethod
    def _norm_sq(tensors: list[torch.Tensor]) -> float:
        return float(sum(torch.sum(t * t) for t in tensors))

    @torch.no_grad()
    def _set(self, values: list[torch.Tensor]) -> None:
        for p, v in zip(self._params(), values, strict=True):
            p.copy_(v)

    @torch.no_grad()
    def _snapshot(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self._params()]

    @torch.no_grad()
    def _descend(self, direction: list[torch.Tensor], lr: float) -> None:
        """x <- x - lr * direction."""
        for p, d in zip(self._params(), direction, strict=True):
            p.add_(d, alpha=-lr)

    @torch.no_grad()
    def _step_from(self, origin: list[torch.Tensor], direction: list[torch.Tensor], lr: float):
        """Set the parameters to ``origin - lr * direction``."""
        for p, x, d in zip(self._params(), origin, direction, strict=True):
            torch.add(x, d, alpha=-lr, out=p)
