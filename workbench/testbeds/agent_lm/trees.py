"""Tree sampling for the turn loop: the network loop's tree growers (``agent.tree``: Tree-GRPO's
and SPO-tree's samplers) with a player that generates turns.

A turn's prompt is the row's current observation text (``turns.prompt_text``), so continuing a
shared prefix of turns is restoring the environment's state at its end and prompting from
there: the model reads exactly what it read on the prefix's own row (the prefix continuation
of a model whose context holds the whole observed state). Every turn played while growing one
update's trees goes to a ``TurnStore``; the kept leaves' paths become a ``Turns`` batch whose
flat turns hold each shared turn once (``tree_shared_steps: once``: its advantage the mean of
its rows') or once per row through it (``per_leaf``: its tokens repeated, each copy with its
row's advantage).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import torch

from workbench.testbeds.agent.environment import AgentEnv, EnvFactory, Instance
from workbench.testbeds.agent.tree import (
    Grown,
    Played,
    Player,
    SegmentShape,
    TreeShape,
    grow_expansion_trees,
    grow_segment_trees,
)
from workbench.testbeds.agent_lm.settings import TurnSettings
from workbench.testbeds.agent_lm.turns import Turns, TurnTokens, play_turns
from workbench.testbeds.rlvr.backends import RolloutBackend


class TurnStore:
    """Every turn played while growing one update's trees, by id: its prompt and action tokens
    and the action tokens' log-probabilities and entropies under the sampling policy."""

    def __init__(self) -> None:
        self.prompts: list[list[int]] = []
        self.responses: list[list[int]] = []
        self.log_probs: list[torch.Tensor] = []
        self.entropy: list[torch.Tensor] = []
        self.generated = 0

    def add(self, turns: Turns) -> torch.Tensor:
        """Keep ``turns``' played turns; (B, T) their ids (-1 where no turn was played)."""
        base = len(self.prompts)
        self.prompts += turns.prompt_ids
        self.responses += turns.response_ids
        for i, response in enumerate(turns.response_ids):
            self.log_probs.append(turns.token_log_probs[i, :len(response)])
            self.entropy.append(turns.token_entropy[i, :len(response)])
        self.generated += turns.generated_tokens
        return torch.where(turns.index >= 0, turns.index + base, -1)


def turn_player(model, tokenizer, backend: RolloutBackend, settings: TurnSettings,
                seed_of: Callable[[int, int], int], store: TurnStore) -> Player:
    """``play_turns`` from restored states; call c's turn k samples from ``seed_of(c, k)``."""
    calls = itertools.count()

    def player(env: AgentEnv, limit: int | None) -> Played:
        call = next(calls)
        turns = play_turns(env, model, tokenizer, backend,
                           sample_seed=lambda turn: seed_of(call, turn),
                           temperature=settings.temperature,
                           max_new_tokens=settings.max_new_tokens,
                           malformed_penalty=settings.malformed_penalty, reset=False,
                           limit=limit)
        fields = {"rewards": turns.rewards, "anchor_ids": turns.anchor_ids,
                  "terminated": turns.terminated, "dones": turns.dones,
                  "malformed": turns.malformed, "log_probs": turns.log_probs,
                  "turn": store.add(turns)}
        return Played(turns.mask, turns.dones, turns.states, fields)

    return player


def play_turn_trees(sampler: str, settings: TurnSettings, layouts: list[Instance],
                    instance_ids: list[int], model, tokenizer, backend: RolloutBackend, *,
                    seed_of: Callable[[int, int], int], branches: np.random.Generator,
                    max_steps: int, device: torch.device, make_env: EnvFactory
                    ) -> tuple[Turns, torch.Tensor, int]:
    """The trees of ``sampler`` (``families.TREE_SAMPLERS``) grown on each instance: the kept
    leaves' paths as ``Turns`` (scored, with ``tree_ids`` and ``node_ids``), each row's
    instance (0 .. M - 1), and the turns played (a shared prefix once)."""
    store = TurnStore()
    player = turn_player(model, tokenizer, backend, settings, seed_of, store)
    if sampler == "expansion":
        grown = grow_expansion_trees(layouts, instance_ids, TreeShape.of(settings), player,
                                     branches, max_steps=max_steps, device=device,
                                     make_env=make_env)
    else:
        grown = grow_segment_trees(layouts, instance_ids, SegmentShape.of(settings), player,
                                   max_steps=max_steps, device=device, make_env=make_env)
    turns = assemble(grown, store, settings.tree_shared_steps, tokenizer.pad_token_id, device)
    return turns, grown.groups, grown.played


def assemble(grown: Grown, store: TurnStore, shared_steps: str, pad_id: int,
             device: torch.device) -> Turns:
    """The grown paths as a scored ``Turns`` batch (module docstring)."""
    fields, valid = grown.fields, grown.node_ids >= 0
    played = fields["turn"][valid]
    if shared_steps == "once":
        used, position = torch.unique(played, return_inverse=True)
    else:
        used, position = played, torch.arange(len(played), device=played.device)
    index = torch.full(valid.shape, -1, dtype=torch.long, device=valid.device)
    index[valid] = position
    ids = used.tolist()
    tokens = TurnTokens.pack([store.prompts[i] for i in ids], [store.responses[i] for i in ids],
                             pad_id, device)
    horizon = tokens.response_mask.shape[1]

    def padded(rows: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([torch.nn.functional.pad(rows[i], (0, horizon - len(rows[i])))
                            for i in ids])

    terminated = fields["terminated"]
    return Turns(fields["rewards"], valid.float(), fields["anchor_ids"], terminated,
                 fields["dones"], fields["malformed"], terminated.any(dim=1), grown.lengths,
                 index, store.generated, tokens=tokens, token_log_probs=padded(store.log_probs),
                 token_entropy=padded(store.entropy), log_probs=fields["log_probs"],
                 states=fields["states"], tree_ids=grown.tree_ids, node_ids=grown.node_ids)
