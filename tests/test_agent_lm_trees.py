"""Tree sampling on the language-model turn loop: rows grown by restoring a shared turn's state
replay exactly from the start, shared turns are kept once or once per row, and the tree
estimators run on the task while value-reading ones are refused under trees."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import ROOT, run_cli
from workbench import registry
from workbench.common import seeds
from workbench.testbeds import Budget, get_task
from workbench.testbeds.agent import keydoor
from workbench.testbeds.agent.environment import NO_OP
from workbench.testbeds.agent_lm.settings import TurnSettings
from workbench.testbeds.agent_lm.trees import play_turn_trees
from workbench.testbeds.agent_lm.turns import prompt_text
from workbench.testbeds.rlvr.backend_factory import make_backend
from workbench.testbeds.rlvr.model import ModelConfig, build_model
from workbench.testbeds.rlvr.tokenizer import build_char_tokenizer

MAX_STEPS = 6
TINY_TASK = {"train_instances": 8, "eval_instances": 4, "instances_per_update": 2,
             "group_size": 4, "max_steps": MAX_STEPS, "hidden": 32, "layers": 1, "heads": 2,
             "intermediate": 64, "warmup_steps": 10, "warmup_target": None,
             "warmup_batch": 16, "eval_every": 2}


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def tiny():
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    return build_model(ModelConfig(hidden=32, layers=1, heads=2, intermediate=64),
                       tokenizer), tokenizer


def _grow(tiny, sampler: str, shared: str):
    model, tokenizer = tiny
    layouts = [keydoor.generate(0, 0, i, 6, 0.1) for i in range(3)]
    settings = TurnSettings(group_size=4, sampling="tree" if sampler == "expansion"
                            else "segments", tree_count=2, tree_expansions=2, tree_rounds=1,
                            segment_branching=[2, 2], segment_length=2,
                            tree_shared_steps=shared)
    backend = make_backend("hf", model, tokenizer, None, torch.device("cpu"))
    turns, groups, played = play_turn_trees(
        sampler, settings, layouts, [10, 11, 12], model, tokenizer, backend,
        seed_of=lambda call, turn: seeds.int_seed(0, "rollouts", call, turn),
        branches=seeds.numpy_generator(0, "branches", 0), max_steps=MAX_STEPS,
        device=torch.device("cpu"), make_env=keydoor.KeyDoor)
    return layouts, turns, groups, played


@pytest.mark.parametrize("sampler", ["expansion", "segments"])
@pytest.mark.parametrize("shared", ["once", "per_leaf"])
def test_every_row_replays_from_the_start_to_its_prompts_rewards_and_end(tiny, sampler,
                                                                         shared):
    """Continuing a shared prefix is restoring its state: each row's turns, played from the
    instance's start with the row's own action texts, see the same prompts and rewards."""
    _, tokenizer = tiny
    layouts, turns, groups, _ = _grow(tiny, sampler, shared)
    tokens = turns.tokens
    for row in range(len(groups)):
        env = keydoor.KeyDoor([layouts[int(groups[row])]], MAX_STEPS)
        env.reset()
        for t in range(int(turns.lengths[row])):
            flat = int(turns.index[row, t])
            prompt = tokenizer([prompt_text(env, 0)])["input_ids"][0]
            width = tokens.prompt_width
            assert tokens.input_ids[flat, width - len(prompt):width].tolist() == prompt
            response = tokens.input_ids[flat, width:][tokens.response_mask[flat] != 0]
            text = tokenizer.decode(response.tolist(), skip_special_tokens=True)
            action = env.parse_action(0, text)
            moved = env.step(torch.tensor([NO_OP if action is None else action]))
            assert float(moved.reward[0]) == float(turns.rewards[row, t])
        assert bool(env.done[0])  # the row's last turn ended its episode: a leaf
        assert bool(turns.success[row]) == bool(turns.terminated[row].any())


@pytest.mark.parametrize("sampler", ["expansion", "segments"])
def test_shared_turns_are_kept_once_or_once_per_row(tiny, sampler):
    _, once, _, played = _grow(tiny, sampler, "once")
    _, per_leaf, _, played_again = _grow(tiny, sampler, "per_leaf")
    valid = once.mask != 0
    nodes = once.node_ids[valid]
    assert played == played_again >= len(torch.unique(nodes))
    assert len(once.tokens.input_ids) == len(torch.unique(nodes)) < int(valid.sum())
    assert len(per_leaf.tokens.input_ids) == int(valid.sum())
    # a turn shared by several rows: one flat turn (once), or identical copies (per_leaf)
    for node in torch.unique(nodes).tolist():
        where = (once.node_ids == node) & valid
        assert len(torch.unique(once.index[where])) == 1
        copies = per_leaf.tokens.input_ids[per_leaf.index[where]]
        assert bool((copies == copies[0]).all())
    # the advantage of a shared flat turn is the mean of its rows'
    table = torch.arange(valid.numel(), dtype=torch.float32).view(valid.shape)
    flat = once.per_turn(table)
    node = int(torch.mode(nodes).values)
    where = (once.node_ids == node) & valid
    assert float(flat[once.index[where][0]]) == pytest.approx(float(table[where].mean()))


@pytest.mark.parametrize("advantage, extra", [
    ("tree_grpo", {"sampling": "auto", "tree_expansions": 2}),
    ("spo_tree", {"sampling": "auto", "segment_branching": [2, 2]}),
])
def test_the_tree_estimators_run_on_the_turn_loop(advantage, extra):
    task = get_task("keydoor-lm")
    methods = {slot: registry.get(slot, m)() for slot, m in task.default_methods.items()}
    methods["advantage"] = registry.get("advantage", advantage)()
    logged: dict[int, dict] = {}
    out = task().run(task.Params(**{**TINY_TASK, **extra}), methods, seed=0,
                     device=torch.device("cpu"), budget=Budget(steps=2),
                     log=lambda step, m: logged.setdefault(step, m))
    assert out["steps"] == 2 and not out["diverged"]
    assert logged[2]["cost/env_steps"] > logged[1]["cost/env_steps"] > 0


def test_a_value_reading_method_under_tree_sampling_is_refused_before_it_runs(tmp_path):
    spec = (ROOT / "sweeps" / "agent-lm-keydoor.yaml").read_text()
    assert "group_size: 4, sampling: auto" in spec
    path = tmp_path / "bad.yaml"
    path.write_text(spec.replace("group_size: 4, sampling: auto", "group_size: 4, sampling: tree"))
    out = run_cli("sweep", path, "--storage", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "task.params.sampling" in out.stderr and "turn_gae" in out.stderr
    assert not (tmp_path / "x.db").exists()
