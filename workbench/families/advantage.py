"""The advantage family: the pure function a method implements, the inputs it may require
(the fields of ``AdvantageBatch``) and the contract check. Its caller side is one call: a loop
fills an ``AdvantageBatch`` and ``compute_advantages(method, batch, names)`` calls
``method.compute(**inputs)`` with the inputs ``names = method.requirements(method.params)``
lists (``RLSlots.advantage_inputs``); a method that reads Monte Carlo state
values (``mc_values``) first names the states through ``value_request``, and the loop fills
them with ``monte_carlo_values`` (here) and its own rollouts.

Contract check: ``compute`` gets the inputs its ``requirements`` name among rewards (8, 12),
values (8, 13), mask (8, 12; float, right-padded rows), group_ids (8,; four groups of two,
shuffled), dones (8, 12), terminated (8, 12; the rows that end early and one other done are
terminal, the remaining done is a truncation), next_values (8, 12; values[:, 1:] except at the
truncation), reward_baselines (8,), anchor_ids (8, 12; three states, so they recur),
old_log_probs (8, 12), ref_log_probs (8, 12), target_log_probs (8, 12), mc_values (8, 13),
tree_ids (8,; the two rows of each of two groups are one tree, the rows of the other groups
each a tree of one leaf), node_ids (8, 12; the rows of one tree share their first two steps'
nodes), rubric (8, 12, 3; sparse -1/0/1 annotations, 0 at padding, one row without any),
rubric_weights (8, 3; one item weighs 0), hidden_states (8, 12, 4; noisy copies of three
states), action_ids (8, 12; three actions), reference_actions (8, 5; a trace of 1 to 5
actions per group) and policy_entropy (8, 12), float64 and seeded. It returns a pair of finite
tensors of the shape of rewards; it is a pure function (same inputs, same outputs; inputs not
modified in place); changing rewards, values, next_values, dones, terminated, old_log_probs,
ref_log_probs, target_log_probs, node_ids, rubric, hidden_states, action_ids and
policy_entropy at padded positions changes nothing at valid ones (values of the state of a
valid step or of the state after one are kept); a method reading mc_values names through
``value_request`` only states valid steps start from, with at least one continuation, and
changing mc_values elsewhere changes nothing; each declared invariant holds
(``zero_mean_per_group``: atol 1e-6; ``row_independent``: the rows computed in two calls, 0-2
and 3-7, equal one call's to 1e-12).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import ClassVar

import torch

from workbench.families._checks import (
    ContractViolation,
    check_unchanged,
    guarded,
    right_padded_mask,
)
from workbench.registry import Method

FAMILY = "advantage"


def _input(meaning: str):
    """A field of ``AdvantageBatch``: None unless the testbed fills it; ``meaning`` its layout."""
    return field(default=None, metadata={"meaning": meaning})


@dataclass(frozen=True)
class AdvantageBatch:
    """The advantage family's inputs for B rows (sequences or environment rollouts) of T steps,
    one named tensor each, its layout and meaning documented once (``REQUIRABLE``). A loop
    fills the fields its testbed gives (the others stay None); ``inputs(names)`` hands a method
    exactly the ones it ``requires``, and ``provided()`` is the set the batch fills."""

    rewards: torch.Tensor | None = _input(
        "(B, T) float: the reward of each step (token)")
    values: torch.Tensor | None = _input(
        "(B, T + 1) float: the value of each step's state; the last column is the value of "
        "the state after step T - 1")
    mask: torch.Tensor | None = _input(
        "(B, T) float or bool: 1 where a token (step) is valid, 0 for padding")
    group_ids: torch.Tensor | None = _input(
        "(B,) long: rows with the same id answer the same prompt")
    dones: torch.Tensor | None = _input(
        "(B, T) bool: True where an episode ends at that step (terminated or truncated)")
    terminated: torch.Tensor | None = _input(
        "(B, T) bool: True where it ends in a terminal state (no bootstrapping; a done that "
        "is not terminated is a truncation)")
    next_values: torch.Tensor | None = _input(
        "(B, T) float: the value of the state actually reached after step t, before any "
        "automatic reset (values[:, t + 1] except at truncations, where it is the value of "
        "the final observation)")
    reward_baselines: torch.Tensor | None = _input(
        "(B,) float: a per-row baseline reward (ReMax: the reward of the greedy answer)")
    anchor_ids: torch.Tensor | None = _input(
        "(B, T) long: a key per step, equal where two steps start from the same observed "
        "state (GiGPO's anchor states); any value at padding")
    old_log_probs: torch.Tensor | None = _input(
        "(B, T) float: the log-probability of each step's action (token) under the policy "
        "that sampled it")
    mc_values: torch.Tensor | None = _input(
        "(B, T + 1) float: Monte Carlo values of the states the method's ``value_request`` "
        "names (column t: the state step t starts from; column T: after the last step), each "
        "the mean return of its ``continuations`` rollouts of the sampling policy from the "
        "restored state; 0 elsewhere")
    tree_ids: torch.Tensor | None = _input(
        "(B,) long: rows with the same id are leaves of one sampled tree (rollouts grown from "
        "one root that share a prefix of steps, Tree-GRPO's tree_uid); a tree lies within one "
        "group; a rollout sampled on its own is a tree of one leaf")
    node_ids: torch.Tensor | None = _input(
        "(B, T) long: the tree node each step creates, equal exactly where rows share that "
        "step (played once on a shared prefix, repeated in each row through it); step t's "
        "parent node is step t - 1's (the tree's root at t = 0); any value at padding")
    rubric: torch.Tensor | None = _input(
        "(B, T, C) float in {-1, 0, 1}: a programmatic judge's annotation of each step for "
        "each of C rubric items: 1 where the step met the item (reached a sub-goal), -1 where "
        "it violated it, 0 where the item does not point at it; any value at padding. A row's "
        "score on item c is the sum over its valid steps")
    rubric_weights: torch.Tensor | None = _input(
        "(B, C) float >= 0: the weight of each rubric item for the row's task (rows of a "
        "group share them); the judge's score of a row is sum_c w_c * (sum_t rubric[:, t, c])")
    ref_log_probs: torch.Tensor | None = _input(
        "(B, T) float: the log-probability of each step's action (token) under the reference "
        "policy, a frozen copy of the policy as training began (the loop keeps one only for a "
        "method that reads it); any value at padding")
    target_log_probs: torch.Tensor | None = _input(
        "(B, T) float: the log-probability of each step's action under the policy being "
        "trained (the learner's), where the steps were sampled by an older one (off-policy "
        "data: old_log_probs is the sampler's); equal to old_log_probs on-policy; any value at "
        "padding")
    hidden_states: torch.Tensor | None = _input(
        "(B, T, D) float: the sampling policy's last hidden layer at each step's observation "
        "(the actor's own representation of the state, BiPACE's clustering space; the loop "
        "computes it only for a method that reads it); any value at padding")
    action_ids: torch.Tensor | None = _input(
        "(B, T) long: the id of the action each step took (equal ids: the same action; the "
        "loop keeps them only for a method that reads them); any value at padding")
    policy_entropy: torch.Tensor | None = _input(
        "(B, T) float >= 0: the entropy (nats) of the sampling policy's action distribution at "
        "each step's state, before its action was drawn (the loop keeps it only for a method "
        "that reads it); any value at padding")
    reference_actions: torch.Tensor | None = _input(
        "(B, K) long: a ground-truth trace of the row's task, the action ids of one shortest "
        "solution from its start (the environment's planner), -1 after the trace's end (K: "
        "the longest trace); rows of one task instance share it")

    def provided(self) -> frozenset[str]:
        """The names of the fields this batch fills (not None)."""
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) is not None)

    def inputs(self, names: Iterable[str]) -> dict[str, torch.Tensor]:
        """``{name: tensor}`` for each of ``names`` (a method's ``requirements``), in field
        order; a name the batch does not fill (or no field has) is an error that names it."""
        names = frozenset(names)
        missing = sorted(n for n in names if n not in REQUIRABLE or getattr(self, n) is None)
        if missing:
            raise ValueError(
                f"the advantage method requires {', '.join(missing)}, which this testbed's "
                f"advantage batch does not fill (it fills {', '.join(sorted(self.provided()))})")
        return {n: getattr(self, n) for n in REQUIRABLE if n in names}

    @classmethod
    def names(cls, *names: str) -> frozenset[str]:
        """``names`` as a set, each checked to be a field (a testbed's declared inputs)."""
        unknown = sorted(set(names) - REQUIRABLE.keys())
        if unknown:
            raise TypeError(f"AdvantageBatch has no field {', '.join(unknown)}")
        return frozenset(names)


#: The inputs an advantage method may ``require`` (a task's ``provides`` names those it
#: gives): the fields of ``AdvantageBatch``, each with its meaning.
REQUIRABLE: Mapping[str, str] = MappingProxyType(
    {f.name: f.metadata["meaning"] for f in fields(AdvantageBatch)})

#: The tree samplers a loop can grow rollouts with (``AdvantageMethod.tree_sampler``).
TREE_SAMPLERS: Mapping[str, str] = {
    "expansion": "Tree-GRPO's: M trees per instance, each one rollout from the start, then rounds "
                 "of N expansions from nodes drawn uniformly, K leaves kept per tree",
    "segments": "SPO-tree's: one tree per instance that branches b_d ways at the end of every "
                "segment of a fixed number of steps (depth d), every leaf kept",
}

#: The properties a method may declare in ``invariants`` for the contract to check.
KNOWN_INVARIANTS: Mapping[str, str] = {
    "zero_mean_per_group": "within each group the advantages average to 0 over its valid "
                           "positions (every valid token counts once)",
    "row_independent": "each row's advantages and returns depend on that row's inputs only: "
                       "computed on a subset of the rows, they are the same (a loop may fold "
                       "the rows of several seeds into one call)",
}


@dataclass(frozen=True)
class ValueRequest:
    """The states a method wants Monte Carlo values of (``mc_values``): ``points`` (B, T + 1)
    bool, True at the column of each such state, each estimated from ``continuations``
    rollouts."""

    points: torch.Tensor
    continuations: int


class AdvantageMethod(Method):
    """A pure function on tensors (the ``REQUIRABLE`` inputs that ``requires`` names)
    returning ``(advantages, returns)``, each of the shape of ``rewards``. No hidden state;
    inputs are never modified in place; results at valid positions must not depend on inputs
    at padded ones. ``invariants`` declares properties the contract checks
    (``KNOWN_INVARIANTS``).
    """

    family = FAMILY
    # a pure function: on a seed axis the loop calls it once per seed, on that seed's rollout
    vectorised: ClassVar[bool] = True
    invariants: ClassVar[frozenset[str]] = frozenset()
    #: the sampler its reference grows rollouts with, which a loop uses under ``sampling:
    #: auto`` (``TREE_SAMPLERS``); None: independent rollouts
    tree_sampler: ClassVar[str | None] = None

    def compute(self, **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def value_request(self, *, mask: torch.Tensor, old_log_probs: torch.Tensor
                      ) -> ValueRequest | None:
        """For a method that requires ``mc_values``: which states' values it reads, from the
        rollouts alone (before any continuation is played). Only states a valid step starts
        from may be named."""
        return None


# caller side ------------------------------------------------------------------------------------


def compute_advantages(method: AdvantageMethod, batch: AdvantageBatch, names: Iterable[str]
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """``method.compute(**batch.inputs(names))``: its (advantages, returns) on the inputs
    ``names`` (the method's ``requirements``) picks from the batch."""
    return method.compute(**batch.inputs(names))


#: estimate(rows, columns, n) -> (K,) mean return of n rollouts from each named state (row
#: ``rows[k]``'s state before step ``columns[k]``), and the environment steps they took
Estimate = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, int]]


def monte_carlo_values(method: AdvantageMethod, *, mask: torch.Tensor,
                       old_log_probs: torch.Tensor, estimate: Estimate
                       ) -> tuple[torch.Tensor, int]:
    """``mc_values`` (B, T + 1) for ``method``: its ``value_request`` estimated by the loop's
    ``estimate`` (0 at the states it did not name), and the environment steps that took."""
    rows, steps = mask.shape
    values = torch.zeros(rows, steps + 1, dtype=torch.float64, device=mask.device)
    request = method.value_request(mask=mask, old_log_probs=old_log_probs)
    if request is None or not bool(request.points.any()):
        return values, 0
    row, column = request.points.nonzero(as_tuple=True)
    found, used = estimate(row, column, int(request.continuations))
    values[row, column] = found.to(values.dtype)
    return values, int(used)


# contract check --------------------------------------------------------------------------------

ROWS, GROUP_SIZE, HORIZON = 8, 2, 12
INVARIANT_ATOL = 1e-6


def _advantage_inputs() -> dict[str, torch.Tensor]:
    """Seeded synthetic inputs; see the module docstring."""
    gen = torch.Generator().manual_seed(2)
    shape = (ROWS, HORIZON)
    mask = right_padded_mask(gen, ROWS, HORIZON)
    lengths = mask.sum(dim=1).long()
    dones = torch.zeros(shape, dtype=torch.bool)
    for row, length in enumerate(lengths.tolist()):
        if length < HORIZON:
            dones[row, length - 1] = True  # rows that end early end in a terminal state
    terminated = dones.clone()
    dones[0, HORIZON // 2] = True  # an episode boundary inside a row: a truncation
    dones[0, HORIZON // 4] = terminated[0, HORIZON // 4] = True  # and a terminal state
    group_ids = torch.arange(ROWS // GROUP_SIZE).repeat_interleave(GROUP_SIZE)
    group_ids = group_ids[torch.randperm(ROWS, generator=gen)]
    # groups 0 and 1 are trees of two leaves, the rows of groups 2 and 3 trees of one leaf
    tree_ids = torch.where(group_ids < 2, group_ids, 10 + torch.arange(ROWS))
    node_ids = 100 * tree_ids[:, None] + torch.arange(HORIZON)  # shared prefixes ...
    node_ids[:, 2:] += 10_000 * (1 + torch.arange(ROWS))[:, None]  # ... of two steps
    values = torch.randn((ROWS, HORIZON + 1), generator=gen, dtype=torch.float64)
    next_values = values[:, 1:].clone()
    next_values[0, HORIZON // 2] = 3.0  # the value of the final observation at the truncation
    return {
        "rewards": torch.randn(shape, generator=gen, dtype=torch.float64),
        "values": values,
        "mask": mask,
        "group_ids": group_ids,
        "dones": dones,
        "terminated": terminated,
        "next_values": next_values,
        "reward_baselines": torch.randn(ROWS, generator=gen, dtype=torch.float64),
        "anchor_ids": torch.randint(0, 3, shape, generator=gen),  # states recur
        "old_log_probs": torch.log(torch.rand(shape, generator=gen, dtype=torch.float64)
                                   .clamp(min=0.05)),
        "mc_values": torch.rand((ROWS, HORIZON + 1), generator=gen, dtype=torch.float64),
        "tree_ids": tree_ids,
        "node_ids": node_ids,
        **_judged_inputs(mask),
        **_reference_inputs(mask),
        **_actor_inputs(mask, group_ids),
    }


def _actor_inputs(mask: torch.Tensor, group_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """hidden_states (8, 12, 4: three prototype states, 0.2 of noise, so steps near one another
    recur), action_ids (8, 12; three actions), reference_actions (a trace per group) and
    policy_entropy (8, 12; in [0, 1.4]), from their own stream."""
    gen = torch.Generator().manual_seed(6)
    rows, horizon = mask.shape
    prototypes = torch.randn((3, 4), generator=gen, dtype=torch.float64)
    which = torch.randint(0, 3, (rows, horizon), generator=gen)
    noise = 0.2 * torch.randn((rows, horizon, 4), generator=gen, dtype=torch.float64)
    return {"hidden_states": prototypes[which] + noise,
            "action_ids": torch.randint(0, 3, (rows, horizon), generator=gen),
            "reference_actions": _traces(gen, group_ids),
            "policy_entropy": torch.rand((rows, horizon), generator=gen,
                                         dtype=torch.float64) * 1.4}


def _traces(gen: torch.Generator, group_ids: torch.Tensor) -> torch.Tensor:
    """(8, 5) reference_actions: one trace of 1 to 5 actions (of three) per group, -1 after
    it, each row its group's."""
    groups = int(group_ids.max()) + 1
    traces = torch.randint(0, 3, (groups, 5), generator=gen)
    lengths = torch.randint(1, 6, (groups,), generator=gen)
    traces = torch.where(torch.arange(5) < lengths[:, None], traces, torch.full_like(traces, -1))
    return traces[group_ids]


def _reference_inputs(mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """ref_log_probs and target_log_probs (their own stream, so the other inputs stay as
    they were)."""
    gen = torch.Generator().manual_seed(5)
    return {"ref_log_probs": torch.log(torch.rand(mask.shape, generator=gen,
                                                  dtype=torch.float64).clamp(min=0.05)),
            # the learner's: ratios to old_log_probs on both sides of 1
            "target_log_probs": torch.log(torch.rand(mask.shape, generator=gen,
                                                     dtype=torch.float64).clamp(min=0.05))}


def _judged_inputs(mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """rubric and rubric_weights (their own stream, so the other inputs stay as they were):
    sparse annotations of three items (0 at padding; row 1 has none), weights with one zero
    per row."""
    gen = torch.Generator().manual_seed(4)
    rows, horizon = mask.shape
    marks = torch.randint(-1, 2, (rows, horizon, 3), generator=gen).to(torch.float64)
    keep = torch.rand((rows, horizon, 3), generator=gen) < 0.3
    rubric = torch.where(keep & (mask[:, :, None] != 0), marks, torch.zeros_like(marks))
    rubric[1] = 0.0  # a row without any annotated step
    weights = torch.rand((rows, 3), generator=gen, dtype=torch.float64)
    weights[:, 2] = 0.0
    return {"rubric": rubric, "rubric_weights": weights / weights.sum(dim=1, keepdim=True)}


def _perturb_padding(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inputs with rewards, values and dones changed at padded positions only."""
    gen = torch.Generator().manual_seed(3)
    padded = inputs["mask"] == 0
    out = {k: v.clone() for k, v in inputs.items()}
    noise = 100.0 + 10.0 * torch.randn(padded.shape, generator=gen, dtype=torch.float64)
    if "rewards" in out:
        out["rewards"] = torch.where(padded, noise, out["rewards"])
    if "values" in out:
        # the value of state t is used by step t and by step t - 1: keep it if either is valid
        valid = torch.zeros(out["values"].shape, dtype=torch.bool)
        valid[:, :-1] |= ~padded
        valid[:, 1:] |= ~padded
        value_noise = -50.0 + 10.0 * torch.randn(valid.shape, generator=gen, dtype=torch.float64)
        out["values"] = torch.where(valid, out["values"], value_noise)
    if "next_values" in out:
        out["next_values"] = torch.where(padded, noise - 30.0, out["next_values"])
    for name in ("dones", "terminated"):
        if name in out:
            out[name] = torch.where(padded, ~out[name], out[name])
    if "old_log_probs" in out:
        out["old_log_probs"] = torch.where(padded, -noise, out["old_log_probs"])
    if "ref_log_probs" in out:
        out["ref_log_probs"] = torch.where(padded, noise, out["ref_log_probs"])
    if "target_log_probs" in out:
        out["target_log_probs"] = torch.where(padded, noise, out["target_log_probs"])
    if "mc_values" in out:  # a state after the last valid step may be named: keep it
        kept = torch.zeros(out["mc_values"].shape, dtype=torch.bool)
        kept[:, :-1] |= ~padded
        kept[:, 1:] |= ~padded
        out["mc_values"] = torch.where(kept, out["mc_values"], -noise.new_full(kept.shape, 9.0))
    if "rubric" in out:  # padded steps annotated as meeting every item
        out["rubric"] = torch.where(padded[:, :, None], torch.ones_like(out["rubric"]),
                                    out["rubric"])
    if "anchor_ids" in out:  # padded steps named as the valid steps' states
        out["anchor_ids"] = torch.where(padded, torch.zeros_like(out["anchor_ids"]),
                                        out["anchor_ids"])
    if "hidden_states" in out:  # padded steps placed among the valid ones' states
        out["hidden_states"] = torch.where(padded[:, :, None],
                                           out["hidden_states"].roll(1, dims=0),
                                           out["hidden_states"])
    if "policy_entropy" in out:
        out["policy_entropy"] = torch.where(padded, noise, out["policy_entropy"])
    if "action_ids" in out:
        out["action_ids"] = torch.where(padded, torch.zeros_like(out["action_ids"]),
                                        out["action_ids"])
    if "node_ids" in out:  # padded steps named as another row's shared node
        out["node_ids"] = torch.where(padded, torch.full_like(out["node_ids"], 100),
                                      out["node_ids"])
    return out


def _compute(method, inputs: dict[str, torch.Tensor], what: str, problems: list[str]):
    """Run ``compute`` on clones and check the result's form; a changed clone adds a problem."""
    given = {k: v.clone() for k, v in inputs.items()}
    out = guarded(what, lambda: method.compute(**given))
    if (not isinstance(out, tuple | list) or len(out) != 2
            or not all(isinstance(t, torch.Tensor) for t in out)):
        raise ContractViolation(
            f"compute() returned {type(out).__name__}; it must return a pair (advantages, "
            "returns) of tensors")
    shape = tuple(inputs["rewards"].shape) if "rewards" in inputs else (ROWS, HORIZON)
    for name, tensor in zip(("advantages", "returns"), out, strict=True):
        if tuple(tensor.shape) != shape:
            raise ContractViolation(
                f"compute() returned {name} of shape {tuple(tensor.shape)}; it must have the "
                f"shape of rewards {shape}")
        if not bool(torch.isfinite(tensor).all()):
            raise ContractViolation(f"compute() returned non-finite {name} (NaN or inf)")
    try:
        check_unchanged("compute()", inputs, given)
    except ContractViolation as violation:
        if violation.args[0] not in problems:
            problems.append(violation.args[0])
    return tuple(t.detach().to(torch.float64) for t in out)


def check_configuration(cls, overrides, method) -> None:
    """The advantage contract on one configuration (see the module docstring)."""
    full = _advantage_inputs()
    names = method.requirements(method.params)
    inputs = AdvantageBatch(**full).inputs(names)  # an input without a synthetic value: named
    problems: list[str] = []
    out = _compute(method, inputs, "in compute()", problems)
    again = _compute(method, inputs, "in a second compute() on the same inputs", problems)
    for name, a, b in zip(("advantages", "returns"), out, again, strict=True):
        if not torch.equal(a, b):
            problems.append(f"compute() is not a pure function: two calls with the same inputs "
                            f"gave different {name}")
    valid = inputs["mask"] != 0 if "mask" in inputs else torch.ones(ROWS, HORIZON, dtype=bool)
    if "mask" in inputs:
        moved = _compute(method, _perturb_padding(inputs),
                         "in compute() on inputs changed at padded positions", problems)
        for name, a, b in zip(("advantages", "returns"), out, moved, strict=True):
            change = (a - b).abs().where(valid, torch.zeros((), dtype=a.dtype))
            if not bool(torch.allclose(a[valid], b[valid], rtol=1e-6, atol=1e-6)):
                row, step = divmod(int(change.argmax()), HORIZON)
                problems.append(
                    f"changing rewards/values/dones at padded positions (mask == 0) changed its "
                    f"{name} at valid positions (by {float(change.max()):.3g} at row {row}, "
                    f"step {step}); padding must not leak into valid results")
    if "mc_values" in inputs:
        problems += _value_request_problems(method, inputs, out, valid)
    if cls.tree_sampler is not None and cls.tree_sampler not in TREE_SAMPLERS:
        problems.append(f"tree_sampler {cls.tree_sampler!r} is not a tree sampler; allowed: "
                        f"{', '.join(TREE_SAMPLERS)} or None")
    problems += _invariant_problems(cls, out[0], full["group_ids"], valid)
    if "row_independent" in cls.invariants:
        problems += _row_problems(method, inputs, out)
    if problems:
        raise ContractViolation(*problems)


def _value_request_problems(method, inputs, out, valid) -> list[str]:
    """A method reading ``mc_values`` names, through ``value_request``, states valid steps
    start from, and reads no other column of ``mc_values``."""
    mask = inputs.get("mask", valid.double())
    log_probs = inputs.get("old_log_probs", torch.zeros(mask.shape, dtype=torch.float64))
    request = guarded("in value_request()",
                      lambda: method.value_request(mask=mask.clone(),
                                                   old_log_probs=log_probs.clone()))
    if not isinstance(request, ValueRequest):
        return [f"requires mc_values but value_request() returned {type(request).__name__}; it "
                "must return a ValueRequest naming the states it reads"]
    points = request.points
    if (not isinstance(points, torch.Tensor) or points.dtype != torch.bool
            or tuple(points.shape) != (ROWS, HORIZON + 1)):
        return [f"value_request() points must be a bool tensor of shape {(ROWS, HORIZON + 1)}"]
    problems = []
    if not isinstance(request.continuations, int) or request.continuations < 1:
        problems.append(f"value_request() asks for {request.continuations!r} continuations; it "
                        "must be an int >= 1")
    if bool((points[:, :-1] & ~valid).any()) or bool(points[:, -1].any()):
        problems.append("value_request() names a state no valid step starts from")
    moved = dict(inputs, mc_values=torch.where(points, inputs["mc_values"],
                                               inputs["mc_values"] + 7.0))
    again = _compute(method, moved, "in compute() with mc_values changed where not requested",
                     problems)
    if not all(torch.allclose(a, b, rtol=1e-9, atol=1e-9) for a, b in zip(out, again,
                                                                           strict=True)):
        problems.append("compute() reads mc_values at states its value_request() did not name "
                        "(the loop estimates only the named ones)")
    return problems


def _row_problems(method, inputs, out) -> list[str]:
    """``row_independent``: the first three rows and the other five, each computed alone,
    give the rows of the whole call (relative and absolute 1e-12)."""
    problems: list[str] = []
    parts = [_compute(method, {k: v[rows] for k, v in inputs.items()},
                      "in compute() on a subset of the rows", problems)
             for rows in (slice(0, 3), slice(3, ROWS))]
    for i, name in enumerate(("advantages", "returns")):
        joined = torch.cat([part[i] for part in parts])
        if not torch.allclose(joined, out[i], rtol=1e-12, atol=1e-12):
            problems.append(f"declares invariant 'row_independent' but its {name} on rows 0-2 "
                            f"and 3-{ROWS - 1} computed apart differ from one call on all rows")
    return problems


def _invariant_problems(cls, advantages, group_ids, valid) -> Iterator[str]:
    declared = frozenset(getattr(cls, "invariants", frozenset()))
    for name in sorted(declared - KNOWN_INVARIANTS.keys()):
        yield (f"declares invariant {name!r}, which the contract does not know (known: "
               f"{', '.join(sorted(KNOWN_INVARIANTS))})")
    if "zero_mean_per_group" in declared:
        for group in group_ids.unique().tolist():
            rows = group_ids == group
            mean = float(advantages[rows][valid[rows]].mean())
            if not abs(mean) <= INVARIANT_ATOL:
                yield (f"declares invariant 'zero_mean_per_group' but its advantages average "
                       f"{mean:.3g} over the valid positions of group {group} (atol "
                       f"{INVARIANT_ATOL:g})")
                return
