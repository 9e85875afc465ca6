"""HGPO: hierarchy-of-groups policy optimisation, step advantages over groups of consistent
history.

Rows are episodes of up to T steps; ``group_ids`` put an instance's G episodes in one group;
``anchor_ids`` name each step's observed state. A step t of episode i belongs, for each depth
k = 1 .. min(history + 1, t + 1), to the group of the steps of the same instance group whose
last k observed states equal its own (k = 1: the same current state, GiGPO's step group). With
R the discounted return from each step (as GiGPO's), in every such group of two or more steps:

    a_k = (R - mean_k(R)) / (std_k(R) + epsilon)     (mean_std_norm; std without Bessel's
                                                      correction, as the reference)
    a_k = R - mean_k(R)                              (mean_norm)

and the step's advantage is the weighted mean of its nonzero a_k with weights proportional to
(k + 1)^alpha, which favours the deeper, more consistent histories:

    A = sum_k w_k a_k,   w_k = (k + 1)^alpha / (sum_j (j + 1)^alpha + epsilon)

``base_group`` adds GiGPO's episode advantage (statistics over the group's steps; divided by
the std unless mean_norm) as one more item with k = 0. A step in no group of two gets 0.
Returns = advantages, as the reference.

Reference: He, Feng, Wei, Cheng, Feng & An, "Hierarchy-of-Groups Policy Optimization for
Long-Horizon Agentic Tasks" (2026), arXiv:2602.22817; implementation verl-agent
``recipe/hgpo`` (``hgpo_advantage_estimate``; read in the copy at github.com/CazeroZ/hgpo
``gigpo/core_gigpo.py``). Reference-checked: tests/test_step_advantages.py compares it with
numbers derived from that code on the same episodes in its one-row-per-step layout, for both
modes, with and without the base group, and histories of depth 1 and 2.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from methods.advantage._outcome import masked
from methods.advantage._steps import discounted_returns, episode_advantages
from workbench.families import AdvantageMethod
from workbench.hyperparams import Bool, Choice, Float, Int
from workbench.registry import Reference, register


@register
class HGPO(AdvantageMethod):
    name = "hgpo"
    hyperparameters = {
        "gamma": Float(0.95, minimum=0.0, maximum=1.0, help="discount of the step returns"),
        "history": Int(2, minimum=0, maximum=64,
                       help="deepest history compared, in steps before the current one"),
        "mode": Choice("mean_std_norm", ("mean_std_norm", "mean_norm"),
                       help="divide by the group's std, or only subtract its mean"),
        "alpha": Float(1.0, low=0.0, high=2.0, minimum=0.0,
                       help="weight exponent: (k + 1)^alpha for a depth-k group"),
        "base_group": Bool(False, help="add GiGPO's episode advantage as a depth-0 item"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to stds and to the weights' sum"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "anchor_ids"})
    reference = Reference(
        "He et al., Hierarchy-of-Groups Policy Optimization for Long-Horizon Agentic Tasks "
        "(HGPO)", 2026, "github.com/langfengQ/verl-agent recipe/hgpo hgpo_advantage_estimate",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, anchor_ids, **_):
        with torch.no_grad():
            ok = (mask != 0).to(rewards.device)
            r = masked(rewards, mask)
            returns = discounted_returns(r, ok, self.hp.gamma)
            divide, eps = self.hp.mode == "mean_std_norm", self.hp.epsilon
            base = (episode_advantages(r.sum(dim=1), ok, group_ids, across_steps=True,
                                       divide=divide, epsilon=eps)
                    if self.hp.base_group else None)
            items = self._items(returns, ok, group_ids, anchor_ids, divide, eps)
            advantages = torch.zeros_like(returns)
            for (row, step), found in items.items():
                if base is not None:
                    found = [(0, float(base[row]))] + found
                found = [(k, a) for k, a in found if a != 0]
                if found:
                    weights = [(k + 1.0) ** self.hp.alpha for k, _ in found]
                    total = sum(weights) + eps
                    advantages[row, step] = sum(w * a for w, (_, a) in
                                                zip(weights, found, strict=True)) / total
        return advantages, advantages.clone()

    def _items(self, returns, ok, group_ids, anchor_ids, divide: bool, eps: float) -> dict:
        """(row, step) -> [(k, a_k), ...] over the groups of two or more steps it belongs to;
        every valid step has an entry."""
        rows, steps = torch.nonzero(ok, as_tuple=True)
        anchors, groups = anchor_ids.tolist(), group_ids.tolist()
        members: dict = defaultdict(list)
        valid: dict[int, list[int]] = defaultdict(list)
        for row, step in zip(rows.tolist(), steps.tolist(), strict=True):
            valid[row].append(step)
        for row, played in valid.items():
            for position, step in enumerate(played):
                for k in range(1, min(self.hp.history + 1, position + 1) + 1):
                    history = tuple(anchors[row][s] for s in played[position - k + 1:
                                                                    position + 1])
                    members[groups[row], k, history].append((row, step))
        items: dict = {(row, step): [] for row, played in valid.items() for step in played}
        for (_, k, _), where in members.items():
            if len(where) < 2:
                continue
            values = torch.stack([returns[row, step] for row, step in where])
            centred = values - values.mean()
            if divide:
                centred = centred / (values.std(unbiased=False) + eps)
            for (row, step), a in zip(where, centred.tolist(), strict=True):
                items[row, step].append((k, a))
        return items
