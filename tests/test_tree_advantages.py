"""Tree-GRPO's advantage against numbers derived from its reference code.

The expected advantages come from running AMAP-ML Tree-GRPO's own functions
(``compute_grpo_outcome_advantage`` twice, with ``index`` = the prompt uid and = the tree uid,
summed: its ``adv_estimator=tree``; ``compute_tree_grpo_outcome_advantage``: ``tree_2norm``),
taken unchanged from ``verl/trainer/ppo/core_algos.py`` and run in a scratch directory on
these rows (float64, the outcome at each row's last valid step), rounded to 6 decimals. The
rows: instance 0 has two trees of three leaves; instance 1 a tree of a single branch and a tree
of two leaves with equal outcomes; instance 2 one tree of one leaf, alone in its instance.
"""

from __future__ import annotations

import pytest
import torch

from workbench import registry

# (group, tree, outcome, length) per row
ROWS = [(0, 0, 1.0, 4), (0, 0, 0.0, 6), (0, 0, 1.0, 5), (0, 1, 0.0, 6), (0, 1, 0.0, 6),
        (0, 1, 1.0, 3), (1, 2, 0.5, 2), (1, 3, 1.0, 4), (1, 3, 1.0, 5), (2, 4, 2.0, 3)]
HORIZON = 6

FROM_TREE_GRPO = {
    "sum": [1.490219, -2.067568, 1.490219, -1.490219, -1.490219, 2.067568, -0.654697,
            0.577348, 0.577348, 3.999996],
    "sequential": [0.57735, -1.154699, 0.57735, -0.57735, -0.57735, 1.154699, -1.154695,
                   0.0, 0.0, 1.999996],
}


def _inputs(junk: float = 0.0):
    mask = torch.zeros(len(ROWS), HORIZON, dtype=torch.float64)
    rewards = torch.full_like(mask, junk)
    for i, (_, _, outcome, length) in enumerate(ROWS):
        mask[i, :length] = 1
        rewards[i, :length] = 0
        rewards[i, length - 1] = outcome
    return {"rewards": rewards, "mask": mask,
            "group_ids": torch.tensor([r[0] for r in ROWS]),
            "tree_ids": torch.tensor([r[1] for r in ROWS])}


def _tree_grpo(**params):
    return registry.get("advantage", "tree_grpo")(**params)


@pytest.mark.parametrize("combine", sorted(FROM_TREE_GRPO))
def test_tree_grpo_matches_its_reference_code(combine):
    inputs = _inputs(junk=7.0)  # junk at padding: left out of the outcomes
    advantages, returns = _tree_grpo(combine=combine).compute(**inputs)
    expected = torch.tensor(FROM_TREE_GRPO[combine], dtype=torch.float64)[:, None] * \
        inputs["mask"]
    assert torch.allclose(advantages, expected, atol=2e-6), advantages - expected
    assert torch.equal(returns, advantages)


def test_tree_grpo_of_one_tree_per_instance_is_grpo_twice():
    """One tree per instance: the inter- and intra-tree groups are the same rows, so the sum
    is twice GRPO's advantage (verl's outcome GRPO, epsilon 1e-6)."""
    inputs = _inputs()
    inputs["tree_ids"] = inputs["group_ids"]
    tree = _tree_grpo().compute(**inputs)[0]
    grpo = registry.get("advantage", "grpo")().compute(
        rewards=inputs["rewards"], mask=inputs["mask"], group_ids=inputs["group_ids"])[0]
    assert torch.allclose(tree, 2 * grpo, atol=1e-12)
