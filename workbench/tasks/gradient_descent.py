"""The shared training loop of the optimisation testbeds: (minibatch) gradient descent with a
``step_size`` slot, counting every cost that fair comparison needs.

Per step: draw a minibatch (without replacement within an epoch, seeded), call
``optimizer.step(closure)``, evaluate the full objective, log. ``time/wall_seconds`` counts the
optimizer's own time only: full-data evaluation and logging are excluded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from workbench.tasks.base import Budget, LogFn


@dataclass
class Problem:
    """A finite-sum objective f(x) = mean_i f_i(x) over ``n_samples`` terms."""

    variables: list[torch.Tensor]
    n_samples: int
    batch_loss: Callable[[torch.Tensor | None], torch.Tensor]  # indices (None: all) -> mean loss
    evaluate: Callable[[], dict[str, float]]  # full-data metrics, at no counted cost
    info: dict[str, Any] = field(default_factory=dict)


class _Counters:
    def __init__(self) -> None:
        self.grad_evals = 0
        self.loss_evals = 0


class _Batches:
    """Seeded epochs of shuffled indices; ``None`` for full-batch steps."""

    def __init__(self, n: int, batch_size: int | None, seed: int, device: torch.device):
        self.n, self.size, self.device = n, batch_size, device
        self.generator = torch.Generator().manual_seed(seed)
        self.order: torch.Tensor | None = None
        self.cursor = n

    def next(self) -> torch.Tensor | None:
        if self.size is None or self.size >= self.n:
            return None
        if self.cursor + self.size > self.n:
            self.order = torch.randperm(self.n, generator=self.generator).to(self.device)
            self.cursor = 0
        batch = self.order[self.cursor : self.cursor + self.size]
        self.cursor += self.size
        return batch


def batches_per_epoch(n_samples: int, batch_size: int | None) -> int:
    return 1 if batch_size is None or batch_size >= n_samples else n_samples // batch_size


def train(
    problem: Problem,
    optimizer: torch.optim.Optimizer,
    *,
    batch_size: int | None,
    budget: Budget,
    seed: int,
    device: torch.device,
    log: LogFn,
) -> dict[str, Any]:
    """Run gradient descent until the budget is spent or the loss stops being finite."""
    counters = _Counters()
    batches = _Batches(problem.n_samples, batch_size, seed, device)
    samples, seconds, diverged = 0, 0.0, False
    step_size = math.nan
    batch: torch.Tensor | None = None

    def closure(backward: bool = True) -> torch.Tensor:
        if not backward:
            counters.loss_evals += 1
            with torch.no_grad():
                return problem.batch_loss(batch)
        counters.grad_evals += 1
        optimizer.zero_grad(set_to_none=False)
        loss = problem.batch_loss(batch)
        loss.backward()
        return loss.detach()

    def record(step: int, extra: Mapping[str, float]) -> dict[str, float]:
        metrics = dict(problem.evaluate())
        metrics.update(extra)
        metrics.update({
            "method/step_size": step_size,
            "cost/samples": float(samples),
            "cost/grad_evals": float(counters.grad_evals),
            "cost/loss_evals": float(counters.loss_evals),
            "time/wall_seconds": seconds,
        })
        log(step, metrics)
        return metrics

    metrics = record(0, {})
    for step in range(1, budget.steps + 1):
        batch = batches.next()
        started = time.perf_counter()
        batch_loss = float(optimizer.step(closure))
        grad_norm = math.sqrt(sum(float(torch.sum(v.grad**2)) for v in problem.variables))
        seconds += time.perf_counter() - started
        samples += problem.n_samples if batch is None else len(batch)
        step_size = float(getattr(optimizer, "last_step_size", math.nan))
        metrics = record(step, {"train/batch_loss": batch_loss, "train/grad_norm": grad_norm})
        if not math.isfinite(metrics["train/loss"]):
            diverged = True
            break
        if budget.samples is not None and samples >= budget.samples:
            break
        if budget.wall_seconds is not None and seconds >= budget.wall_seconds:
            break
    return {**metrics, "steps": step, "diverged": diverged}
