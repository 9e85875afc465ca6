"""The language-model turn loop on the agent tasks (``workbench.testbeds.agent_lm``): text
actions and their parser, the no-op of a malformed action, turn boundaries and the masks of
the token-level loss, turn advantages on action tokens, the turn-level value inputs,
``turn_gae`` against ``gae``, the cached warm-up on noisy optimal demonstrations, and one
update moving each turn's log-probability the way its advantage says."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workbench import registry
from workbench.testbeds import Budget, get_task
from workbench.testbeds.agent import keydoor, toolcalc
from workbench.testbeds.agent.environment import NO_OP
from workbench.testbeds.agent.keydoor import ACTION_NAMES, KeyDoor
from workbench.testbeds.agent.toolcalc import ToolCalc
from workbench.testbeds.agent_lm import warmup
from workbench.testbeds.agent_lm.loop import _update, token_advantages
from workbench.testbeds.agent_lm.settings import TurnSettings
from workbench.testbeds.agent_lm.turns import play_turns, prompt_text
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.backends import Rollouts
from workbench.testbeds.rlvr.model import ModelConfig, build_model, sequence_log_probs
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer

TINY_MODEL = ModelConfig(hidden=32, layers=1, heads=2, intermediate=64)
TINY_TASK = {"train_instances": 8, "eval_instances": 4, "instances_per_update": 2,
             "group_size": 2, "max_steps": 6, "hidden": 32, "layers": 1, "heads": 2,
             "intermediate": 64, "warmup_steps": 10, "warmup_target": None,
             "warmup_batch": 16, "eval_every": 2}


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def tiny():
    tokenizer = build_char_tokenizer()
    return build_model(TINY_MODEL, tokenizer), tokenizer


def layouts(n: int, split: int = 0) -> list[keydoor.Layout]:
    return [keydoor.generate(0, split, i, 6, 0.1) for i in range(n)]


class ScriptedBackend:
    """Returns the given action texts turn by turn (each followed by ``<eos>``), as the rollout
    backend would return sampled ones: the loop's handling of what comes back is under test."""

    def __init__(self, tokenizer, script: list[list[str]]):
        self.tokenizer, self.script, self.calls = tokenizer, script, []

    def generate(self, prompts, n, *, max_new_tokens, temperature=1.0, greedy=False, seed=0):
        texts = self.script[len(self.calls)]
        assert len(texts) == len(prompts)
        self.calls.append(list(prompts))
        ids = self.tokenizer(list(prompts))["input_ids"]
        responses = [self.tokenizer(t, add_special_tokens=False)["input_ids"]
                     + [self.tokenizer.eos_token_id] for t in texts]
        return Rollouts(ids, responses, list(texts), [True] * len(texts))


# ------------------------------------------------------------------------ the environments


def test_keydoor_action_texts_round_trip_and_anything_else_is_no_action():
    env = KeyDoor(layouts(1), max_steps=5)
    for action, name in enumerate(ACTION_NAMES):
        assert env.action_text(0, action) == name
        assert env.parse_action(0, env.action_text(0, action)) == action
    assert env.parse_action(0, " Left ") == 2
    for text in ("", "upp", "go up", "up down", "north"):
        assert env.parse_action(0, text) is None


@pytest.mark.parametrize("make", ["keydoor", "toolcalc"])
def test_a_no_op_leaves_the_row_in_place_but_counts_towards_max_steps(make):
    if make == "keydoor":
        env = KeyDoor(layouts(2), max_steps=3)
    else:
        env = ToolCalc([toolcalc.generate(0, 0, i) for i in range(2)], max_steps=3)
    env.step(torch.tensor([0, 0]))
    before = env.get_state()
    moved = env.step(torch.tensor([NO_OP, 0]))
    after = env.get_state()
    assert bool(moved.active.all()) and not bool(moved.terminated[0])
    elapsed = 3 if make == "keydoor" else 1  # the steps column of each state
    assert torch.equal(torch.cat([after[0, :elapsed], after[0, elapsed + 1:]]),
                       torch.cat([before[0, :elapsed], before[0, elapsed + 1:]]))
    assert int(after[0, elapsed]) == int(before[0, elapsed]) + 1
    ended = env.step(torch.tensor([NO_OP, NO_OP]))
    assert bool(ended.truncated[0]) and bool(env.done[0])  # the third step, a no-op, truncates


@pytest.mark.parametrize("make", ["keydoor", "toolcalc"])
def test_optimal_actions_from_any_reached_state_solve_in_the_fewest_steps(make):
    rng = np.random.default_rng(0)
    for index in range(6):
        if make == "keydoor":
            instance = keydoor.generate(0, 0, index, 6, 0.1)
            env = KeyDoor([instance], max_steps=100)
        else:
            instance = toolcalc.generate(0, 0, index)
            env = ToolCalc([instance], max_steps=100)
        assert len(env.optimal_actions(0)) == instance.optimal
        for _ in range(int(rng.integers(1, 4))):  # wander off, then re-plan from there
            env.step(torch.tensor([int(rng.integers(env.n_actions))]))
        if bool(env.done[0]):
            continue
        plan = env.optimal_actions(0)
        for action in plan:
            moved = env.step(torch.tensor([action]))
        assert bool(moved.terminated[0]), (make, index)


# ---------------------------------------------------------------------------- the turn loop


def test_turns_mask_prompts_know_their_boundaries_and_make_malformed_actions_no_ops(tiny):
    model, tokenizer = tiny
    env = KeyDoor(layouts(2), max_steps=3, instance_ids=[0, 1])
    script = [["up", "jump"], ["left", "left"], ["xx", "down"]]
    backend = ScriptedBackend(tokenizer, script)
    turns = play_turns(env, model, tokenizer, backend, sample_seed=lambda t: t,
                       malformed_penalty=0.25)
    # every row plays max_steps = 3 turns (the goal is never next to the start here)
    assert turns.mask.tolist() == [[1, 1, 1], [1, 1, 1]]
    assert turns.malformed.tolist() == [[False, False, True], [True, False, False]]
    assert torch.allclose(turns.rewards, torch.tensor([[0, 0, -0.25], [-0.25, 0, 0]])
                          + turns.terminated.float())
    # row 1's malformed first turn left it where it started
    assert backend.calls[1][1] == backend.calls[0][1]
    assert backend.calls[0][1] == prompt_text(KeyDoor(layouts(2), 3), 1)
    assert bool(env.done.all())
    # turn boundaries: flat turn k of (row, turn) holds that turn's prompt and action tokens
    tokens = turns.tokens
    for row in range(2):
        for turn in range(3):
            k = int(turns.index[row, turn])
            action = tokenizer(script[turn][row], add_special_tokens=False)["input_ids"]
            length = int(tokens.response_mask[k].sum())
            assert length == len(action) + 1  # the action and <eos>, nothing else
            response = tokens.input_ids[k, tokens.prompt_width:tokens.prompt_width + length]
            assert response.tolist() == action + [tokenizer.eos_token_id]
            prompt = tokenizer(backend.calls[turn][row])["input_ids"]
            assert tokens.input_ids[k, tokens.prompt_width - len(prompt):tokens.prompt_width] \
                .tolist() == prompt
    # the loss sees action tokens only: their log-probs are the model's, zero elsewhere
    response_positions = torch.zeros_like(tokens.attention_mask, dtype=torch.float)
    response_positions[:, tokens.prompt_width:] = tokens.response_mask
    expected, _ = sequence_log_probs(model, tokens.input_ids, tokens.attention_mask,
                                     response_positions)
    assert torch.allclose(turns.token_log_probs, expected[:, tokens.prompt_width:], atol=1e-5)
    assert bool((turns.token_log_probs[tokens.response_mask == 0] == 0).all())
    # the advantage slot's old_log_probs: each turn's summed action-token log-prob
    assert torch.allclose(turns.per_turn(turns.log_probs), turns.token_log_probs.sum(1))


def test_each_turn_advantage_lies_on_its_action_tokens_only(tiny):
    model, tokenizer = tiny
    env = KeyDoor(layouts(2), max_steps=2)
    backend = ScriptedBackend(tokenizer, [["up", "right"], ["down", "left"]])
    turns = play_turns(env, model, tokenizer, backend, sample_seed=lambda t: t)
    advantages = torch.tensor([[1.0, -2.0], [3.0, 0.5]])
    spread = token_advantages(turns, advantages)
    for row in range(2):
        for turn in range(2):
            k = int(turns.index[row, turn])
            on = turns.tokens.response_mask[k] == 1
            assert bool((spread[k, on] == advantages[row, turn]).all())
            assert bool((spread[k, ~on] == 0).all())


def test_turn_values_bootstrap_from_the_next_turn_and_the_final_observation(tiny):
    model, tokenizer = tiny
    head = torch.nn.Linear(model.config.hidden_size, 1)
    env = KeyDoor(layouts(2), max_steps=3)
    backend = ScriptedBackend(tokenizer, [["up", "up"], ["down", "x"], ["left", "right"]])
    turns = play_turns(env, model, tokenizer, backend, sample_seed=lambda t: t,
                       value_head=head)
    assert turns.values.shape == (2, 4) and turns.next_values.shape == (2, 3)
    assert torch.equal(turns.next_values[:, :2], turns.values[:, 1:3])
    assert torch.equal(turns.next_values[:, 2], turns.values[:, 3])
    # V before turn 0 is the head on the prompt's last token (the same prompt in both rows'
    # instances differs; recompute row 0's directly)
    ids = tokenizer([backend.calls[0][0]], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0, -1]
        assert math.isclose(float(head(hidden)), float(turns.values[0, 0]), abs_tol=1e-5)


def test_turn_gae_is_gae_on_turn_level_inputs():
    gae, turn_gae = registry.get("advantage", "gae")(), registry.get("advantage", "turn_gae")()
    assert turn_gae.requires == gae.requires and turn_gae.fidelity == "reconstructed"
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(4, 5, generator=generator)
    values = torch.rand(4, 6, generator=generator)
    dones = torch.zeros(4, 5, dtype=torch.bool)
    dones[0, 2] = dones[1, 4] = True
    terminated = dones.clone()
    terminated[1, 4] = False  # a truncation
    mask = torch.ones(4, 5)
    mask[0, 3:] = 0
    inputs = dict(rewards=rewards, values=values, dones=dones, terminated=terminated,
                  next_values=values[:, 1:], mask=mask)
    for a, b in zip(gae.compute(**inputs), turn_gae.compute(**inputs), strict=True):
        assert torch.equal(a, b)


def test_one_update_raises_positive_advantage_turns_and_lowers_negative_ones(tiny):
    """What the clipped token-level update does with turn advantages: after one step on a
    batch, the summed log-probability of every turn with a positive advantage went up and of
    every turn with a negative one went down (a sign error, or advantages landing on the
    wrong tokens, fails this)."""
    _, tokenizer = tiny
    model = build_model(TINY_MODEL, tokenizer)
    env = KeyDoor(layouts(2), max_steps=2)
    script = [["up", "right"], ["down", "left"]]
    turns = play_turns(env, model, tokenizer, ScriptedBackend(tokenizer, script),
                       sample_seed=lambda t: t)
    advantages = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    methods = {"step_size": registry.get("step_size", "adam")(lr=1e-2),
               "entropy": registry.get("entropy", "none")(),
               "advantage": registry.get("advantage", "grpo")()}
    from workbench.families import open_rl_slots

    slots = open_rl_slots(methods, model.parameters(), updates=1, per_update=1, batch=4,
                          samples=None)
    settings = TurnSettings(epochs=1, minibatches=1)
    before = turns.per_turn(turns.log_probs)
    _update(model, None, slots, turns, advantages, None, 0.0, settings, 0, 0.5,
            torch.Generator().manual_seed(0))
    after = play_turns(KeyDoor(layouts(2), max_steps=2), model, tokenizer,
                       ScriptedBackend(tokenizer, script), sample_seed=lambda t: t)
    change = after.per_turn(after.log_probs) - before
    sign = turns.per_turn(advantages)
    assert bool((change * sign > 0).all()), (change, sign)


# ------------------------------------------------------------------------------- the warm-up


def test_noise_free_demonstrations_are_optimal_episodes_and_noise_adds_detours():
    instances = layouts(6)
    clean = warmup.demonstrations(instances, KeyDoor, 30, 0.0, np.random.default_rng(0))
    assert len(clean) == sum(layout.optimal for layout in instances)
    assert all(d.prompt.endswith("\n") and d.solution in ACTION_NAMES for d in clean)
    noisy = warmup.demonstrations(instances, KeyDoor, 30, 0.5, np.random.default_rng(0))
    assert len(noisy) > len(clean)
    with pytest.raises(ValueError, match="noise"):
        warmup.demonstrations(instances, KeyDoor, 30, 1.5, np.random.default_rng(0))


def test_the_warm_up_is_cached_by_its_settings_and_written_whole(tmp_path, monkeypatch):
    kwargs = dict(max_steps=6, model_config=TINY_MODEL, noise=0.3, steps=3, target=None,
                  eval_every=50, batch_size=8, lr=1e-3, seed=0, cache_dir=tmp_path)
    instances, validation = layouts(4), layouts(2, split=2)
    first = warmup.warm_up("keydoor", {"size": 6}, instances, validation, KeyDoor, **kwargs)
    assert (first / warmup.METADATA_FILE).is_file() and (first / "config.json").is_file()
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name]  # no staging left

    def no_training(*args, **kw):
        raise AssertionError("a cached warm-up must not train again")

    monkeypatch.setattr(warmup, "train_supervised", no_training)
    assert warmup.warm_up("keydoor", {"size": 6}, instances, validation, KeyDoor,
                          **kwargs) == first
    with pytest.raises(AssertionError, match="must not train"):  # another noise: another key
        warmup.warm_up("keydoor", {"size": 6}, instances, validation, KeyDoor,
                       **{**kwargs, "noise": 0.2})


def test_a_warm_up_killed_while_saving_leaves_no_checkpoint(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerFast

    def crash(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(PreTrainedTokenizerFast, "save_pretrained", crash)
    with pytest.raises(KeyboardInterrupt):
        warmup.warm_up("keydoor", {"size": 6}, layouts(2), layouts(1, split=2), KeyDoor,
                       max_steps=4, model_config=TINY_MODEL, noise=0.3, steps=2, target=None,
                       eval_every=50, batch_size=4, lr=1e-3, seed=0, cache_dir=tmp_path)
    assert list((tmp_path / "agent-lm-warmup").iterdir()) == []


# ----------------------------------------------------------------------------- the task


@pytest.mark.parametrize("name, advantage", [("keydoor-lm", "gigpo"),
                                             ("toolcalc-lm", "turn_gae")])
def test_the_task_runs_and_logs_turn_metrics(name, advantage):
    task = get_task(name)
    methods = {slot: registry.get(slot, method)() for slot, method in
               task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", advantage)()
    logged: dict[int, dict] = {}
    out = task().run(task.Params(**TINY_TASK), methods, seed=0, device=torch.device("cpu"),
                     budget=Budget(steps=2), log=lambda step, m: logged.setdefault(step, m))
    assert out["steps"] == 2 and not out["diverged"]
    assert sorted(logged) == [0, 1, 2] and "eval/success" in logged[0]
    assert 0.0 <= logged[2]["train/malformed_fraction"] <= 1.0
    assert logged[2]["cost/env_steps"] > logged[1]["cost/env_steps"] > 0
    if advantage == "turn_gae":
        assert "train/value_loss" in logged[1]


def test_params_name_the_problem():
    with pytest.raises(ValueError, match="max_optimal"):
        get_task("toolcalc-lm").Params(max_optimal=8, max_steps=6)
    with pytest.raises(ValueError, match="multiple of heads"):
        get_task("keydoor-lm").Params(hidden=30, heads=4)


def test_backend_generates_one_action_per_active_row(tiny):
    """The real backend in the loop: every played turn has a response of 1 .. max_new_tokens
    tokens, and the turns of a row stop at its episode's end."""
    model, tokenizer = tiny
    backend = make_backend("hf", model, tokenizer, None, "cpu")
    env = KeyDoor(layouts(3), max_steps=4)
    turns = play_turns(env, model, tokenizer, backend, sample_seed=lambda t: 7 + t,
                       max_new_tokens=3)
    lengths = turns.tokens.response_mask.sum(1)
    assert bool((lengths >= 1).all()) and bool((lengths <= 3).all())
    assert torch.equal(turns.lengths, turns.mask.sum(1).long())
    assert int((turns.index >= 0).sum()) == len(lengths)


def test_methods_needing_what_the_turn_loop_lacks_are_refused():
    """No Monte Carlo continuations on the language-model loop: the spec check leaves out
    spo_chain, and keeps the turn-level and the tree estimators (tests/test_agent_lm_trees.py)
    and implicit_prm (the loop's frozen reference)."""
    from workbench.spec.resolve import fitting_methods

    for name in ("keydoor-lm", "toolcalc-lm"):
        fits = fitting_methods(get_task(name), "advantage")
        assert {"grpo", "rloo", "gigpo", "hgpo", "gae", "turn_gae", "tree_grpo",
                "spo_tree", "implicit_prm"} <= set(fits), fits
        assert "spo_chain" not in fits, fits


# ------------------------------------------------------------- the reference policy


def test_reference_log_probs_are_the_policys_summed_per_turn_and_stay_frozen():
    from workbench.testbeds.agent_lm.loop import ref_log_probs_of, reference_model

    tokenizer = build_char_tokenizer()
    torch.manual_seed(3)
    model = build_model(TINY_MODEL, tokenizer)
    reference = reference_model(model)
    backend = make_backend("hf", model, tokenizer, None, "cpu")
    env = KeyDoor(layouts(3), max_steps=4)
    turns = play_turns(env, model, tokenizer, backend, sample_seed=lambda t: 11 + t,
                       max_new_tokens=3, temperature=0.7)
    # chunks of 2 turns: the same numbers as scoring all at once
    same = ref_log_probs_of(reference, turns, 0.7, chunk=2)
    assert same.shape == turns.mask.shape
    # each turn's action tokens summed, as the sampling policy's turn log-probabilities
    assert torch.allclose(same, turns.log_probs * turns.mask, atol=1e-4)
    assert torch.all(same[turns.mask == 0] == 0) and torch.all(same[turns.mask != 0] < 0)
    # one turn by hand: its tokens' log-probabilities under the reference, summed
    row, turn = 0, 0
    flat = int(turns.index[row, turn])
    assert same[row, turn] == pytest.approx(
        float(turns.token_log_probs[flat].sum()), abs=1e-4)
    with torch.no_grad():  # the policy moves on; the reference does not
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert torch.equal(ref_log_probs_of(reference, turns, 0.7), same)
    assert not any(p.requires_grad for p in reference.parameters())
    assert not reference.training


def test_implicit_prm_gets_the_initial_policy_as_its_reference(monkeypatch):
    """The loop fills ref_log_probs only for a method that reads them; at the first update
    the reference is the policy itself (ref_log_probs = old_log_probs on every played turn);
    once the policy has moved (here: its weights shifted after the first update, as a tiny
    run's all-failed first batch gives no gradient) they differ, the reference made once."""
    from workbench.testbeds.agent_lm import loop

    seen, made = [], []
    compute, copy_of = loop.compute_advantages, loop.reference_model

    def spy(method, batch, inputs):
        seen.append(batch)
        if made and len(seen) == 3:  # implicit_prm's first update: move the policy on
            with torch.no_grad():
                for p in made[0].parameters():
                    p.add_(0.05 * torch.randn_like(p))
        return compute(method, batch, inputs)

    def reference_model(model):
        made.append(model)
        return copy_of(model)

    monkeypatch.setattr(loop, "compute_advantages", spy)
    monkeypatch.setattr(loop, "reference_model", reference_model)
    task = get_task("keydoor-lm")
    for advantage in ("grpo", "implicit_prm"):
        methods = {slot: registry.get(slot, method)() for slot, method in
                   task.default_methods.items()}
        methods["advantage"] = registry.get("advantage", advantage)()
        out = task().run(task.Params(**TINY_TASK), methods, seed=0,
                         device=torch.device("cpu"), budget=Budget(steps=2),
                         log=lambda step, m: None)
        assert out["steps"] == 2 and not out["diverged"]
    grpo, _, first, second = seen  # two updates each
    assert grpo.ref_log_probs is None  # nothing made for a method that does not read them
    assert len(made) == 1
    played = first.mask != 0
    assert torch.allclose(first.ref_log_probs[played], first.old_log_probs[played], atol=1e-4)
    assert torch.all(first.ref_log_probs[~played] == 0)
    moved = second.mask != 0
    assert (second.ref_log_probs[moved] - second.old_log_probs[moved]).abs().max() > 1e-2


def test_workbench_run_keydoor_lm_with_implicit_prm(tmp_path):
    import json

    from tests.conftest import run_cli

    params = [f"{k}={'null' if v is None else v}" for k, v in TINY_TASK.items()]
    out = run_cli("run", "keydoor-lm", "advantage=implicit_prm", *params, "--steps", "2",
                  "--json", "--device", "cpu", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["steps"] == 2 and not result["diverged"]
    assert math.isfinite(result["train/policy_loss"])


def test_a_kl_penalty_keeps_a_reference_model_for_any_method_and_logs_its_kl():
    """kl_coef > 0 on the turn loop: a reference for grpo too, train/kl_ref logged (the
    token-mean k3 to the initial model: >= 0, small after two tiny updates); without it none."""
    task = get_task("keydoor-lm")

    def run(**extra) -> list[dict]:
        methods = {slot: registry.get(slot, method)() for slot, method in
                   task.default_methods.items()}
        logged: list[dict] = []
        task().run(task.Params(**TINY_TASK, **extra), methods, seed=0,
                   device=torch.device("cpu"), budget=Budget(steps=2),
                   log=lambda step, m: logged.append(dict(m)))
        return [m for m in logged if "train/policy_loss" in m]

    held = run(kl_coef=0.5)
    assert len(held) == 2
    assert all(0.0 <= m["train/kl_ref"] < 0.5 for m in held)
    assert all("train/kl_ref" not in m for m in run())
