"""Helpers shared by optimizers that treat all parameters as one flat vector, or, on a seed
axis, as one flat vector per seed.

Seed axis (``seeds = S``): every parameter has a leading axis of length S, seed s's slice is its
own iterate, and every scalar of the scheme (norms, step sizes, targets) is a float64 tensor of
shape (S,) reduced over that seed's slice only. Without one, the same code sees 0-d tensors.
"""

from __future__ import annotations

import math

import torch


class FlatOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` with flat-vector helpers; sets ``last_step_size``.

    Scheme state that must survive ``state_dict()`` lives in ``param_groups[0]``.
    """

    last_step_size: float = math.nan
    seeds: int | None = None  # S when every parameter has a leading seed axis

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

    # -- per seed: the scalars of a scheme as float64 tensors, shape (S,) on a seed axis, else ()

    def _sum_per_seed(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """sum of each tensor's entries, per seed (the seed axis is never reduced), float64."""
        rows = 1 if self.seeds is None else self.seeds  # the same reduction in both cases
        total = sum(t.reshape(rows, -1).sum(dim=1) for t in tensors).double()
        return total[0] if self.seeds is None else total

    def _sq_per_seed(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """||t||^2 over all tensors, per seed."""
        return self._sum_per_seed([t * t for t in tensors])

    def _as_seed_scalar(self, value) -> torch.Tensor:
        """A float, or a per-seed sequence from ``info`` (a value that differs by seed), as a
        float64 tensor of the per-seed shape."""
        shape = () if self.seeds is None else (self.seeds,)
        device = self._params()[0].device
        return torch.as_tensor(value, dtype=torch.float64, device=device).expand(shape).clone()

    def _on_param(self, value: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """A per-seed scalar broadcast over parameter ``p`` (in its dtype)."""
        if self.seeds is None:
            return value.to(p.dtype)
        return value.to(p.dtype).reshape(-1, *([1] * (p.dim() - 1)))

    @torch.no_grad()
    def _descend_per_seed(self, direction: list[torch.Tensor], lr: torch.Tensor) -> None:
        """x <- x - lr * direction with a per-seed lr (one expression with and without a seed
        axis, so a seed's arithmetic is the same in both)."""
        for p, d in zip(self._params(), direction, strict=True):
            p.sub_(d * self._on_param(lr, p))

    @torch.no_grad()
    def _step_from_per_seed(self, origin: list[torch.Tensor], direction: list[torch.Tensor],
                            lr: torch.Tensor, where: torch.Tensor) -> None:
        """Set the parameters of the seeds in ``where`` to ``origin - lr * direction``; the
        others keep theirs (as ``_step_from`` without a seed axis, where ``where`` is 0-d)."""
        if self.seeds is None:
            if bool(where):
                self._set([x - d * self._on_param(lr, p)
                           for p, x, d in zip(self._params(), origin, direction, strict=True)])
            return
        for p, x, d in zip(self._params(), origin, direction, strict=True):
            mask = where.reshape(-1, *([1] * (p.dim() - 1)))
            p.copy_(torch.where(mask, x - d * self._on_param(lr, p), p))

    def _kept(self, value: torch.Tensor):
        """A per-seed scalar as scheme state in ``param_groups``: a float without a seed axis
        (the state a sequential run has always saved), the (S,) tensor on one."""
        return float(value) if self.seeds is None else value.clone()

    def _report(self, size: torch.Tensor) -> None:
        """``last_step_size``: a float, or on a seed axis the (S,) tensor of per-seed sizes."""
        self.last_step_size = float(size) if self.seeds is None else size.clone()

    def _kept_count(self, value: torch.Tensor):
        """A per-seed count (the steps a seed has taken) as scheme state in ``param_groups``:
        an int without a seed axis (as before), the (S,) tensor on one."""
        return int(value) if self.seeds is None else value.clone()

    def _where_per_seed(self, where: torch.Tensor, new: torch.Tensor,
                        old: torch.Tensor) -> torch.Tensor:
        """Per seed, ``new`` for the seeds in ``where`` and ``old`` for the others (tensors
        shaped as a parameter); without a seed axis ``where`` is 0-d and one of them is
        returned as it is."""
        if self.seeds is None:
            return new if bool(where) else old
        return torch.where(where.reshape(-1, *([1] * (old.dim() - 1))), new, old)
