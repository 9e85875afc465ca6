"""`workbench credit`: the Monte Carlo ground-truth study of step advantages
(workbench/credit/). A tiny spec runs end to end and writes a figure, a table and provenance
with sane values; its Monte Carlo advantages recover the exact ones (dynamic programming,
``ground_truth.exact_advantages``); the checkpoint is the policy `workbench run keydoor` trains;
spo_chain gets the training loop's Monte Carlo values, and a tree estimator is measured on the
steps of Tree-GRPO's trees; bad specs stop with one message and exit 2, writing nothing."""

from __future__ import annotations

import csv
import hashlib
import json
import math

import numpy as np
import pytest
import torch
import yaml
from scipy import stats as scipy_stats

from workbench.cli import main as cli
from workbench.common import seeds
from workbench.common.validation import SpecError
from workbench.credit import measures
from workbench.credit import plan as credit_plan
from workbench.credit.checkpoint import held_out, memo_policy, train_checkpoint
from workbench.credit.sampling import sample_group, sample_groups, split_half_reliability
from workbench.testbeds import Budget
from workbench.testbeds.agent.episodes import mc_values_of
from workbench.testbeds.agent.ground_truth import exact_advantages
from workbench.testbeds.agent.keydoor import KeyDoor
from workbench.testbeds.agent.task import KeyDoorTask

# tree_grpo's trees: 2 per instance of 1 + 3 leaves each, G / 2 of them kept
TINY_TASK = {"name": "keydoor", "params": {
    "size": 5, "max_steps": 20, "hidden": 16, "train_instances": 8, "eval_instances": 2,
    "instances_per_update": 4, "group_size": 4, "epochs": 1, "minibatches": 1,
    "tree_count": 2, "tree_expansions": 3, "tree_rounds": 1}}
TINY = {
    "name": "tiny-credit",
    "task": TINY_TASK,
    "checkpoint": {"methods": {"advantage": "grpo"}, "updates": 2, "seed": 3},
    "estimators": ["grpo", "rloo", "gigpo",
                   {"name": "gigpo", "label": "gigpo-std", "fixed": {"mode": "mean_std_norm"}},
                   "spo_chain", "tree_grpo"],
    "group_sizes": [2, 8],
    "continuations": [4, 8],
    "instances": 8,
    "steps_per_instance": 3,
    "resamples": 100,
}
CPU = torch.device("cpu")


def _write(tmp_path, document, name="credit.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


def _rows(folder):
    with (folder / "table.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_a_tiny_spec_writes_the_figure_table_and_provenance_with_sane_values(tmp_path, capsys):
    spec_path = _write(tmp_path, TINY)
    out = tmp_path / "out"
    assert cli.main(["credit", str(spec_path), "--out", str(out), "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert str(out / "figure.png") in printed and str(out / "table.csv") in printed
    names = {p.name for p in out.iterdir()}
    assert names == {"figure.png", "figure.pdf", "figure.json", "table.csv", "table.md",
                     "table.json", "provenance.json"}
    assert (out / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    rows = _rows(out)
    labels = ["grpo", "rloo", "gigpo", "gigpo-std", "spo_chain", "tree_grpo"]
    assert sorted((r["estimator"], int(r["G"]), int(r["N"])) for r in rows) == sorted(
        (e, g, n) for e in labels for g in (2, 8) for n in (4, 8))
    correlated = 0
    for row in rows:
        assert int(row["steps"]) == 8 * 3 and int(row["instances"]) == 8
        for metric in measures.METRICS:
            point, low, high = (float(row[metric + end] or "nan") for end in ("", "_low",
                                                                              "_high"))
            if metric in ("spearman", "sign_agreement") and math.isnan(point):
                # an estimator that gave every sampled step one value (GRPO where every
                # group's rollouts ended alike): no rank correlation, and no interval
                # (and no sign to agree with where every A_MC is 0)
                assert math.isnan(low) and math.isnan(high)
                continue
            assert low <= point <= high, (row["estimator"], row["G"], row["N"], metric)
        if row["spearman"]:
            assert -1.0 <= float(row["spearman"]) <= 1.0
            correlated += 1
        assert 0.0 <= float(row["sign_agreement"] or 0.5) <= 1.0
        assert 0.0 <= float(row["zero_share"]) <= 1.0
        assert float(row["variance"]) >= 0.0 and float(row["mc_se"]) > 0.0
        assert 0.0 <= float(row["mc_reliability"] or 0.5) <= 1.0
    assert correlated >= len(rows) // 2
    # each estimator on the steps of the sampler it trains with; one step's MC advantage does
    # not depend on the estimator: the rows of one (G, N, sampler) share it
    assert {r["estimator"] for r in rows if r["sampler"] == "tree"} == {"tree_grpo"}
    by_cell = {}
    for row in rows:
        by_cell.setdefault((row["G"], row["N"], row["sampler"]), set()).add(row["mc_se"])
    assert all(len(v) == 1 for v in by_cell.values()) and len(by_cell) == 2 * 2 * 2
    # more continuations, a smaller standard error of the same steps' MC advantage
    for g in ("2", "8"):
        for sampler in ("independent", "tree"):
            assert (float(by_cell[(g, "8", sampler)].pop())
                    < float(by_cell[(g, "4", sampler)].pop()))
    # the cost: each sampler's rows, and spo_chain's continuations on top of them
    cost = {(r["estimator"], r["G"]): int(r["env_steps"]) for r in rows}
    for g in ("2", "8"):
        assert cost[("grpo", g)] == cost[("gigpo", g)] > 0 and cost[("tree_grpo", g)] > 0
        assert cost[("spo_chain", g)] > cost[("grpo", g)]

    markdown = (out / "table.md").read_text().splitlines()
    assert len(markdown) == 2 + len(rows) and "Spearman" in markdown[0]

    record = json.loads((out / "provenance.json").read_text())
    assert record["spec"]["sha256"] == hashlib.sha256(spec_path.read_bytes()).hexdigest()
    assert record["spec"]["checked"]["group_sizes"] == [2, 8]
    assert len(record["code"]["git.commit"]) == 40 and record["code"]["modules"]
    modules = record["code"]["modules"]  # every module the study imports, hashed
    assert {"workbench.credit.sampling", "methods.advantage.gigpo",
            "workbench.testbeds.agent.ground_truth"} <= set(modules)
    assert record["libraries"]["torch"] == torch.__version__
    assert record["seeds"]["study"] == 0 and record["checkpoint"]["seed"] == 3
    assert record["checkpoint"]["methods"]["advantage"]["name"] == "grpo"
    assert record["estimators"]["gigpo-std"]["params"]["mode"] == "mean_std_norm"
    assert record["estimators"]["tree_grpo"]["sampler"] == "tree"
    assert record["estimators"]["spo_chain"]["sampler"] == "independent"
    assert set(record["samplers"]) == {"independent", "tree"}
    assert record["groups"]["8"]["tree"]["played_steps"] == cost[("tree_grpo", "8")]
    assert record["groups"]["8"]["independent"]["env_steps"]["spo_chain"] == cost[
        ("spo_chain", "8")]
    assert "mc_values continuations of spo_chain" in record["seeds"]["streams"]
    beside = json.loads((out / "table.json").read_text())
    assert beside["spec_sha256"] == record["spec"]["sha256"]

    # the same spec gives the same table (every draw from a named stream)
    again = tmp_path / "again"
    assert cli.main(["credit", str(spec_path), "--out", str(again), "--device", "cpu"]) == 0
    assert (again / "table.csv").read_text() == (out / "table.csv").read_text()


def test_monte_carlo_advantages_of_sampled_steps_recover_the_exact_ones(tmp_path):
    """The study's path to A_MC (steps sampled from rollouts, states read back from their
    observations, continuations of several instances in one batch from the policy's table)
    against dynamic programming with the network itself as the policy."""
    document = {**TINY, "checkpoint": {"updates": 0, "seed": 1}, "estimators": ["grpo"],
                "group_sizes": [3], "continuations": [2000], "instances": 3,
                "steps_per_instance": 5}
    document["task"] = {"name": "keydoor", "params": {**TINY_TASK["params"], "max_steps": 8}}
    plan = credit_plan.check(document, "test")
    policy = train_checkpoint(plan, CPU).policy
    layouts = held_out(plan)
    sample = sample_group(plan, policy, layouts, 3, CPU)

    def probs_of(env):
        with torch.no_grad():
            return policy.distribution(env.observe()).probs

    checked, largest = 0, 0.0
    for i, layout in enumerate(layouts):
        value, q = exact_advantages(layout, probs_of, 8)
        for (r, c, key, t, done), a, estimate, se in zip(
                sample.states[i], sample.actions[i], sample.monte_carlo[2000][i],
                sample.standard_error[2000][i], strict=True):
            assert done == 0 and 0 <= t < 8
            exact = q[t, key, r, c, a] - value[t, key, r, c]
            # 3 / N: where no continuation reached the goal (se = 0), the rule of three bounds
            # the success probability they could miss
            assert abs(estimate - exact) <= 4 * se + 3 / 2000, (i, r, c, key, t, a, exact,
                                                                 estimate, se)
            checked += 1
            largest = max(largest, abs(exact))
    assert checked == 15 and largest > 0.01  # advantages worth recovering
    assert sample.reliability[2000] > 0.8  # 2 x 1000 continuations agree on the ranks
    # the continuations' policy, run once per observed state, is the network's own
    env = KeyDoor([layouts[i % 3] for i in range(60)], 8, instance_ids=[i % 3 for i in range(60)])
    draws, memo = torch.Generator().manual_seed(0), memo_policy(policy, layouts, KeyDoor, 8, CPU)
    for _ in range(5):  # rows in many states, several rows in each, states seen before
        assert torch.allclose(memo(env), probs_of(env), atol=1e-6)
        env.step(torch.randint(0, 4, (60,), generator=draws))


def test_the_checkpoint_is_the_policy_workbench_run_trains():
    plan = credit_plan.check(TINY, "test")
    trained = train_checkpoint(plan, CPU).metrics
    params = plan.task_params
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeds.int_seed(3, "global"))
        ran = KeyDoorTask().run(params, plan.checkpoint_methods, seed=3, device=CPU,
                                budget=Budget(steps=2), log=lambda step, values: None)
    same = {k for k in ran if not k.startswith("time/")}
    assert {k: trained[k] for k in same} == {k: ran[k] for k in same}
    assert trained["steps"] == 2


def test_the_measures_agree_with_their_definitions():
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, size=(6, 4)).astype(float)  # ties
    y = x + rng.normal(size=(6, 4))
    found = measures.measure(x, y, 0.9, 400, np.random.default_rng(1))
    rho = scipy_stats.spearmanr(x.ravel(), y.ravel()).statistic
    assert found["spearman"][0] == pytest.approx(rho, abs=1e-12)
    assert found["bias"][0] == pytest.approx(np.mean(x - y))
    assert found["variance"][0] == pytest.approx(np.var(x - y, ddof=1))
    moved = y != 0
    assert found["sign_agreement"][0] == pytest.approx(
        np.mean(np.sign(x)[moved] == np.sign(y)[moved]))
    # steps where A_MC is 0 have no sign to agree with; an Â of 0 is a miss elsewhere
    agreement = measures.sign_agreement(np.array([[0.0, 1.0, -2.0, 0.0, 3.0]]),
                                        np.array([[0.0, 0.5, 1.0, 2.0, 0.0]]))
    assert agreement.tolist() == [1 / 3]
    for point, low, high in found.values():
        assert low <= point <= high and low < high
    ranks = measures.average_ranks(np.array([[3.0, 1.0, 3.0, 2.0]]))
    assert ranks.tolist() == [[3.5, 1.0, 3.5, 2.0]]
    flat = measures.measure(np.zeros((4, 2)), y[:4, :2], 0.9, 100, np.random.default_rng(2))
    assert math.isnan(flat["spearman"][0])  # no credit at all: no rank correlation
    assert flat["sign_agreement"][0] == 0.0


def test_split_half_reliability_is_one_for_agreeing_halves_and_small_for_noise():
    rng = np.random.default_rng(0)
    steps = rng.normal(size=(200, 1))
    q = np.repeat(steps, 8, axis=1)  # every continuation returns the step's own value
    v = np.zeros((200, 8))
    assert split_half_reliability(q, v) == pytest.approx(1.0)
    noise = rng.normal(size=(200, 8))  # no step effect: halves independent
    assert split_half_reliability(noise, v) < 0.3
    # a signal as large as one continuation's noise: r of the halves' means about 4 / 5
    mixed = np.repeat(steps, 8, axis=1) + rng.normal(size=(200, 8))
    assert 0.75 < split_half_reliability(mixed, v) < 0.97


BAD = [
    ({"estimators": ["grpoo"]}, "estimators[0]", "did you mean 'grpo'?"),
    ({"estimators": ["grpo", "gae"]}, "estimators[1]", "value head"),
    ({"group_sizes": [0, 4]}, "group_sizes", "[1, 1024]"),
    ({"continuations": [8, 8]}, "continuations", "distinct"),
    ({"instance": 4}, "instance", "did you mean 'instances'?"),
    ({"task": {"name": "keydoor", "params": {"sizee": 5}}}, "task.params.sizee", "allowed"),
    ({"task": {"name": "cartpole"}}, "task.name", "allowed: keydoor, toolcalc"),
    # Tree-GRPO's trees of the task's shape (2 trees of up to 1 + 3 leaves) give G = 2 .. 8
    ({"group_sizes": [2, 16]}, "group_sizes", "at most tree_count x (1 + tree_rounds x "
                                              "tree_expansions) = 8, or another"),
    ({"group_sizes": [3]}, "group_sizes", "multiple of tree_count"),
    ({"checkpoint": {"methods": {"advantage": {"name": "grpo", "fixed": {"nope": 1}}}}},
     "checkpoint.methods.advantage.fixed.nope", "allowed"),
    ({"checkpoint": {"updates": -1}}, "checkpoint.updates", "greater than or equal to 0"),
    ({"instances": 100_000, "continuations": [100_000]}, "continuations", "at most"),
]


@pytest.mark.parametrize("change, key, allowed", BAD, ids=[b[1] for b in BAD])
def test_a_bad_spec_exits_2_naming_the_file_and_key_and_writes_nothing(tmp_path, capsys,
                                                                        change, key, allowed):
    spec_path = _write(tmp_path, {**TINY, **change})
    out = tmp_path / "out"
    assert cli.main(["credit", str(spec_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(spec_path) in err and key in err and allowed in err, err
    assert "Traceback" not in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["credit.yaml"]


def test_every_problem_at_once_and_a_folder_that_is_not_a_report_is_kept(tmp_path, capsys):
    spec_path = _write(tmp_path, {**TINY, "estimators": ["grpoo", "gae"], "instance": 2})
    assert cli.main(["credit", str(spec_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "estimators[0]" in err and "instance" in err
    good = _write(tmp_path, TINY, "good.yaml")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert cli.main(["credit", str(good), "--out", str(mine)]) == 2
    assert "--out" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    # a folder that cannot be made is refused before the study runs, not after
    assert cli.main(["credit", str(good), "--out", str(mine / "notes.txt" / "out")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "cannot be written" in err and "Traceback" not in err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_the_command_is_listed_and_the_shipped_spec_checks():
    assert "credit" in cli.build_parser().format_help()
    from tests.conftest import ROOT

    for task in ("keydoor", "toolcalc"):
        shipped = credit_plan.load(ROOT / "reports" / f"credit-{task}.yaml")
        assert shipped.name == f"credit-{task}" and shipped.spec.task.name == task
        assert len(shipped.estimators) >= 6


def test_a_checkpoint_with_a_value_head_lets_gae_be_measured():
    """The checkpoint gets a value head where its advantage method reads values; GAE then
    reads the head's values of the study's rollouts (a GRPO checkpoint refuses it: BAD)."""
    document = {**TINY, "checkpoint": {"methods": {"advantage": "gae"}, "updates": 1},
                "estimators": ["gae", "grpo"], "group_sizes": [3], "instances": 3}
    plan = credit_plan.check(document, "test")
    assert plan.critic
    checkpoint = train_checkpoint(plan, CPU)
    assert checkpoint.policy.critic is not None
    sample = sample_group(plan, checkpoint.policy, held_out(plan), 3, CPU)
    gae = sample.estimates["gae"]
    assert gae.shape == (3, 3) and np.isfinite(gae).all()
    assert (np.abs(gae) > measures.ZERO).all()  # values make every step's credit its own


def test_the_tool_use_puzzle_is_measured_too(tmp_path):
    """Any agent testbed whose states restore: the tool-use puzzle's continuations start from
    its own recorded states (value, calls made), and more of them shrink A_MC's error."""
    document = {**TINY, "task": {"name": "toolcalc", "params": {
        "max_value": 12, "tools": 3, "max_operand": 4, "max_optimal": 3, "max_steps": 6,
        "hidden": 16, "train_instances": 8, "eval_instances": 2, "instances_per_update": 4,
        "group_size": 4, "epochs": 1, "minibatches": 1}},
        "estimators": ["grpo", "gigpo"], "group_sizes": [4], "continuations": [4, 64]}
    plan = credit_plan.check(document, "test")
    checkpoint = train_checkpoint(plan, CPU)
    sample = sample_group(plan, checkpoint.policy, held_out(plan), 4, CPU)
    assert sample.states.shape == (8, 3, 3)  # value, calls made, ended
    assert (sample.states[..., 2] == 0).all() and (sample.states[..., 1] < 6).all()
    for n in (4, 64):
        assert np.isfinite(sample.monte_carlo[n]).all()
        assert (np.abs(sample.monte_carlo[n]) <= 1.0).all()
    assert sample.standard_error[64].mean() < sample.standard_error[4].mean()


def test_spo_chain_gets_the_loop_s_monte_carlo_values_and_is_measured():
    """spo_chain's mc_values come as the training loop gives them (``episodes.mc_values_of``: its
    cut points' states restored and played on by the checkpoint), from its own stream; their
    continuations count in its env_steps, and the other estimators' draws stay as they were."""
    document = {**TINY, "estimators": ["grpo", "spo_chain"], "group_sizes": [4],
                "continuations": [4], "instances": 4}
    plan = credit_plan.check(document, "test")
    assert [e.sampler for e in plan.estimators] == ["independent", "independent"]
    policy = train_checkpoint(plan, CPU).policy
    layouts = held_out(plan)
    sample = sample_group(plan, policy, layouts, 4, CPU)
    episodes, method = sample.episodes, plan.estimators[1].method
    rows, steps = sample.rows.ravel(), sample.steps.ravel()
    assert sample.played == int(episodes.mask.sum()) == sample.env_steps["grpo"]
    groups = torch.arange(4).repeat_interleave(4)
    values, continued = mc_values_of(
        method, episodes, groups, layouts, [0, 1, 2, 3], policy,
        seeds.torch_generator(0, "rollouts", 4, 4, 1), max_steps=20, device=CPU,
        make_env=KeyDoor)
    named = method.value_request(mask=episodes.mask, old_log_probs=episodes.log_probs).points
    assert bool(named.any()) and continued > 0
    assert sample.env_steps["spo_chain"] == sample.played + continued
    # mean returns of the continuations from the named states (keydoor: 0 or 1 each)
    assert ((values[named] >= 0) & (values[named] <= 1)).all() and (values[~named] == 0).all()
    inputs = {k: v for k, v in episodes.advantage_inputs(groups).items()
              if k in method.requirements(method.params)}
    with_values, _ = method.compute(**inputs, mc_values=values)
    without, _ = method.compute(**inputs, mc_values=torch.zeros_like(values))
    measured = sample.estimates["spo_chain"].ravel()
    assert np.array_equal(measured, with_values[rows, steps].double().numpy())
    assert not np.array_equal(measured, without[rows, steps].double().numpy())
    assert np.isfinite(measured).all()
    # the independent rows, their steps and their A_MC do not depend on spo_chain being there
    alone = sample_group(credit_plan.check({**document, "estimators": ["grpo"]}, "test"),
                         policy, layouts, 4, CPU)
    assert np.array_equal(alone.estimates["grpo"], sample.estimates["grpo"])
    assert np.array_equal(alone.monte_carlo[4], sample.monte_carlo[4])


def test_a_tree_estimator_is_measured_on_the_steps_of_its_trees():
    """tree_grpo (it reads tree_ids) gets Tree-GRPO's trees of the task's shape: 2 trees per
    instance, G / 2 leaves kept from each, rows sharing their prefix steps; K steps per
    instance drawn from those rows get their own A_MC; the independent rows stay the others'."""
    document = {**TINY, "estimators": ["grpo", "tree_grpo"], "group_sizes": [6],
                "continuations": [4], "instances": 4}
    plan = credit_plan.check(document, "test")
    assert [e.sampler for e in plan.estimators] == ["independent", "tree"]
    policy = train_checkpoint(plan, CPU).policy
    layouts = held_out(plan)
    independent, tree = sample_groups(plan, policy, layouts, 6, CPU)
    assert (independent.sampler, tree.sampler) == ("independent", "tree")
    assert set(independent.estimates) == {"grpo"} and set(tree.estimates) == {"tree_grpo"}
    assert independent.episodes.tree_ids is None  # trees of one leaf
    episodes = tree.episodes
    assert episodes.tree_ids is not None and len(episodes.tree_ids) == 4 * 6
    # 8 trees of 3 kept leaves, an instance's in its 6 rows
    assert torch.bincount(episodes.tree_ids).tolist() == [3] * 8
    assert (episodes.tree_ids.view(4, 6) // 2 == torch.arange(4)[:, None]).all()
    valid = episodes.mask != 0
    nodes = episodes.node_ids[valid]
    assert len(nodes.unique()) < len(nodes)  # shared prefixes: a step in several rows
    assert tree.played >= len(nodes.unique())  # each played once, pruned branches too
    assert tree.env_steps == {"tree_grpo": tree.played}
    # the sampled steps are steps of those rows, K of each instance's
    rows, steps = tree.rows.ravel(), tree.steps.ravel()
    assert valid[rows, steps].all()
    assert (rows // 6 == np.repeat(np.arange(4), 3)).all()
    assert np.array_equal(episodes.states[rows, steps].numpy(),
                          tree.states.reshape(len(rows), -1))
    method = plan.estimators[1].method
    groups = torch.arange(4).repeat_interleave(6)
    advantages, _ = method.compute(**{k: v for k, v in episodes.advantage_inputs(groups).items()
                                      if k in method.requirements(method.params)})
    assert np.array_equal(tree.estimates["tree_grpo"].ravel(),
                          advantages[rows, steps].double().numpy())
    assert np.isfinite(tree.monte_carlo[4]).all() and tree.standard_error[4].shape == (4, 3)
    # the independent rows do not depend on tree_grpo being there
    alone = sample_group(credit_plan.check({**document, "estimators": ["grpo"]}, "test"),
                         policy, layouts, 6, CPU)
    assert np.array_equal(alone.monte_carlo[4], independent.monte_carlo[4])
    assert np.array_equal(alone.estimates["grpo"], independent.estimates["grpo"])


def test_spo_tree_is_measured_on_the_steps_of_its_own_segment_trees():
    """spo_tree (its reference grows SPO-tree's trees) gets one tree per instance branching
    2 x 2 every 3 steps (at most G = 4 leaves); its K steps per instance come from those rows;
    a G its segment_branching cannot give is refused by name."""
    task = {"name": "keydoor", "params": {**TINY_TASK["params"], "segment_branching": [2, 2],
                                          "segment_length": 3}}
    document = {**TINY, "task": task, "estimators": ["grpo", "spo_tree"], "group_sizes": [4],
                "continuations": [4], "instances": 4}
    plan = credit_plan.check(document, "test")
    assert [e.sampler for e in plan.estimators] == ["independent", "segments"]
    policy = train_checkpoint(plan, CPU).policy
    layouts = held_out(plan)
    _, segments = sample_groups(plan, policy, layouts, 4, CPU)
    episodes = segments.episodes
    assert len(episodes.tree_ids.unique()) == 4 and len(episodes.groups) <= 16
    assert torch.equal(episodes.groups, episodes.tree_ids)  # one tree per instance
    rows = segments.rows.ravel()
    picked = episodes.groups[torch.as_tensor(rows)].numpy()
    assert (picked == np.repeat(np.arange(4), 3)).all()
    method = plan.estimators[1].method
    advantages, _ = method.compute(**{k: v for k, v in episodes.advantage_inputs(
        episodes.groups).items() if k in method.requirements(method.params)})
    assert np.array_equal(segments.estimates["spo_tree"].ravel(),
                          advantages[rows, segments.steps.ravel()].double().numpy())
    with pytest.raises(SpecError) as raised:
        credit_plan.check({**document, "group_sizes": [4, 8]}, "test")
    assert "G = 8 for spo_tree" in str(raised.value) and "segment_branching" in str(
        raised.value)
