"""SPO-tree: a segment's advantage is its tree node's value minus its parent's, each node's value
the mean of its children's (a leaf's: its episode's score).

Rows are root-to-leaf paths of sampled trees; ``node_ids`` name each step's node (equal where
rows share the step), and the rows of a group (``group_ids``: one task instance) share one root,
the instance's start. Reading the tree off those ids:

- a step's parent is the previous step of its row, or the group's root for a row's first step;
- V(leaf) = s, the score (rewards summed) of the row it ends; V(n) = mean_c V(c) over the
  distinct children c of node n (the root included);
- a **segment** is a maximal chain of steps between branch points: it starts at a step whose
  parent is the root or has two or more children, and every step of it gets

      difference:  A = V(n_end) - V(p)
      std:         A = (V(n_end) - V(p)) / (std_c V(c) + epsilon)   (population std over the
                                                                    children c of p)

  where p is the parent of the segment's first step and n_end its last node (all nodes of a
  chain have the same value, so V(n_end) is the value of any of them);
- a parent with one child gives its segment 0 (V(child) = V(p)); equal children under p give
  0 in both modes (std 0: 0 / epsilon).

Returns = advantages (critic-free). On independent rollouts (every row its own chain from the
group's root) the advantage is s - mean(s) over the group, SPO-tree's one-level case.

Reference: Guo et al., "Segment Policy Optimization" (2025), arXiv:2505.23564, SPO-tree;
implementation AIFrameResearch/SPO ``hybrid_inference_strategy.py`` (``_construct_tree``: a node's
``reward`` is the mean of its children's rewards, ``reward_std`` their ``np.std``) and
``tree_episode_generator.py`` (``extract_edges_from_tree``: each edge's advantage
``child - parent`` for ``adv_method="rloo"``, divided by ``parent_std + 1e-8`` for ``"grpo"``).
Here a segment is a chain of agent steps between branch points (the reference's is a fixed
number of tokens; its sampler branches at the end of every segment, so the two agree on its
trees: ``sampling: segments`` grows them). Its ``only_adv_greater_than_zero`` drops edges whose
advantage is 0 from the batch; here they stay with advantage 0 (they add no gradient). Where the
loss sees a shared step once per row through it (``tree_shared_steps: per_leaf``) the
reference trains each edge once (``once``). Reference-checked: tests/test_spo_tree.py compares
it with numbers from those functions run on the same tree, both modes.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from methods.advantage._outcome import sequence_scores
from workbench.families import AdvantageMethod
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference, register


@register
class SPOTree(AdvantageMethod):
    name = "spo_tree"
    hyperparameters = {
        "mode": Choice("difference", ("difference", "std"),
                       help="V(node) - V(parent) (the reference's adv_method 'rloo'), or that "
                            "divided by the std of the parent's children's values ('grpo')"),
        "epsilon": Float(1e-8, minimum=0.0, help="added to the std (mode: std)"),
    }
    requires = frozenset({"rewards", "mask", "group_ids", "node_ids"})
    tree_sampler = "segments"
    reference = Reference(
        "Guo et al., Segment Policy Optimization (SPO-tree)", 2025,
        "github.com/AIFrameResearch/SPO tree_episode_generator.py extract_edges_from_tree, "
        "hybrid_inference_strategy.py _construct_tree",
    )
    fidelity = "reference-checked"

    def compute(self, *, rewards, mask, group_ids, node_ids, **_):
        with torch.no_grad():
            ok = (mask != 0).cpu()
            scores = sequence_scores(rewards, mask).double().cpu().tolist()
            paths = [[("node", int(n)) for n in row[keep].tolist()]
                     for row, keep in zip(node_ids.cpu(), ok, strict=True)]
            roots = [("root", int(g)) for g in group_ids.cpu().tolist()]
            gains = _segment_gains(paths, roots, scores, self.hp.mode == "std",
                                   self.hp.epsilon)
            advantages = torch.zeros(ok.shape, dtype=torch.float64)
            for row, gain in enumerate(gains):
                advantages[row, :len(gain)] = torch.tensor(gain, dtype=torch.float64)
            advantages = advantages.to(device=rewards.device, dtype=rewards.dtype)
        return advantages, advantages.clone()


def _segment_gains(paths: list[list[tuple]], roots: list[tuple], scores: list[float],
                   divide: bool, epsilon: float) -> list[list[float]]:
    """Each row's advantage at each of its valid steps (module docstring)."""
    children: dict[tuple, list[tuple]] = defaultdict(list)
    parent: dict[tuple, tuple] = {}
    value: dict[tuple, float] = {}
    for path, root, score in zip(paths, roots, scores, strict=True):
        for before, node in zip([root, *path], path, strict=False):
            if node not in parent:
                parent[node] = before
                children[before].append(node)
        if path:
            value[path[-1]] = score
    # children before parents: a node's depth is its position in any row through it
    depth = {node: t for path in paths for t, node in enumerate(path)}
    for node in sorted(children, key=lambda n: depth.get(n, -1), reverse=True):
        value[node] = sum(value[c] for c in children[node]) / len(children[node])
    gains = []
    for path in paths:
        row, gain = [], 0.0
        for node in path:
            above = parent[node]
            siblings = children[above]
            if above[0] == "root" or len(siblings) > 1:  # a segment starts here
                gain = value[node] - value[above]
                if divide:
                    mean = value[above]
                    std = (sum((value[c] - mean) ** 2 for c in siblings) / len(siblings)) ** 0.5
                    gain = gain / (std + epsilon)
            row.append(gain)
        gains.append(row)
    return gains
