"""Tree-GRPO: a leaf's outcome normalised among the leaves of its tree and among every leaf of
its prompt (task instance), the two combined.

Rows are leaves of sampled trees (B: every path from a tree's root to a kept leaf, its shared
prefix steps repeated in each row); ``group_ids`` put the leaves of all trees of one instance
in one group, ``tree_ids`` the leaves of one tree. With s_i the row's reward summed over its
valid steps (the outcome) and norm_k(x)_i = (x_i - mean_k(x)) / (std_k(x) + epsilon) over the
rows sharing key k:

    inter-tree:  A^inter_i = norm_group(s)_i          (GRPO over all leaves of the instance)
    intra-tree:  A^intra_i = norm_tree(s)_i           (GRPO over the leaves of the tree)
    combine = sum:         A_i = A^inter_i + A^intra_i
    combine = sequential:  A_i = norm_tree(A^inter)_i  (the inter-tree advantages normalised
                                                       again within each tree)

every valid step of row i gets A_i (0 at padding); returns = advantages (as the reference).
Conventions, each AMAP-ML Tree-GRPO's:

- ``combine = sum`` is its ``adv_estimator=tree``, the one its training scripts use;
  ``sequential`` its ``tree_2norm`` (``compute_tree_grpo_outcome_advantage``).
- Each row (leaf) counts once in both statistics, whatever its length; stds are unbiased
  (torch.std) and ``epsilon`` is added to them.
- A key with one row (a tree of a single branch, an instance with one leaf): mean 0, std 1,
  so that row's normalised value is its own s (sequential: its inter-tree advantage).
- Equal outcomes within a tree give A^intra = 0 (std 0, divided by epsilon).
- The loss sees each leaf's whole path: a step on a prefix shared by k kept leaves is in k rows
  and counted k times, each with its row's advantage (the reference's rows are whole
  responses, averaged per token).

Its sampler (``workbench/testbeds/agent/tree.py``) grows M trees per instance: one rollout per
tree, then L rounds each expanding N nodes per tree drawn uniformly with replacement among the
root and the non-leaf nodes, each continued to the end of its episode, and keeps K leaves per
tree drawn without replacement (defaults M = 2, N = 2, L = 1, K = 3).

Reference: Ji et al., "Tree Search for LLM Agent Reinforcement Learning" (2025),
arXiv:2509.21240; implementation github.com/AMAP-ML/Tree-GRPO
``verl/trainer/ppo/ray_trainer_ts.py`` (``compute_advantage``, estimators ``tree`` and
``tree_2norm``) and ``verl/trainer/ppo/core_algos.py`` (``compute_grpo_outcome_advantage``,
``compute_tree_grpo_outcome_advantage``). Reference-checked: tests/test_tree_advantages.py
compares it with numbers derived by running those functions on the same rows, for both
combinations, a tree of a single branch, a tree with equal outcomes and an instance with one
leaf.
"""

from __future__ import annotations

import torch

from methods.advantage._outcome import broadcast, sequence_scores
from methods.advantage._steps import group_normalise
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


@register
class TreeGRPO(AdvantageMethod):
    name = "tree_grpo"
    hyperparameters = {
        "combine": Choice("sum", ("sum", "sequential"),
                          help="inter- plus intra-tree advantage (the reference's 'tree'), or "
                               "the inter-tree advantage normalised again per tree "
                               "('tree_2norm')"),
        "epsilon": Float(1e-6, minimum=0.0, help="added to each std"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "tree_ids"})
    tree_sampler = "expansion"
    reference = Reference(
        "Ji et al., Tree Search for LLM Agent Reinforcement Learning (Tree-GRPO)", 2025,
        "github.com/AMAP-ML/Tree-GRPO verl/trainer/ppo/ray_trainer_ts.py compute_advantage "
        "(tree, tree_2norm)",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, tree_ids, **_):
        with torch.no_grad():
            scores = sequence_scores(rewards, mask)
            eps = self.hp.epsilon

            def norm(x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
                return group_normalise(x, keys, keys, x, singleton_mean=0.0, divide=True,
                                       epsilon=eps)

            inter = norm(scores, group_ids)
            if self.hp.combine == "sum":
                per_row = inter + norm(scores, tree_ids)
            else:
                per_row = norm(inter, tree_ids)
            advantages = broadcast(per_row, mask)
        return advantages, advantages.clone()
