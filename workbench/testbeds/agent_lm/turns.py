"""The language-model turn loop's turns: the agent tasks played by a small causal LM, one
generated action per turn (``agent_lm.loop`` trains on them with turn-level advantages spread
over each turn's action tokens).

One turn of every row still playing (``play_turns``):

1. the prompt is the row's current observation text and a newline (``prompt_text``; the text
   holds the whole observed state, so the episode so far is not repeated and sequences stay
   short: about 90 characters on key-door);
2. the rollout backend (``rlvr.backends``, batched ``generate`` with KV cache) samples an action
   text from the policy, ending at ``<eos>`` or after ``max_new_tokens``;
3. the environment parses it (``parse_action``); a text that names no action is a no-op
   (``environment.NO_OP``: the row stays where it is, the turn counts towards ``max_steps``)
   and costs ``malformed_penalty`` reward;
4. the action tokens are scored under the sampling policy in one forward pass
   (``rlvr.loop.response_log_probs``): per-token log-probabilities and entropies, and, with a
   value head, the turn's value V(observation) read at the prompt's last token.

The advantage slot is called at the **turn level**, with the network loop's (B = episodes,
T = turns) inputs (``shared.advantage_batch.episode_batch`` fills both): ``rewards``, ``mask``,
``group_ids``, ``anchor_ids`` (the observed state before each turn), ``dones``, ``terminated``,
``old_log_probs`` (each turn's summed action-token log-probability) and, from the turn-level
value head, ``values``/``next_values``. Each turn's advantage is then given to every one of
its action tokens, and the policy is updated with the token-level PPO-clip loss
(``shared.losses.ppo_clip_loss``, token-mean over action tokens only: prompt tokens and padding
are masked out), the entropy slot's coefficient and hook, and (with a value head) the value
loss on the turn returns; ``epochs`` x ``minibatches`` optimizer steps of the step-size slot
over the update's turns. The batch-size slot sets the instances per update.

Each update draws M training instances (``seeds.stream(seed, "prompts", update)``, as the
network loop does) and plays each G times; turn k of update u samples from the stream
``("rollouts", u, k)``. Held-out ``eval/success`` is the greedy policy's success on each held-out
instance, measured before the first update (step 0: the starting checkpoint), every
``eval_every`` updates and at the last one (whichever budget ends the run);
``eval/success_sampled`` the same with one sampled episode per instance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from workbench.common import seeds
from workbench.testbeds.agent.environment import NO_OP, AgentEnv
from workbench.testbeds.agent_lm.settings import TurnSettings
from workbench.testbeds.rlvr.backends import RolloutBackend
from workbench.testbeds.rlvr.loop import response_log_probs

if TYPE_CHECKING:
    pass


def prompt_text(env: AgentEnv, row: int) -> str:
    """What the model reads at a turn: the row's observation text and a newline."""
    return env.text(row) + "\n"


@dataclass
class TurnTokens:
    """Prompts (left-padded to ``prompt_width``) followed by responses (right-padded): the
    layout ``rlvr.loop.response_log_probs`` reads, one row per turn."""

    input_ids: torch.Tensor  # (N, prompt_width + R)
    attention_mask: torch.Tensor  # (N, prompt_width + R)
    response_mask: torch.Tensor  # (N, R) float: 1 on action tokens
    prompt_width: int

    @classmethod
    def pack(cls, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
             pad_id: int, device: torch.device) -> TurnTokens:
        width = max(len(p) for p in prompts)
        horizon = max(1, max(len(r) for r in responses))
        ids = torch.full((len(prompts), width + horizon), pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        response_mask = torch.zeros((len(prompts), horizon))
        for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            ids[i, width - len(prompt):width] = torch.tensor(list(prompt), dtype=torch.long)
            ids[i, width:width + len(response)] = torch.tensor(list(response), dtype=torch.long)
            attention[i, width - len(prompt):width + len(response)] = 1
            response_mask[i, :len(response)] = 1
        return cls(ids.to(device), attention.to(device), response_mask.to(device), width)


@dataclass
class Turns:
    """One batch of episodes at the turn level: (B, T) tensors (T: the longest episode's
    turns), and the tokens of every played turn flattened turn by turn (``index`` maps a
    (row, turn) to its flat position, -1 where the row's episode had ended)."""

    rewards: torch.Tensor  # (B, T): 1 at the turn that reaches the goal, - penalty if malformed
    mask: torch.Tensor  # (B, T) float: 1 where a turn was played
    anchor_ids: torch.Tensor  # (B, T) long: the observed state before the turn
    terminated: torch.Tensor  # (B, T) bool: the goal reached at that turn
    dones: torch.Tensor  # (B, T) bool: the episode ended at that turn (goal or max_steps)
    malformed: torch.Tensor  # (B, T) bool: the turn's text named no action
    success: torch.Tensor  # (B,) bool
    lengths: torch.Tensor  # (B,) long: turns played
    index: torch.Tensor  # (B, T) long
    generated_tokens: int
    tokens: TurnTokens | None = None  # (N turns) when scored
    token_log_probs: torch.Tensor | None = None  # (N, R) at sampling
    token_entropy: torch.Tensor | None = None  # (N, R)
    log_probs: torch.Tensor | None = None  # (B, T) each turn's summed action-token log-prob
    values: torch.Tensor | None = None  # (B, T + 1) V before each turn, and after the last
    next_values: torch.Tensor | None = None  # (B, T) V of the state each turn reached
    states: torch.Tensor | None = None  # (B, T, S) the environment's state before each turn
    prompt_ids: list[list[int]] | None = None  # (N) each played turn's prompt tokens
    response_ids: list[list[int]] | None = None  # (N) and its action tokens
    tree_ids: torch.Tensor | None = None  # (B,) tree sampling: each row's tree
    node_ids: torch.Tensor | None = None  # (B, T) tree sampling: each turn's node

    def per_turn(self, table: torch.Tensor) -> torch.Tensor:
        """(N,) the entries of a (B, T) ``table`` at the played turns, in flat order; a turn
        that several rows share (a tree's shared prefix counted once) gets their mean."""
        played = self.index >= 0
        n = int(self.index.max()) + 1 if bool(played.any()) else 0
        total = table.new_zeros(n).index_add_(0, self.index[played], table[played])
        count = table.new_zeros(n).index_add_(0, self.index[played],
                                              torch.ones_like(table[played]))
        return total / count.clamp(min=1)


def _columns(rows: list[int], values, size: int, fill, dtype, device) -> torch.Tensor:
    column = torch.full((size,), fill, dtype=dtype, device=device)
    if rows:
        column[torch.tensor(rows, device=device)] = torch.as_tensor(values, dtype=dtype,
                                                                     device=device)
    return column


def play_turns(env: AgentEnv, model, tokenizer, backend: RolloutBackend, *,
               sample_seed: Callable[[int], int] | None, temperature: float = 1.0,
               max_new_tokens: int = 8, malformed_penalty: float = 0.0, score: bool = True,
               value_head: torch.nn.Module | None = None, reset: bool = True,
               limit: int | None = None) -> Turns:
    """Every row of ``env`` from its start (without ``reset``: from its current state) to the
    end of its episode, or for at most ``limit`` turns, one generated action per turn: sampled
    at ``temperature`` from the seed ``sample_seed(turn)``, or greedy when ``sample_seed`` is
    None. With ``score``, the action tokens' log-probabilities and entropies under the
    sampling policy (and with ``value_head`` each turn's value) are kept for the update."""
    if reset:
        env.reset()
    rows_n, device = env.num_envs, env.device
    pad_id = tokenizer.pad_token_id
    columns: list[tuple] = []
    prompts: list[list[int]] = []
    responses: list[list[int]] = []
    scored: list[tuple[torch.Tensor, torch.Tensor]] = []
    success = torch.zeros(rows_n, dtype=torch.bool, device=device)
    generated, turn = 0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        while not bool(env.done.all()) and (limit is None or turn < limit):
            rows = (~env.done).nonzero().squeeze(1).tolist()
            anchors, state = env.anchor_keys(), env.get_state()
            out = backend.generate([prompt_text(env, r) for r in rows], 1,
                                   max_new_tokens=max_new_tokens, temperature=temperature,
                                   greedy=sample_seed is None,
                                   seed=0 if sample_seed is None else sample_seed(turn))
            parsed = [env.parse_action(r, text) for r, text in zip(rows, out.texts, strict=True)]
            bad = [a is None for a in parsed]
            actions = _columns(rows, [NO_OP if a is None else a for a in parsed], rows_n,
                               NO_OP, torch.long, device)
            moved = env.step(actions)
            success |= moved.terminated
            malformed = _columns(rows, bad, rows_n, False, torch.bool, device)
            flat = _columns(rows, range(len(prompts), len(prompts) + len(rows)), rows_n, -1,
                            torch.long, device)
            summed = value = torch.zeros(rows_n, device=device)
            if score:
                tokens = TurnTokens.pack(out.prompt_ids, out.response_ids, pad_id, device)
                log_probs, entropy, values = response_log_probs(model, tokens, temperature,
                                                                value_head)
                scored.append((log_probs, entropy))
                summed = _columns(rows, log_probs.sum(dim=1), rows_n, 0.0, torch.float32,
                                  device)
                if values is not None:
                    value = _columns(rows, values[:, 0], rows_n, 0.0, torch.float32, device)
            prompts += out.prompt_ids
            responses += out.response_ids
            generated += sum(len(r) for r in out.response_ids)
            reward = moved.reward - malformed_penalty * malformed.float()
            columns.append((reward, moved.active.float(), anchors, moved.terminated,
                            moved.terminated | moved.truncated, malformed, flat, summed, value,
                            state))
            turn += 1
        (rewards, mask, anchor_ids, terminated, dones, malformed, index, summed, now,
         states) = (torch.stack(x, dim=1) for x in zip(*columns, strict=True))
        turns = Turns(rewards, mask, anchor_ids, terminated, dones, malformed, success,
                      mask.sum(dim=1).long(), index, generated, states=states,
                      prompt_ids=prompts, response_ids=responses)
        if score:
            turns.tokens = TurnTokens.pack(prompts, responses, pad_id, device)
            horizon = turns.tokens.response_mask.shape[1]
            turns.token_log_probs, turns.token_entropy = (
                torch.cat([torch.nn.functional.pad(part[i], (0, horizon - part[i].shape[1]))
                           for part in scored], dim=0) for i in (0, 1))
            turns.log_probs = summed
            if value_head is not None:
                turns.values, turns.next_values = _turn_values(
                    env, model, tokenizer, value_head, now, mask, temperature)
    model.train(was_training)
    return turns


def _turn_values(env, model, tokenizer, value_head, now, mask, temperature):
    """(values (B, T + 1), next_values (B, T)): V before each turn, and V of the state each
    turn reached (the next turn's V, or at a row's last turn the value of its final
    observation, which a truncated episode bootstraps from)."""
    rows = list(range(env.num_envs))
    final_prompts = backend_prompt_ids(tokenizer, [prompt_text(env, r) for r in rows])
    tokens = TurnTokens.pack(final_prompts, [[tokenizer.eos_token_id]] * len(rows),
                             tokenizer.pad_token_id, env.device)
    final = response_log_probs(model, tokens, temperature, value_head)[2][:, 0]
    following = torch.cat([now[:, 1:], now.new_zeros(len(rows), 1)], dim=1)
    continues = torch.cat([mask[:, 1:], mask.new_zeros(len(rows), 1)], dim=1) != 0
    next_values = torch.where(continues, following, final[:, None].expand_as(now))
    return torch.cat([now, final[:, None]], dim=1), next_values


def backend_prompt_ids(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """The prompts' token ids as the rollout backend encodes them (``<bos>`` included)."""
    return tokenizer(list(prompts))["input_ids"]


def evaluate(env: AgentEnv, model, tokenizer, backend: RolloutBackend,
             settings: TurnSettings, seed: int | None = None) -> dict[str, float]:
    """The greedy policy on every row of ``env`` (one held-out instance each); with a run
    ``seed``, also one episode sampled at ``temperature`` on each (turn k from the stream
    ``("eval", k)``, the same at every evaluation). A greedy text policy that reads only the
    current observation repeats itself wherever it returns to a state, so it can cycle where
    the sampled one does not: both are logged."""
    turns = play_turns(env, model, tokenizer, backend, sample_seed=None,
                       max_new_tokens=settings.max_new_tokens, score=False)
    played = turns.mask != 0
    metrics = {"eval/success": float(turns.success.float().mean()),
               "eval/malformed_fraction": float(turns.malformed[played].float().mean())}
    if seed is not None:
        sampled = play_turns(env, model, tokenizer, backend,
                             sample_seed=lambda turn: seeds.int_seed(seed, "eval", turn),
                             temperature=settings.temperature,
                             max_new_tokens=settings.max_new_tokens, score=False)
        metrics["eval/success_sampled"] = float(sampled.success.float().mean())
    return metrics
