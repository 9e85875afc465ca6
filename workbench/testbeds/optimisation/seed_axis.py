"""The optimisation loop, on a seed axis: the S seeds of a trial as one computation, and a run
of one seed (``Task.run``) as a seed axis of one (``train_one``; the loop of both).

Each seed keeps what it has alone: its own data, start and minibatch stream (its ``Problem``,
built from its seed), its own counters, metrics and stopping. The variables of the S problems
are stacked on a leading seed axis; the loss and the metrics are the problems' ``Pure``
formulas (written over leading axes) called once on the stacked tensors; one optimizer built on
the seed axis (``families.step_size``'s seed-axis contract) steps all seeds at once. A seed
whose loss stops being finite stops (its rows are frozen: no gradient, no counts, no more
metrics) while the others go on. On S > 1 the batch-size slot takes only methods declared
``vectorised`` (schedules, whose sizes the seeds share). ``time/wall_seconds`` is each seed's
share of the batch's optimizer time (the batch's time / S). The step-size inputs the formulas
give (``Pure.inputs``: ``lmo``, ``margins``, ``hvp``, ``logit_jvp``) are built here over the
stacked variables and the step's rows; ``closure(active=mask)`` (a probe some seeds take)
counts a gradient evaluation for the seeds in ``mask`` only.

One seed (S = 1) is the same loop (batches, batch-size slot, counters, metrics, stopping)
on the seed's own ``Problem``: its own leaves, the optimizer the step-size method builds for one
run (``build(leaves, problem.info)``, no ``seeds``: so a method not declared ``vectorised``
runs too), the problem's own loss and metrics (``pure_problem``'s: the formulas on an axis of
one, or, for one-seed formulas, the networks', called unmapped), whose closure returns the 0-d
loss; and a batch-size method that reads per-sample gradients (``per_sample_grads``:
noise_scale, norm_test) gets them (``loop.per_sample_stats``). A run's numbers are those of
the sequential loop this replaced, bit for bit on the CPU (``tests/test_one_seed_loop.py``),
at no more cost (``benchmarks/seed_axis.py --one-seed --against``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import torch

from workbench.common.budget import Budget, LogFn, SeedsLogFn
from workbench.families import BatchSlot, seed_axis_info, step_size_taken, step_sizes_taken
from workbench.testbeds.optimisation.loop import (
    Batches,
    Problem,
    Target,
    grad_sq_per_seed,
    per_sample_stats,
    step_metrics,
)


def _stacked(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack([t.detach() for t in tensors])


def _per_seed(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-seed mask or scalar broadcast over ``like``'s trailing axes."""
    return value.reshape(-1, *([1] * (like.dim() - 1)))


def train_one(problem: Problem, step_method, *, batch_size: int | None, budget: Budget,
              seed: int, device: torch.device, log: LogFn, batch_method=None,
              target: Target | None = None) -> dict[str, Any]:
    """One seed's run (``Task.run``): ``train_seeds`` on a seed axis of one; its final
    metrics."""
    (final,) = train_seeds([problem], step_method, batch_size=batch_size, budget=budget,
                           seeds=[seed], device=device, batch_method=batch_method,
                           target=target, log=lambda step, per_seed: log(step, per_seed[0]))
    return final


def train_seeds(problems: Sequence[Problem], step_method, *, batch_size: int | None,
                budget: Budget, seeds: Sequence[int], device: torch.device, log: SeedsLogFn,
                batch_method=None, target: Target | None = None) -> list[dict[str, Any]]:
    """Gradient descent for every problem (seed ``seeds[i]``'s) at once, until the budget is
    spent or each seed's loss stops being finite; each seed's final metrics. The problems
    must carry their ``Pure`` formulas."""
    n_seeds = len(problems)
    alone = n_seeds == 1
    needs_stats = batch_method is not None and "per_sample_grads" in batch_method.requirements(
        batch_method.params)
    if needs_stats and not alone:
        raise ValueError("per-sample gradient statistics are a seed's own: a batch-size method "
                         "that reads them runs one seed at a time")
    if needs_stats and problems[0].sample_loss is None:
        raise ValueError("this task gives no per-sample loss; the batch-size method needs one")
    n_samples = problems[0].n_samples
    streams = [Batches(p.n_samples, seed, device) for p, seed in zip(problems, seeds, strict=True)]
    live = [True] * n_seeds
    stopped = torch.zeros(n_seeds, dtype=torch.bool, device=device)  # once a seed has stopped
    grad_evals, loss_evals = [0] * n_seeds, [0] * n_seeds
    step_stats: dict[str, float] = {}
    batch: torch.Tensor | None = None  # the step's rows: (b,) for one seed, (S, b) on the axis
    if alone:  # the seed's own problem: its leaves, its optimizer, its loss and metrics
        problem = problems[0]
        leaves = problem.variables
        optimizer = step_method.build(leaves, problem.info)
        batch_loss = problem.batch_loss  # the step's rows (b,) -> its 0-d loss

        def evaluate(step: int, last: bool) -> list[dict[str, float]]:
            return [problem.evaluate(last)]
    else:
        first = problems[0].pure
        pure = first.on_seed_axis(tuple(_stacked([p.pure.data[j] for p in problems])
                                        for j in range(len(first.data))))
        leaves = [_stacked([p.variables[k] for p in problems]).requires_grad_(True)
                  for k in range(len(problems[0].variables))]
        on_axis = pure.bound_inputs(lambda: leaves, lambda: batch)
        optimizer = step_method.build(leaves, seed_axis_info([p.info for p in problems],
                                                             on_axis))

        def batch_loss(batch: torch.Tensor | None) -> torch.Tensor:
            values = leaves
            if not all(live):  # a stopped seed's rows are detached: no gradient, whatever
                values = [torch.where(_per_seed(stopped, v), v.detach(), v) for v in leaves]
            return pure.loss(values, pure.data, batch)

        @torch.no_grad()
        def evaluate(step: int, last: bool) -> list[dict[str, float]]:
            evaluated = pure.evaluate(leaves, step, last)
            names = list(evaluated)
            table = torch.stack([evaluated[k].double() for k in names], dim=1).tolist()
            return [dict(zip(names, row, strict=True)) for row in table]

    def count(counts: list[int], active: torch.Tensor | None) -> None:
        asked = live if active is None else active.tolist()
        for s in range(n_seeds):
            counts[s] += live[s] and bool(asked[s])

    def closure(backward: bool = True, active: torch.Tensor | None = None) -> torch.Tensor:
        """The step's loss (one seed: 0-d; S seeds: (S,)), with gradients if ``backward``."""
        if not backward:
            if alone:  # a run of one seed counts every evaluation its optimizer asks for
                loss_evals[0] += 1
            else:
                count(loss_evals, active)
            with torch.no_grad():
                return batch_loss(batch)
        if alone:
            grad_evals[0] += 1
        else:
            count(grad_evals, active)
        optimizer.zero_grad(set_to_none=False)
        if needs_stats and not step_stats:  # one seed: its per-sample gradients, one pass
            per_sample, stats = per_sample_stats(problems[0], batch)
            step_stats.update(stats)
            for v, g in zip(leaves, per_sample, strict=True):
                v.grad = g.mean(dim=0).to(v.dtype)
            with torch.no_grad():
                return batch_loss(batch)
        value = batch_loss(batch)
        (value if alone else value.sum()).backward()
        return value.detach()

    slot = BatchSlot(batch_method, n_samples)
    size = batch_size if batch_method is None else slot.start(batch_size, **problems[0].info)
    step_sizes = [math.nan] * n_seeds
    reached = [math.nan] * n_seeds
    samples, seconds = 0, 0.0
    finals: list[dict[str, Any] | None] = [None] * n_seeds

    def record(step: int, extra: list[dict[str, float]],
               last: bool = False) -> list[dict[str, float] | None]:
        evaluated = evaluate(step, last)
        shown: list[dict[str, float] | None] = [None] * n_seeds
        for s in range(n_seeds):
            if finals[s] is not None:
                continue
            metrics = step_metrics(evaluated[s], extra[s],
                                   step_size=step_sizes[s], samples=samples,
                                   grad_evals=grad_evals[s], loss_evals=loss_evals[s],
                                   seconds=seconds / n_seeds)
            if target is not None:
                reached[s] = target.first(reached[s], step, metrics)
            shown[s] = metrics
        log(step, shown)
        return shown

    record(0, [{"batch/size": float(size or n_samples)}] * n_seeds)
    step = 0
    for step in range(1, budget.steps + 1):
        if alone:  # its rows; its own inputs (margins, hvp) read them from ``current``
            batch = pick = problems[0].current["batch"] = streams[0].next(size)
        else:
            picks = [stream.next(size) for stream in streams]
            pick = picks[0]
            batch = None if pick is None else torch.stack(picks)
        used = n_samples if pick is None else len(pick)
        step_stats.clear()
        started = time.perf_counter()
        if alone:
            losses = [float(optimizer.step(closure))]
            grad_sq = [float(grad_sq_per_seed(leaves, 1))]
        else:
            losses = optimizer.step(closure).detach().double().tolist()
            grad_sq = grad_sq_per_seed(leaves, n_seeds).tolist()
        if batch_method is not None:  # one seed, or a schedule that never reads a seed's
            at = live.index(True)
            size = slot.after_step(step, loss=losses[at], grad_sq=grad_sq[at], batch_size=used,
                                   samples=samples + used, extra=step_stats)
        seconds += time.perf_counter() - started
        samples += used
        step_sizes = ([step_size_taken(optimizer)] if alone
                      else step_sizes_taken(optimizer, n_seeds))
        diagnostics = slot.diagnostics()
        extra = [{"train/batch_loss": loss, "train/grad_norm": math.sqrt(sq),
                  "batch/size": float(used), **diagnostics}
                 for loss, sq in zip(losses, grad_sq, strict=True)]
        spent = budget.spent(samples, seconds / n_seeds)
        shown = record(step, extra, last=spent or step == budget.steps)
        for s, metrics in enumerate(shown):
            if metrics is None:
                continue
            diverged = not math.isfinite(metrics["train/loss"])
            if diverged or spent or step == budget.steps:
                finals[s] = {**metrics, "steps": step, "diverged": diverged}
                live[s] = False
                stopped[s] = True
        if not any(live):
            break
    return finals
