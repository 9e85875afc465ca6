"""Tree sampling for the network loop: rollouts of an instance grown as trees that branch from
shared prefixes, the environment restored at the branching step. Two samplers
(``families.TREE_SAMPLERS``): Tree-GRPO's (``play_trees``) and SPO-tree's
(``play_segment_trees``).

For each instance, ``trees`` (M) trees; a tree's root is the instance's start, a node is one
played step (its state: the environment's after that step; the reference's node is one turn,
a response and its observation), a leaf the step that ends an episode. Following AMAP-ML
Tree-GRPO's ``generation_ts.py`` (``run_llm_loop_tree_search``, ``TreeNode.get_expand_node``,
``TreeNode.sample_leaf``):

1. each tree plays one rollout from its root to the end of its episode;
2. ``rounds`` (L) times: each tree draws ``expansions`` (N) nodes uniformly with replacement
   among its root and its nodes that are not leaves, and plays on from each (``set_state``
   to the node's state) to the end of an episode: a new branch and leaf per draw, so a tree
   ends with 1 + L * N leaves;
3. each tree keeps ``leaves`` (K) of its leaves drawn without replacement; each kept leaf's
   path from the root is one row of the (B = instances * M * K, T) batch, its shared prefix
   steps repeated in each row through them (as the reference's rows are whole responses).

The draws come from the ``branches`` stream, the actions from the loop's ``actions`` stream.
``tree_ids`` name each row's tree, ``node_ids`` each step's node (the same id where rows share
the step; -1 at padding). The steps played (every node, pruned branches included, a shared
prefix once) are what the sampler returns as its cost.

SPO-tree's sampler (``play_segment_trees``; AIFrameResearch/SPO ``hybrid_inference_strategy.py``
``_construct_tree`` with a ``list`` branch-factor strategy): one tree per instance; at depth d
every open node (the root first) branches ``branching[d]`` ways, each branch playing
``segment`` steps (the last depth: to the end of its episode); a branch whose episode ends is a
leaf. Every leaf is kept (at most prod(branching) rows per instance; fewer where episodes end
early), and ``groups`` names each row's instance.

How the loss counts a step shared by k kept leaves (``tree_shared_steps``): ``per_leaf`` (the
reference's convention) in each of its k rows with that row's advantage; ``once``
(``once_per_node``) one step with the mean of the k advantages (and returns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from workbench.testbeds.agent.environment import AgentEnv, EnvFactory, Instance
from workbench.testbeds.agent.episodes import Episodes, play
from workbench.testbeds.agent.policy import Policy

# per-step fields a node keeps (``Episodes`` attributes), as the network loop plays them
_FIELDS = ("obs", "actions", "log_probs", "rewards", "anchor_ids", "entropy", "terminated",
           "dones", "states")


@dataclass(frozen=True)
class TreeShape:
    """M trees per instance, L rounds of N expansions each, K leaves kept per tree."""

    trees: int
    expansions: int
    rounds: int
    leaves: int

    @classmethod
    def of(cls, settings) -> TreeShape:
        return cls(settings.tree_count, settings.tree_expansions, settings.tree_rounds,
                   settings.group_size // settings.tree_count)


@dataclass(frozen=True)
class SegmentShape:
    """One tree per instance branching ``branching[d]`` ways every ``segment`` steps."""

    branching: tuple[int, ...]
    segment: int

    @classmethod
    def of(cls, settings) -> SegmentShape:
        return cls(tuple(settings.segment_branching), settings.segment_length)


@dataclass
class Played:
    """What a player gives for rows started from restored states, (rows, steps) each: which
    steps were played, which ended an episode, the state before each (``get_state``), and the
    per-step fields a node keeps."""

    mask: torch.Tensor
    dones: torch.Tensor
    states: torch.Tensor
    fields: dict[str, torch.Tensor]


#: player(env, limit): every row of ``env`` played on from its current (restored) state to the
#: end of its episode, or for at most ``limit`` steps
Player = Callable[[AgentEnv, int | None], Played]


class _Nodes:
    """The grown trees as a flat table: roots first (one per tree), then each played step."""

    def __init__(self, roots: torch.Tensor, tree_layouts: list[Instance],
                 tree_instances: list[int], tree_groups: list[int], make_env: EnvFactory,
                 max_steps: int):
        n, device = len(roots), roots.device
        self.tree_layouts, self.tree_instances = tree_layouts, tree_instances
        self.tree_groups = torch.tensor(tree_groups, dtype=torch.long, device=device)
        self.make_env, self.max_steps = make_env, max_steps
        self.roots = n
        self.state = roots  # (nodes, S)
        self.tree = torch.arange(n, device=device)
        self.parent = torch.full((n,), -1, dtype=torch.long, device=device)
        self.depth = torch.zeros(n, dtype=torch.long, device=device)
        self.leaf = torch.zeros(n, dtype=torch.bool, device=device)
        self.steps: dict[str, torch.Tensor] = {}  # field -> (nodes - roots, ...)

    def grow(self, start: torch.Tensor, player: Player, limit: int | None = None
             ) -> torch.Tensor:
        """Play on from each node of ``start`` to the end of an episode (or ``limit`` steps);
        add the steps; the last node each row reached."""
        trees = self.tree[start].tolist()
        env = self.make_env([self.tree_layouts[t] for t in trees], self.max_steps,
                            start.device, instance_ids=[self.tree_instances[t] for t in trees])
        env.set_state(self.state[start])
        played = player(env, limit)
        valid = played.mask != 0
        # a step's state after it: the next step's state before, or the row's final state
        after = torch.cat([played.states[:, 1:], env.get_state()[:, None]], dim=1)
        rows, steps = valid.shape
        ids = torch.full((rows, steps), -1, dtype=torch.long, device=start.device)
        ids[valid] = len(self.tree) + torch.arange(int(valid.sum()), device=start.device)
        parent = torch.cat([start[:, None], ids[:, :-1]], dim=1)
        depth = self.depth[start][:, None] + torch.arange(1, steps + 1, device=start.device)
        self.state = torch.cat([self.state, after[valid]])
        self.tree = torch.cat([self.tree, self.tree[start][:, None].expand(rows, steps)[valid]])
        self.parent = torch.cat([self.parent, parent[valid]])
        self.depth = torch.cat([self.depth, depth[valid]])
        self.leaf = torch.cat([self.leaf, played.dones[valid]])
        new = {"states": played.states[valid]} | {k: v[valid] for k, v in played.fields.items()}
        self.steps = {k: torch.cat([self.steps[k], v]) if k in self.steps else v
                      for k, v in new.items()}
        lengths = valid.sum(dim=1)
        return ids.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)

    def by_tree(self, leaves: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The leaves (or the other nodes, roots among them) ordered by tree, then by id; how
        many each tree has; where each tree's start in that order."""
        ids = torch.nonzero(self.leaf == leaves).squeeze(1)
        ids = ids[torch.argsort(self.tree[ids], stable=True)]
        counts = torch.bincount(self.tree[ids], minlength=self.roots)
        return ids, counts, torch.cumsum(counts, 0) - counts


@dataclass
class Grown:
    """The kept leaves' paths: (rows, steps) node ids (-1 at padding) and each per-step field
    gathered along them (0 at padding), each row's tree, instance (0 .. M - 1), length and
    final state, and the environment steps played (every node, a shared prefix once)."""

    node_ids: torch.Tensor
    fields: dict[str, torch.Tensor]
    tree_ids: torch.Tensor
    groups: torch.Tensor
    lengths: torch.Tensor
    final_states: torch.Tensor
    played: int


def grow_expansion_trees(layouts: list[Instance], instance_ids: list[int], shape: TreeShape,
                         player: Player, branches: np.random.Generator, *, max_steps: int,
                         device: torch.device, make_env: EnvFactory) -> Grown:
    """Tree-GRPO's trees on each instance (module docstring); rows by instance, tree, leaf."""
    nodes = _roots(layouts, instance_ids, shape.trees, max_steps, device, make_env)
    nodes.grow(torch.arange(len(nodes.tree_layouts), device=device), player)
    for _ in range(shape.rounds):  # N draws per tree, uniform with replacement
        inner, counts, first = nodes.by_tree(leaves=False)
        high = counts.repeat_interleave(shape.expansions)
        draws = torch.as_tensor(branches.integers(0, high.cpu().numpy()), device=device)
        nodes.grow(inner[first.repeat_interleave(shape.expansions) + draws], player)
    # K leaves per tree without replacement: those with the K smallest uniform keys
    leaves, _, first = nodes.by_tree(leaves=True)
    keys = torch.as_tensor(branches.random(len(leaves)), device=device)
    tree_of = nodes.tree[leaves]
    order = torch.argsort(keys)
    order = order[torch.argsort(tree_of[order], stable=True)]
    rank = torch.arange(len(leaves), device=device) - first[tree_of[order]]
    kept = leaves[order[rank < shape.leaves]]
    kept = kept[torch.argsort(nodes.tree[kept] * len(nodes.tree) + kept)]  # tree, then id
    return _paths(nodes, kept)


def grow_segment_trees(layouts: list[Instance], instance_ids: list[int], shape: SegmentShape,
                       player: Player, *, max_steps: int, device: torch.device,
                       make_env: EnvFactory) -> Grown:
    """SPO-tree's tree on each instance (module docstring); rows by instance, then leaf id."""
    nodes = _roots(layouts, instance_ids, 1, max_steps, device, make_env)
    frontier = torch.arange(len(layouts), device=device)
    for depth, ways in enumerate(shape.branching):
        if len(frontier) == 0:
            break
        last = depth == len(shape.branching) - 1
        reached = nodes.grow(frontier.repeat_interleave(ways), player,
                             limit=None if last else shape.segment)
        frontier = reached[(reached >= 0) & ~nodes.leaf[reached.clamp(min=0)]]
    leaves = torch.nonzero(nodes.leaf).squeeze(1)
    leaves = leaves[torch.argsort(nodes.tree[leaves] * len(nodes.tree) + leaves)]
    return _paths(nodes, leaves)


def _roots(layouts: list[Instance], instance_ids: list[int], trees: int, max_steps: int,
           device: torch.device, make_env: EnvFactory) -> _Nodes:
    """``trees`` roots per instance (its start state), tree t of instance t // trees."""
    tree_layouts = [layout for layout in layouts for _ in range(trees)]
    tree_instances = [i for i in instance_ids for _ in range(trees)]
    start = make_env(tree_layouts, max_steps, device, instance_ids=tree_instances)
    return _Nodes(start.get_state(), tree_layouts, tree_instances,
                  [g for g in range(len(layouts)) for _ in range(trees)], make_env, max_steps)


def _paths(nodes: _Nodes, leaves: torch.Tensor) -> Grown:
    """Each leaf's path from its root as one row (its steps' fields; 0 at padding)."""
    lengths = nodes.depth[leaves]
    rows, steps = len(leaves), int(lengths.max())
    path = torch.full((rows, steps), -1, dtype=torch.long, device=leaves.device)
    at = leaves.clone()
    for t in range(steps - 1, -1, -1):
        here = lengths > t
        path[here, t] = at[here]
        at = torch.where(here, nodes.parent[at], at)
    valid = path >= 0
    index = (path - nodes.roots).clamp(min=0)

    def gathered(x: torch.Tensor) -> torch.Tensor:
        x = x[index]
        keep = valid.view(rows, steps, *([1] * (x.dim() - 2)))
        return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))

    return Grown(path, {name: gathered(x) for name, x in nodes.steps.items()},
                 nodes.tree[leaves], nodes.tree_groups[nodes.tree[leaves]], lengths,
                 nodes.state[leaves], len(nodes.tree) - nodes.roots)


# the network loop's trees ----------------------------------------------------------------------

def network_player(policy: Policy, generator: torch.Generator, values: bool) -> Player:
    """The network loop's ``play`` from restored states, its ``Episodes`` as node fields."""

    def player(env: AgentEnv, limit: int | None) -> Played:
        played = play(env, policy, generator, values=values, reset=False, limit=limit)
        fields = {name: getattr(played, name) for name in _FIELDS if name != "states"}
        if values:
            fields |= {"value_now": played.values[:, :-1], "value_after": played.next_values}
        return Played(played.mask, played.dones, played.states, fields)

    return player


def play_trees(layouts: list[Instance], instance_ids: list[int], shape: TreeShape,
               policy: Policy, generator: torch.Generator, branches: np.random.Generator, *,
               max_steps: int, device: torch.device, make_env: EnvFactory,
               values: bool = False) -> tuple[Episodes, int]:
    """``shape.trees`` trees grown on each instance (module docstring); the kept leaves'
    paths as ``Episodes`` (rows: instance, then tree, then leaf) with ``tree_ids``,
    ``node_ids`` and ``groups``, and the number of environment steps played."""
    grown = grow_expansion_trees(layouts, instance_ids, shape,
                                 network_player(policy, generator, values), branches,
                                 max_steps=max_steps, device=device, make_env=make_env)
    return _episodes(grown, values), grown.played


def play_segment_trees(layouts: list[Instance], instance_ids: list[int], shape: SegmentShape,
                       policy: Policy, generator: torch.Generator, *, max_steps: int,
                       device: torch.device, make_env: EnvFactory, values: bool = False
                       ) -> tuple[Episodes, int]:
    """SPO-tree's tree on each instance (module docstring): every leaf's path as a row of
    ``Episodes`` (by instance, then leaf id) with ``tree_ids``, ``node_ids`` and ``groups``,
    and the number of environment steps played."""
    grown = grow_segment_trees(layouts, instance_ids, shape,
                               network_player(policy, generator, values), max_steps=max_steps,
                               device=device, make_env=make_env)
    return _episodes(grown, values), grown.played


def _episodes(grown: Grown, values: bool) -> Episodes:
    fields, lengths, valid = grown.fields, grown.lengths, grown.node_ids >= 0
    rows = len(lengths)
    terminated = fields["terminated"]
    episodes = Episodes(
        obs=fields["obs"], actions=fields["actions"], log_probs=fields["log_probs"],
        rewards=fields["rewards"], mask=valid.float(), anchor_ids=fields["anchor_ids"],
        entropy=fields["entropy"], success=terminated.any(dim=1), lengths=lengths,
        terminated=terminated, dones=fields["dones"],
        # as ``play`` records them: at padding, the state the episode ended in
        states=torch.where(valid[:, :, None], fields["states"], grown.final_states[:, None]),
        tree_ids=grown.tree_ids, node_ids=grown.node_ids, groups=grown.groups)
    if values:
        now, after = fields["value_now"], fields["value_after"]
        last = after[torch.arange(rows, device=lengths.device), lengths - 1]
        episodes.values = torch.cat([now, torch.zeros_like(now[:, :1])], dim=1)
        episodes.values[torch.arange(rows, device=lengths.device), lengths] = last
        episodes.next_values = after
    return episodes


def once_per_node(episodes: Episodes, advantages: torch.Tensor, returns: torch.Tensor | None
                  ) -> tuple[Episodes, torch.Tensor, torch.Tensor | None]:
    """The batch with each node's step kept once: at its first row, the mean of its rows'
    advantages (and returns); its repeats masked out."""
    valid = episodes.mask != 0
    nodes = episodes.node_ids[valid]
    found, inverse, counts = torch.unique(nodes, return_inverse=True, return_counts=True)
    where = torch.arange(len(nodes), device=nodes.device)
    first = torch.full_like(found, len(nodes)).scatter_reduce_(0, inverse, where, "amin")
    keep = torch.zeros(len(nodes), dtype=torch.bool, device=nodes.device)
    keep[first] = True
    mask = torch.zeros_like(episodes.mask)
    mask[valid] = keep.to(mask.dtype)

    def averaged(x: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(len(found), dtype=x.dtype, device=x.device).index_add_(
            0, inverse, x[valid])
        out = torch.zeros_like(x)
        out[valid] = (total / counts.to(x.dtype))[inverse]
        return out

    return (replace(episodes, mask=mask), averaged(advantages),
            None if returns is None else averaged(returns))
