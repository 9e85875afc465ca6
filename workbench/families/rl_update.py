"""One policy-gradient optimizer step on one minibatch, written once for every RL loop.

A loop supplies only its minibatch loss; ``policy_step`` does the rest, in this order:

1. ``closure(backward=True)``: with gradients enabled iff ``backward``, ``L, metrics = loss()``;
   for a line search's ``closure(backward=False)`` that is all (L returned, nothing touched);
2. on ``backward``: zero the gradients, ``L.backward()``, take the gradient norm
   g = ||(grad p for p in params)||_2 (``torch.nn.utils.get_total_norm``) and, with a
   ``max_grad_norm`` c, scale every gradient by min(1, c / (g + 1e-6)) (exactly
   ``torch.nn.utils.clip_grad_norm_``); without one the gradients are left as they are;
3. the first evaluation's metrics and g (``train/grad_norm``, unclipped) are the step's:
   the minibatch at the starting point, however often the step size method re-evaluates;
4. ``optimizer.step(closure)``, then ``after_step(stats)`` (metrics measured after the step,
   e.g. REINFORCE's ``train/approx_kl``), then ``method/step_size`` (``step_size_taken``);
5. ``observe_rl_stats`` with the step's ``train/approx_kl``, the loop's ``episodic_return``
   and ``update`` (the step-size family's ``rl_stats``).

``minibatch_step`` is steps 1-4 alone, for a loop that gives no ``rl_stats`` (DQN's TD loss
has no policy ratio to measure a KL on).

``policy_step_seeds`` is the same on a seed axis (parameters stacked on a leading axis of S
seeds): ``loss(active)`` gives the S losses (S,) and one metrics dict per seed; their sum is
backpropagated (a seed's loss reaches only its own parameters); g and the clipping are each
seed's own, over its own slices (``clip_per_seed``); statistics and step sizes per seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch

from workbench.families.step_size import observe_rl_stats, step_size_taken, step_sizes_taken

#: A minibatch's loss: () -> (L, its metrics), evaluated at the current parameters.
Loss = Callable[[], tuple[torch.Tensor, dict[str, float]]]
#: The same on a seed axis: (the line search's ``active`` mask or None) -> (L (S,), per seed).
SeedLoss = Callable[[torch.Tensor | None], tuple[torch.Tensor, list[dict[str, float]]]]


def clip_gradients(params: Iterable[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """g = the 2-norm of the gradients of ``params`` (those that have one) as one vector; with
    ``max_norm`` c the gradients scaled by min(1, c / (g + 1e-6)) (``clip_grad_norm_``)."""
    params = [p for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    if max_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return norm


def clip_per_seed(params: Iterable[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """``clip_gradients`` for each seed of parameters stacked on a leading seed axis: each
    seed's g over its own slices (S,), its gradients scaled by min(1, c / (g + 1e-6))."""
    params = list(params)
    norms = torch.stack([torch.linalg.vector_norm(p.grad.flatten(1), dim=1) for p in params],
                        dim=1)
    total = torch.linalg.vector_norm(norms, dim=1)
    if max_norm is not None:
        scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for p in params:
            p.grad.mul_(scale.view(-1, *([1] * (p.dim() - 1))))
    return total


def minibatch_step(optimizer: torch.optim.Optimizer, loss: Loss, *,
                   params: Sequence[torch.Tensor], max_grad_norm: float | None,
                   after_step: Callable[[dict[str, float]], None] | None = None
                   ) -> dict[str, float]:
    """Steps 1-4 of the module docstring: one optimizer step on the minibatch whose loss is
    ``loss``; returns its metrics (the loss's, ``train/grad_norm``, ``after_step``'s and
    ``method/step_size``). ``policy_step`` adds step 5; a loop whose task provides no
    ``rl_stats`` (a value-based learner: no policy ratio, so no KL) calls this alone."""
    stats: dict[str, float] = {}

    def closure(backward: bool = True) -> torch.Tensor:
        with torch.set_grad_enabled(backward):
            value, parts = loss()
        if not backward:
            return value.detach()
        optimizer.zero_grad(set_to_none=False)
        value.backward()
        norm = clip_gradients(params, max_grad_norm)
        if not stats:  # the first evaluation: the minibatch at the step's starting point
            stats.update(parts, **{"train/grad_norm": float(norm)})
        return value.detach()

    optimizer.step(closure)
    if after_step is not None:
        after_step(stats)
    stats["method/step_size"] = step_size_taken(optimizer)
    return stats


def policy_step(optimizer: torch.optim.Optimizer, loss: Loss, *, params: Sequence[torch.Tensor],
                max_grad_norm: float | None, update: int, episodic_return: float,
                after_step: Callable[[dict[str, float]], None] | None = None
                ) -> dict[str, float]:
    """One optimizer step on the minibatch whose loss is ``loss`` (the module docstring);
    returns its metrics: the loss's, ``train/grad_norm``, ``after_step``'s and
    ``method/step_size``."""
    stats = minibatch_step(optimizer, loss, params=params, max_grad_norm=max_grad_norm,
                           after_step=after_step)
    observe_rl_stats(optimizer, approx_kl=stats["train/approx_kl"],
                     episodic_return=episodic_return, update=update)
    return stats


def policy_step_seeds(optimizer: torch.optim.Optimizer, loss: SeedLoss, *,
                      params: Sequence[torch.Tensor], max_grad_norm: float | None, seeds: int,
                      update: int, episodic_returns: Sequence[float],
                      after_step: Callable[[list[dict[str, float]]], None] | None = None
                      ) -> list[dict[str, float]]:
    """``policy_step`` for S = ``seeds`` seeds on a seed axis: each seed's metrics (a seed
    whose ``train/approx_kl`` is missing, e.g. a stopped one, is observed with NaN)."""
    stats: list[dict[str, float]] = []

    def closure(backward: bool = True, active: torch.Tensor | None = None) -> torch.Tensor:
        with torch.set_grad_enabled(backward):
            value, parts = loss(active)
            summed = value.sum()  # one backward pass: seed s's loss reaches only its own
        if not backward:
            return value.detach()
        optimizer.zero_grad(set_to_none=False)
        summed.backward()
        norms = clip_per_seed(params, max_grad_norm)
        if not stats:  # the first evaluation at the step's starting point
            stats.extend({**seed, "train/grad_norm": norm}
                         for seed, norm in zip(parts, norms.tolist(), strict=True))
        return value.detach()

    optimizer.step(closure)
    if after_step is not None:
        after_step(stats)
    for seed, size in zip(stats, step_sizes_taken(optimizer, seeds), strict=True):
        seed["method/step_size"] = size
    observe_rl_stats(optimizer, approx_kl=[seed.get("train/approx_kl", math.nan)
                                           for seed in stats],
                     episodic_return=episodic_returns, update=update)
    return stats
