"""How a loop samples an instance's G rows: independent rollouts, or trees that branch from
shared prefixes (``families.TREE_SAMPLERS``; ``tree.py`` grows them). Declared once for the
network loop and the language-model turn loop, without importing torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from workbench.testbeds.settings import Settings

if TYPE_CHECKING:
    from workbench.families import AdvantageMethod


class TreeSampling(Settings):
    """The sampling knobs; the model that inherits them has ``group_size`` (G)."""

    sampling: Literal["independent", "tree", "segments", "auto"] = Field(
        "independent", description="independent: G rollouts of each instance; tree: the G rows "
        "are G / tree_count leaves of each of tree_count trees (Tree-GRPO's sampler); "
        "segments: the leaves of one tree per instance branching segment_branching[d] ways "
        "every segment_length steps (SPO-tree's sampler); auto: the sampler the advantage "
        "method's reference uses (its tree_sampler), independent rollouts for the others")
    tree_count: int = Field(2, ge=1, le=1024, description="M: trees per instance (tree "
                                                            "sampling)")
    tree_expansions: int = Field(2, ge=1, le=1024, description="N: nodes of each tree expanded "
                                                                 "in each round")
    tree_rounds: int = Field(1, ge=0, le=64, description="L: expansion rounds")
    segment_branching: list[int] = Field(
        [2, 2, 2], min_length=1, max_length=16, description="segments sampling: the branches "
        "at the start of each depth's segment (their product is group_size, the most leaves "
        "a tree has)")
    segment_length: int = Field(4, ge=1, le=100_000, description="segments sampling: steps "
                                                                 "per segment (the last depth "
                                                                 "plays to the episode's end)")
    tree_shared_steps: Literal["per_leaf", "once"] = Field(
        "per_leaf", description="how the loss counts a step shared by k kept leaves: in each "
        "of their rows with its row's advantage (per_leaf: Tree-GRPO's rows are whole paths), "
        "or once with the mean of their advantages")

    @model_validator(mode="after")
    def _trees_give_enough_leaves(self):
        if self.sampling in ("tree", "auto"):
            self._check_expansion_trees()
        if self.sampling == "segments":
            self._check_segment_trees()
        return self

    def _check_expansion_trees(self) -> None:
        if self.group_size % self.tree_count:
            raise ValueError(f"group_size ({self.group_size}) must be a multiple of tree_count "
                             f"({self.tree_count}) under sampling: {self.sampling} (each tree "
                             "gives group_size / tree_count leaves)")
        grown = 1 + self.tree_rounds * self.tree_expansions
        if self.group_size // self.tree_count > grown:
            raise ValueError(f"each tree grows 1 + tree_rounds x tree_expansions = {grown} "
                             f"leaves, fewer than the group_size / tree_count = "
                             f"{self.group_size // self.tree_count} it must give; raise "
                             "tree_expansions or tree_rounds, or lower group_size")

    def _check_segment_trees(self) -> None:
        leaves = math.prod(self.segment_branching)
        if leaves != self.group_size or min(self.segment_branching) < 1:
            raise ValueError(f"segment_branching {self.segment_branching} gives up to {leaves} "
                             f"leaves per instance; under sampling: {self.sampling} its product "
                             f"must be group_size ({self.group_size}), each entry >= 1")

    def tree_sampler(self, method: type[AdvantageMethod] | AdvantageMethod) -> str | None:
        """The sampler rollouts grow with for ``method`` (``families.TREE_SAMPLERS``; None:
        independent rollouts); under ``auto``, checked here for that sampler."""
        if self.sampling != "auto":
            return {"tree": "expansion", "segments": "segments"}.get(self.sampling)
        if method.tree_sampler == "segments":
            self._check_segment_trees()
        return method.tree_sampler
