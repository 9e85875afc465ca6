"""The policy-gradient bias of ``workbench credit`` (``credit.gradient``): the exact gradient
by dynamic programming is the derivative of the exact return; the exact advantage gives a
gradient whose bias interval covers 0 while a deliberately biased one (negative advantages
dropped) is told apart; the statistics follow their formulas; and a credit spec with
``gradient_batches`` writes the gradient table and figure, where the unbiased estimators
(undiscounted reward-to-go, RLOO) cover 0 and Dr. GRPO's scale is its (G - 1) / G."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
import yaml

from workbench.cli import main as cli
from workbench.common.validation import SpecError
from workbench.credit import gradient
from workbench.credit import plan as credit_plan
from workbench.testbeds.agent.episodes import play
from workbench.testbeds.agent.ground_truth import exact_advantages_over
from workbench.testbeds.agent.policy import Policy
from workbench.testbeds.agent.task import KeyDoorTask, ToolCalcTask

MAX_STEPS = 20


def _setup(task, count=4, **params):
    p = task.Params(**params)
    instances = [task.instance(p, 1, i) for i in range(count)]
    probe = task.environment(instances[:1], MAX_STEPS)
    torch.manual_seed(0)
    return instances, Policy(probe.obs_dim, probe.n_actions, 16, p.layers)


def _exact_return(policy, instances, make_env):
    return np.mean([gradient.instance_tables(i, policy, MAX_STEPS, make_env).value[0, 0]
                    for i in instances])


@pytest.mark.parametrize("task", [KeyDoorTask(), ToolCalcTask()], ids=["keydoor", "toolcalc"])
def test_the_exact_gradient_is_the_derivative_of_the_exact_return(task):
    extra = {"size": 5} if task.name == "keydoor" else {}
    instances, policy = _setup(task, hidden=16, **extra)
    g, tables = gradient.exact_gradient(policy, instances, MAX_STEPS, task.environment)

    def probs_of(env):
        with torch.no_grad():
            return policy.distribution(env.observe()).probs

    value, q = exact_advantages_over(instances[0], tables[0].states, probs_of, MAX_STEPS,
                                     task.environment)
    # (the reference takes pi in float32)
    assert np.abs(value - tables[0].value).max() < 1e-6 and np.abs(q - tables[0].q).max() < 1e-6
    # d_t is a distribution that leaks only into the goal
    assert np.all(tables[0].visits.sum(axis=1) <= 1 + 1e-12)
    assert abs(tables[0].visits[0].sum() - 1) < 1e-12
    # central differences of J along g and along a random direction
    rng = np.random.default_rng(0)
    for direction in (g / np.linalg.norm(g), rng.standard_normal(g.size)):
        direction = direction / np.linalg.norm(direction)
        eps, moved = 1e-3, []
        for sign in (1, -1):
            offset = 0
            with torch.no_grad():
                for p in gradient.parameters(policy):
                    step = direction[offset:offset + p.numel()] * eps * sign
                    p += torch.as_tensor(step, dtype=p.dtype).view_as(p)
                    offset += p.numel()
            moved.append(_exact_return(policy, instances, task.environment))
            with torch.no_grad():
                offset = 0
                for p in gradient.parameters(policy):
                    step = direction[offset:offset + p.numel()] * eps * sign
                    p -= torch.as_tensor(step, dtype=p.dtype).view_as(p)
                    offset += p.numel()
        slope = (moved[0] - moved[1]) / (2 * eps)
        assert abs(slope - g @ direction) < 2e-3 * np.linalg.norm(g) + 1e-6


def test_the_exact_advantage_is_unbiased_and_a_biased_one_is_told_apart():
    task = KeyDoorTask()
    instances, policy = _setup(task, hidden=16, size=5)
    g, tables = gradient.exact_gradient(policy, instances, MAX_STEPS, task.environment)
    group, exact, positive = 8, [], []
    rows = [i for i in range(len(instances)) for _ in range(group)]
    generator = torch.Generator().manual_seed(1)
    for _ in range(40):
        env = task.environment([instances[i] for i in rows], MAX_STEPS, instance_ids=rows)
        ep = play(env, policy, generator)
        a = gradient.exact_step_advantages(ep.states, ep.actions, ep.mask, rows, tables,
                                           task.environment, instances, MAX_STEPS)
        assert torch.all(a[ep.mask == 0] == 0) and torch.any(a != 0)
        exact.append(gradient.batch_gradient(policy, ep.obs, ep.actions, ep.mask, a))
        positive.append(gradient.batch_gradient(policy, ep.obs, ep.actions, ep.mask,
                                                a.clamp(min=0)))
    rng = np.random.default_rng(0)
    unbiased = gradient.measure(np.stack(exact), g, 0.95, 1000, rng)
    biased = gradient.measure(np.stack(positive), g, 0.95, 1000, rng)
    _, low, high = unbiased["grad_rel_bias"]
    assert low <= 0.0 <= high and abs(unbiased["grad_rel_bias"][0]) < 0.15
    assert unbiased["grad_scale"][1] <= 1.0 <= unbiased["grad_scale"][2]
    assert unbiased["grad_cosine"][0] > 0.99
    assert biased["grad_rel_bias"][1] > 0.1  # the interval excludes 0
    assert biased["grad_scale"][2] < 1.0  # dropping the negative advantages shrinks it


def test_the_statistics_follow_their_formulas():
    truth = np.array([2.0, 0.0, 0.0])
    estimates = np.array([[4.0, 1.0, 0.0], [4.0, -1.0, 0.0], [5.0, 0.0, 1.0],
                          [3.0, 0.0, -1.0]])
    mean = estimates.mean(axis=0)  # (4, 0, 0): twice the truth
    spread = ((estimates - mean) ** 2).sum() / 3
    bias2 = (((mean - truth) ** 2).sum() - spread / 4) / 4.0
    found = gradient.statistics(estimates, np.ones((1, 4)), truth)
    assert found["grad_scale"][0] == pytest.approx(2.0)
    assert found["grad_cosine"][0] == pytest.approx(1.0)
    assert found["grad_rel_bias"][0] == pytest.approx(np.sqrt(bias2))
    # a weighting counts a batch twice: the same as listing it twice
    counts = np.array([[2.0, 0.0, 1.0, 1.0]])
    listed = estimates[[0, 0, 2, 3]]
    again = gradient.statistics(listed, np.ones((1, 4)), truth)
    for name, value in gradient.statistics(estimates, counts, truth).items():
        assert value[0] == pytest.approx(again[name][0], nan_ok=True)
    measured = gradient.measure(estimates, truth, 0.9, 200, np.random.default_rng(0))
    assert set(measured) == set(gradient.METRICS)
    with pytest.raises(ValueError):
        gradient.measure(estimates[:1], truth, 0.9, 200, np.random.default_rng(0))


SPEC = {
    "name": "tiny-gradient",
    "task": {"name": "keydoor", "params": {
        "size": 5, "max_steps": 20, "hidden": 16, "train_instances": 8, "eval_instances": 2,
        "instances_per_update": 4, "group_size": 4, "epochs": 1, "minibatches": 1}},
    "checkpoint": {"methods": {"advantage": "grpo"}, "updates": 2, "seed": 3},
    "estimators": ["grpo", "rloo", "dr_grpo",
                   {"name": "reward_to_go", "label": "rtg",
                    "fixed": {"gamma": 1.0, "bootstrap": False, "baseline": "none"}}],
    "group_sizes": [2, 8], "continuations": [4], "instances": 8, "steps_per_instance": 2,
    "resamples": 200, "gradient_batches": 40,
}


def test_a_credit_spec_with_gradient_batches_writes_the_gradient_table(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "out"
    assert cli.main(["credit", str(path), "--out", str(out), "--device", "cpu"]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"gradient.csv", "gradient.md", "gradient.png", "gradient.pdf",
            "gradient.json", "table.csv", "figure.png"} <= names
    with (out / "gradient.csv").open() as handle:
        rows = {(r["estimator"], int(r["G"])): r for r in csv.DictReader(handle)}
    assert set(rows) == {(e, g) for e in (gradient.EXACT, "grpo", "rloo", "dr_grpo", "rtg")
                         for g in (2, 8)}

    def interval(label, g, metric):
        row = rows[(label, g)]
        return tuple(float(row[metric + end]) for end in ("", "_low", "_high"))

    for g in (2, 8):
        for unbiased in (gradient.EXACT, "rtg", "rloo"):
            _, low, high = interval(unbiased, g, "grad_rel_bias")
            assert low <= 0.0 <= high, (unbiased, g)
        # Dr. GRPO's baseline counts the row itself: E[ĝ] = (G - 1) / G ∇J
        _, low, high = interval("dr_grpo", g, "grad_scale")
        assert low <= (g - 1) / g <= high and high < 1.0
    assert interval("grpo", 8, "grad_rel_bias")[1] > 0.0  # dividing by the group's std
    for (label, g), row in rows.items():  # the turn-count bias is measured for every row
        assert np.isfinite(interval(label, g, "grad_turn_bias")).all(), (label, g)
        assert 1.0 <= float(row["mean_turns"]) <= 20.0
    print({key: interval(*key, "grad_turn_bias") for key in rows})
    with (out / "table.csv").open() as handle:  # the step table is as without the gradient
        assert {r["estimator"] for r in csv.DictReader(handle)} == {"grpo", "rloo", "dr_grpo",
                                                                    "rtg"}


def test_one_gradient_batch_is_refused():
    with pytest.raises(SpecError, match="gradient_batches"):
        credit_plan.check(SPEC | {"gradient_batches": 1}, "spec.yaml")


def test_an_estimator_reading_the_reference_policy_is_refused():
    with pytest.raises(SpecError, match="ref_log_probs"):
        credit_plan.check(SPEC | {"estimators": ["grpo", "implicit_prm"]}, "spec.yaml")


# ------------------------------------------------------------------ the turn-count bias


def test_the_turn_count_tables_and_gradient_are_exact():
    task = KeyDoorTask()
    instances, policy = _setup(task, count=2, hidden=16, size=5)
    g, tables = gradient.exact_gradient(policy, instances, MAX_STEPS, task.environment)
    turns = gradient.turn_gradient(policy, instances, tables, MAX_STEPS, task.environment)
    for table in tables:
        # E[L] twice: V^L_0 of the start, and the mass still in play summed over the moves
        assert table.turns_value[0, 0] == pytest.approx(table.visits.sum(), rel=1e-12)
        assert 1.0 <= table.turns_value[0, 0] <= MAX_STEPS
        # the last move counts itself only
        assert np.all(table.turns_q[-1] == 1.0)

    def expected_turns():
        return np.mean([gradient.instance_tables(i, policy, MAX_STEPS, task.environment)
                        .turns_value[0, 0] for i in instances])

    direction = np.random.default_rng(2).standard_normal(turns.size)
    direction /= np.linalg.norm(direction)
    eps, moved = 1e-3, []
    for sign in (1, -1):
        _shift(policy, direction * eps * sign)
        moved.append(expected_turns())
        _shift(policy, -direction * eps * sign)
    slope = (moved[0] - moved[1]) / (2 * eps)
    assert abs(slope - turns @ direction) < 2e-3 * np.linalg.norm(turns) + 1e-6
    # the turn count's gradient is not the return's (else the measure is undefined)
    assert gradient.turn_direction(g, turns) is not None


def _shift(policy, step):
    offset = 0
    with torch.no_grad():
        for p in gradient.parameters(policy):
            p += torch.as_tensor(step[offset:offset + p.numel()], dtype=p.dtype).view_as(p)
            offset += p.numel()


def test_the_turn_count_bias_follows_its_formula():
    # truth g = (2, 0, 0), turn-count gradient ∇T = (1, 1, 0): u = ∇T - (2 / 4) g = (0, 1, 0)
    truth, turns = np.array([2.0, 0.0, 0.0]), np.array([1.0, 1.0, 0.0])
    assert gradient.turn_direction(truth, turns) == pytest.approx([0.0, 1.0, 0.0])
    # a uniformly scaled truth (Dr. GRPO's (G - 1) / G) has no turn-count bias
    scaled = np.array([[3.0, 0.0, 0.0], [5.0, 0.0, 0.0]])
    found = gradient.statistics(scaled, np.ones((1, 2)), truth, turns)
    assert found["grad_turn_bias"][0] == pytest.approx(0.0)
    assert found["grad_scale"][0] == pytest.approx(2.0)
    # E[ĝ] = g + 0.25 ∇T = (2.25, 0.25, 0): <(2.25, 0.25, 0), (0, 1, 0)> / 1 = 0.25
    paid = np.array([[2.5, 0.5, 1.0], [2.0, 0.0, -1.0]])
    found = gradient.statistics(paid, np.ones((1, 2)), truth, turns)
    assert found["grad_turn_bias"][0] == pytest.approx(0.25)
    # the bootstrap weighting: batch 0 twice -> mean (2.5, 0.5, 1): 0.5
    found = gradient.statistics(paid, np.array([[2.0, 0.0]]), truth, turns)
    assert found["grad_turn_bias"][0] == pytest.approx(0.5)
    # without ∇T, or with ∇T along g, it is not defined
    assert np.isnan(gradient.statistics(paid, np.ones((1, 2)), truth)["grad_turn_bias"][0])
    assert gradient.turn_direction(truth, 3 * truth) is None
    measured = gradient.measure(paid, truth, 0.9, 100, np.random.default_rng(0), turns)
    assert measured["grad_turn_bias"][1] <= 0.25 <= measured["grad_turn_bias"][2]


def test_a_per_turn_reward_is_a_turn_count_bias_and_the_exact_advantage_is_not():
    # 40 moves: at 20 the initial policy rarely reaches the goal, and the turn count's gradient
    # is then almost the return's (negated): its orthogonal part u is short and the measure
    # noisy
    task, horizon = KeyDoorTask(), 40
    instances, policy = _setup(task, hidden=16, size=5)
    g, tables = gradient.exact_gradient(policy, instances, horizon, task.environment)
    turns = gradient.turn_gradient(policy, instances, tables, horizon, task.environment)
    rate, group = 0.25, 8
    found = {"exact": [], "per_turn": [], "constant": []}
    rows = [i for i in range(len(instances)) for _ in range(group)]
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        env = task.environment([instances[i] for i in rows], horizon, instance_ids=rows)
        ep = play(env, policy, generator)

        def exact(turns, ep=ep):
            return gradient.exact_step_advantages(ep.states, ep.actions, ep.mask, rows, tables,
                                                  task.environment, instances, horizon,
                                                  turns=turns)
        a = exact(False)
        # a reward of `rate` per move, credited by its exact advantage (Q^L - V^L, the
        # reward-to-go rate (L - t) less a state baseline): E[ĝ] = ∇J + rate ∇E[L], so the
        # turn-count bias is `rate`. (The raw reward-to-go has the same expectation but, at
        # up to 40 moves, too much variance for 60 batches.)
        per_turn = a + rate * exact(True)
        constant = a + rate * ep.mask.double()  # the same rate at every move: no bias
        for name, advantages in (("exact", a), ("per_turn", per_turn),
                                 ("constant", constant)):
            found[name].append(gradient.batch_gradient(policy, ep.obs, ep.actions, ep.mask,
                                                       advantages))
    measured = {name: gradient.measure(np.stack(batches), g, 0.95, 1000,
                                       np.random.default_rng(0), turns)["grad_turn_bias"]
                for name, batches in found.items()}
    for name in ("exact", "constant"):
        _, low, high = measured[name]
        assert low <= 0.0 <= high, (name, measured[name])
    _, low, high = measured["per_turn"]
    assert low <= rate <= high and low > 0.0, measured["per_turn"]
    # the exact advantage's turn-count bias is tight around 0; the measure tells them apart
    assert measured["exact"][2] - measured["exact"][1] < 0.2
