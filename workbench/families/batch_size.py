"""The batch-size family: the method's interface, the loops' side of it (``BatchSlot``), the
inputs a method may require and the contract check.

Contract check: ``start({"batch_size": 16, "n_samples": 256})`` and 20 ``next_batch_size``
calls on synthetic statistics (the per-sample ones included; each step's ``batch_size`` is the
previous answer, as the loop clamps it). Every answer is a positive int within
[min_size, max_size or n_samples] when the method declares those hyperparameters (else
[1, n_samples]); ``minibatches(answer, 4)`` is a positive int; ``diagnostics()`` is a dict of
floats; two fresh instances fed the same statistics give the same answers and diagnostics.
``first_group_size(8)`` is an int in [1, 8]; ``group_sizes`` on synthetic first rewards (4
prompts, a budget of 4 x 8) is None or one int per prompt, each at least the prompt's first
count, summing to at most the budget, and the same for a fresh instance. After ``start`` and
after each answer, ``sequence_length(step, 16)`` is an int in [1, 16].

Sequence length (optional, RLVR only): before each step's rollout the loop asks
``sequence_length(step, configured)`` for the step's response cap (``max_new_tokens``, the
task's ``configured`` value its ceiling); the default keeps the configured cap. A batch-and-
sequence ramp (``seq_ramp``) grows both.

Per-prompt group sizes (optional, RLVR only; a method using them ``requires``
``group_rewards``): the loop first samples ``first_group_size(G)`` completions per prompt, then
``group_sizes(first_rewards, budget)`` (``first_rewards[p]``: prompt p's first rewards;
``budget`` = P x G) returns each prompt's total group size and the loop samples the rest. The
defaults (G, then None) keep the fixed group size G.

Seed axis (``vectorised = True``): the method is a schedule whose sizes the seeds of a trial
share; its answers read only ``step`` and the counts all seeds share (``batch_size``,
``samples``, ``n_samples``), never a seed's own statistics. Contract check: fed the same
counts with other losses and gradient statistics, it gives the same answers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from workbench.families._checks import ContractViolation, guarded
from workbench.registry import Method

FAMILY = "batch_size"

#: The inputs a batch-size method may ``require`` (a task's ``provides`` names those it gives),
#: each with its meaning.
REQUIRABLE: Mapping[str, str] = {
    "group_rewards": "the RLVR loop asks first_group_size and group_sizes for per-prompt group "
                     "sizes from the rewards of each prompt's first completions",
    "per_sample_grads": "next_batch_size's statistics also hold grad_sq_big/big_batch_size and "
                        "grad_sq_small/small_batch_size (squared gradient norms of the batch "
                        "mean and, averaged, of single samples) and grad_var (trace of the "
                        "per-sample gradient covariance, unbiased), as the optimisation "
                        "testbed's loop computes them",
}


class BatchSizeMethod(Method):
    """Chooses the batch size of every step.

    ``start(info)`` resets all state (an instance may serve several runs) and returns the
    first batch size; ``info`` holds the task's ``batch_size`` (its base size; None means the
    full batch) and ``n_samples``. After each step, ``next_batch_size(step, stats)`` returns the
    next one from the step's statistics: ``loss``, ``grad_sq`` (squared norm of the batch
    gradient), ``batch_size``, ``samples`` (seen so far), ``n_samples``, and the per-sample
    ones where the method ``requires`` ``per_sample_grads`` (``REQUIRABLE``). The loop clamps
    the answer to [1, n_samples]. ``diagnostics()`` returns extra metrics to log at every step
    (e.g. ``batch/noise_scale``).
    """

    family = FAMILY

    def start(self, info: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def next_batch_size(self, step: int, stats: Mapping[str, float]) -> int:
        raise NotImplementedError

    def diagnostics(self) -> dict[str, float]:
        return {}

    def minibatches(self, batch_size: int, configured: int) -> int:
        """Minibatches per epoch of a multi-epoch update on ``batch_size`` samples, given the
        loop's ``configured`` count (the default keeps it)."""
        return configured

    def first_group_size(self, group_size: int) -> int:
        """Completions each prompt gets first, of the task's ``group_size`` (the default keeps
        it)."""
        return group_size

    def sequence_length(self, step: int, configured: int) -> int:
        """The response cap (tokens) of step ``step``'s rollouts, of the task's ``configured``
        cap, read after ``start`` and after each ``next_batch_size`` (the default keeps it)."""
        return configured

    def group_sizes(self, first_rewards: list[list[float]], budget: int) -> list[int] | None:
        """Each prompt's total group size from the rewards of its first completions, the step's
        total within ``budget``; None (the default) keeps the first draw."""
        return None


# caller side -----------------------------------------------------------------------------------

#: The statistics every seed of a seed axis shares (the rest are each seed's own).
SHARED_STATISTICS = frozenset({"batch_size", "samples", "n_samples"})

#: ``n_samples`` where the data never runs out (an RL loop draws fresh rollouts) and the
#: budget sets no sample limit.
UNLIMITED_SAMPLES = 2**40


class BatchSlot:
    """The loops' side of the batch-size contract: the method's first answer and one answer
    after every step, each clamped to [1, n_samples]; without a method (a task whose spec
    leaves the slot empty) every answer is None and the loop keeps its own size."""

    def __init__(self, method: BatchSizeMethod | None, n_samples: int | None):
        self.method = method
        self.n_samples = int(n_samples or UNLIMITED_SAMPLES)

    def _clamp(self, size) -> int:
        return max(1, min(int(size), self.n_samples))

    def start(self, batch_size: int | None, **info: Any) -> int | None:
        if self.method is None:
            return None
        return self._clamp(self.method.start({**info, "batch_size": batch_size,
                                              "n_samples": self.n_samples}))

    def after_step(self, step: int, *, loss: float, grad_sq: float, batch_size: int,
                   samples: int, extra: Mapping[str, float] | None = None) -> int | None:
        """The next batch size from the step's statistics (see ``BatchSizeMethod``);
        ``extra``: the per-sample statistics of a method that requires them."""
        if self.method is None:
            return None
        return self._clamp(self.method.next_batch_size(step, {
            **(extra or {}), "loss": loss, "grad_sq": grad_sq, "batch_size": batch_size,
            "samples": samples, "n_samples": self.n_samples}))

    def diagnostics(self) -> dict[str, float]:
        return {} if self.method is None else self.method.diagnostics()

    def minibatches(self, batch_size: int, configured: int) -> int:
        """Minibatches per epoch of a multi-epoch update (PPO) on ``batch_size`` samples: the
        method's answer (at least 1), or the loop's ``configured`` count without a method."""
        if self.method is None:
            return configured
        return max(1, int(self.method.minibatches(batch_size, configured)))

    def sequence_length(self, step: int, configured: int) -> int:
        """The response cap of step ``step``'s rollouts: the method's answer within
        [1, configured], or ``configured`` without a method."""
        if self.method is None:
            return configured
        return max(1, min(int(self.method.sequence_length(step, configured)), configured))

    def first_group_size(self, group_size: int) -> int:
        """Completions each prompt gets first: the method's answer within [1, group_size]."""
        if self.method is None:
            return group_size
        return max(1, min(int(self.method.first_group_size(group_size)), group_size))

    def group_sizes(self, first_rewards: list[list[float]], budget: int) -> list[int] | None:
        """Each prompt's total group size (at least its first count), or None to keep the
        first draw; a total above ``budget`` is refused."""
        if self.method is None:
            return None
        sizes = self.method.group_sizes([list(r) for r in first_rewards], budget)
        if sizes is None:
            return None
        sizes = [max(int(n), len(r)) for n, r in zip(sizes, first_rewards, strict=True)]
        if sum(sizes) > max(budget, sum(len(r) for r in first_rewards)):
            raise ValueError(f"{self.method.key()} asked for {sum(sizes)} completions, above "
                             f"the step's budget of {budget}")
        return sizes


# contract check --------------------------------------------------------------------------------

STEPS = 20
INFO = {"batch_size": 16, "n_samples": 256}


def _statistics(step: int, batch_size: int, samples: int) -> dict[str, float]:
    """One step's statistics: |grad|^2 = 1/step shrinking, per-sample variance trace 4."""
    grad_sq, variance = 1.0 / step, 4.0
    return {
        "loss": 2.0 / (1.0 + 0.1 * step), "grad_sq": grad_sq + variance / batch_size,
        "batch_size": batch_size, "samples": samples, "n_samples": INFO["n_samples"],
        "grad_sq_big": grad_sq + variance / batch_size, "big_batch_size": batch_size,
        "grad_sq_small": grad_sq + variance, "small_batch_size": 1, "grad_var": variance,
    }


def _size_range(method) -> tuple[int, int, str]:
    n_samples = INFO["n_samples"]
    if "min_size" in method.params and "max_size" in method.params:
        highest = min(method.params["max_size"] or n_samples, n_samples)
        lowest = min(method.params["min_size"], highest)
        return lowest, highest, f"its min_size/max_size with n_samples={n_samples}"
    return 1, n_samples, f"n_samples={n_samples}"


def _run(cls, overrides, feed: list[dict] | None = None):
    """Answers and diagnostics of a fresh instance; statistics follow its answers unless
    ``feed`` gives them. Returns (answers, diagnostics, statistics fed)."""
    method = cls(**overrides)
    lowest, highest, bounds = _size_range(method)
    answers = [guarded("in start()", lambda: method.start(dict(INFO)))]
    shown = [guarded("in diagnostics() after start()", method.diagnostics)]
    fed, samples = [], 0
    for step in range(1, STEPS + 1):
        _check_answer(answers[-1], step - 1, lowest, highest, bounds)
        _check_minibatches(method, answers[-1], step - 1)
        _check_diagnostics(shown[-1], step - 1)
        if feed is None:
            used = min(max(answers[-1], 1), INFO["n_samples"])
            samples += used
            stats = _statistics(step, used, samples)
        else:
            stats = feed[step - 1]
        fed.append(stats)
        answers.append(guarded(f"at step {step}",
                               lambda: method.next_batch_size(step, dict(stats))))  # noqa: B023
        shown.append(guarded(f"in diagnostics() at step {step}", method.diagnostics))
    _check_answer(answers[-1], STEPS, lowest, highest, bounds)
    _check_minibatches(method, answers[-1], STEPS)
    _check_diagnostics(shown[-1], STEPS)
    return answers, shown, fed


#: Synthetic first rewards for ``group_sizes``: four prompts, two first completions each.
FIRST_REWARDS = [[0.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 1.0]]
GROUP_SIZE = 8


def _group_sizes(cls, overrides):
    method = cls(**overrides)
    guarded("in start()", lambda: method.start(dict(INFO)))
    first = guarded("in first_group_size()", lambda: method.first_group_size(GROUP_SIZE))
    if (not isinstance(first, int) or isinstance(first, bool)
            or not 1 <= first <= GROUP_SIZE):
        raise ContractViolation(f"first_group_size({GROUP_SIZE}) returned {first!r}; it must "
                                f"be an integer within [1, {GROUP_SIZE}]")
    budget = GROUP_SIZE * len(FIRST_REWARDS)
    rewards = [r[:first] for r in FIRST_REWARDS]
    sizes = guarded("in group_sizes()",
                    lambda: method.group_sizes([list(r) for r in rewards], budget))
    if sizes is None:
        return None
    if (not isinstance(sizes, list) or len(sizes) != len(rewards)
            or any(not isinstance(n, int) or isinstance(n, bool) or n < len(r)
                   for n, r in zip(sizes, rewards, strict=False))
            or sum(sizes) > budget):
        raise ContractViolation(
            f"group_sizes({rewards}, {budget}) returned {sizes!r}; it must be None or one "
            "integer per prompt, each at least the prompt's first count, summing to at most "
            "the budget")
    return sizes


def _check_minibatches(method, size: int, step: int) -> None:
    at = "from start()" if step == 0 else f"at step {step}"
    count = guarded(f"in minibatches() {at}", lambda: method.minibatches(size, 4))
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ContractViolation(
            f"minibatches({size}, 4) {at} returned {count!r}; it must be a positive integer")
    cap = guarded(f"in sequence_length() {at}", lambda: method.sequence_length(step, 16))
    if not isinstance(cap, int) or isinstance(cap, bool) or not 1 <= cap <= 16:
        raise ContractViolation(
            f"sequence_length({step}, 16) {at} returned {cap!r}; it must be an integer within "
            "[1, 16]")


def _check_answer(size, step: int, lowest: int, highest: int, bounds: str) -> None:
    if (not isinstance(size, int) or isinstance(size, bool)
            or not lowest <= size <= highest):
        at = "from start()" if step == 0 else f"at step {step}"
        raise ContractViolation(
            f"returned {size!r} {at}; a batch size must be a positive integer within "
            f"[{lowest}, {highest}] ({bounds})")


def _check_diagnostics(metrics, step: int) -> None:
    at = "after start()" if step == 0 else f"at step {step}"
    if not isinstance(metrics, dict):
        raise ContractViolation(
            f"diagnostics() {at} returned {type(metrics).__name__}; it must return a dict of "
            "floats")
    for name, value in metrics.items():
        if not isinstance(name, str) or not isinstance(value, float):
            raise ContractViolation(
                f"diagnostics() {at} returned {value!r} for {name!r}; it must return a dict "
                "of floats")


def _same_metrics(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])) for k in a)


def check_configuration(cls, overrides, method) -> None:
    """The batch-size contract on one configuration (see the module docstring)."""
    answers, shown, fed = _run(cls, overrides)
    again, shown_again, _ = _run(cls, overrides, feed=fed)
    for step, (a, b) in enumerate(zip(answers, again, strict=True)):
        if a != b:
            raise ContractViolation(
                f"is not deterministic: two fresh instances fed the same statistics answered "
                f"{a} and {b} at step {step}")
    for step, (a, b) in enumerate(zip(shown, shown_again, strict=True)):
        if not _same_metrics(a, b):
            raise ContractViolation(
                f"is not deterministic: two fresh instances fed the same statistics gave "
                f"diagnostics {a} and {b} at step {step}")
    sizes, sizes_again = _group_sizes(cls, overrides), _group_sizes(cls, overrides)
    if sizes != sizes_again:
        raise ContractViolation(
            f"is not deterministic: two fresh instances answered group_sizes {sizes} and "
            f"{sizes_again} for the same first rewards")
    if cls.vectorised:
        _check_shared_schedule(cls, overrides, answers, fed)


def _check_shared_schedule(cls, overrides, answers, fed) -> None:
    """A vectorised method's answers must not move when a seed's own statistics do."""
    other = [{k: (v if k in SHARED_STATISTICS else 3.0 * v + 1.0) for k, v in stats.items()}
             for stats in fed]
    again, _, _ = _run(cls, overrides, feed=other)
    for step, (a, b) in enumerate(zip(answers, again, strict=True)):
        if a != b:
            raise ContractViolation(
                f"declares vectorised = True but answered {a} and {b} at step {step} for the "
                "same shared counts with other losses and gradient statistics; a schedule the "
                "seeds share may read only step, batch_size, samples and n_samples")
