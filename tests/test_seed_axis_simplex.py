"""The simplex tasks and Frank-Wolfe / normalized_lr on a seed axis: each seed of
``run_seeds`` has the metrics of its own ``run`` (CPU, float64, 1e-9 relative), with its own
data, f*, smoothness, start and LMO."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_seed_axis import assert_same_finals, assert_same_metrics, run_alone, run_together
from workbench import registry
from workbench.families import ContractViolation
from workbench.families.step_size import check_configuration

SIMPLEX = {  # small, and far enough from a vertex optimum that most seeds keep stepping
    "portfolio": {"problem": "portfolio", "dim": 10, "n_samples": 40},
    "l1_least_squares": {"problem": "l1_least_squares", "dim": 10, "n_samples": 40,
                         "radius": 3.0},
}
CONFIGS = [("fw_open_loop", {}), ("fw_open_loop", {"ell": 5}), ("fw_short_step", {}),
           ("fw_short_step", {"l_estimate": "backtracking"}), ("constant", {"lr": 0.3})]


def methods(name, hp):
    return {"step_size": registry.get("step_size", name)(**hp)}


def both(task, params, chosen, seeds, steps):
    alone, alone_finals = run_alone(task, params, chosen, seeds, steps)
    together, together_finals = run_together(task, params, chosen, seeds, steps)
    assert_same_metrics(alone, together)
    assert_same_finals(alone_finals, together_finals)
    return together


@settings(deadline=None, max_examples=12, derandomize=True, database=None)
@given(problem=st.sampled_from(sorted(SIMPLEX)), config=st.sampled_from(CONFIGS),
       init=st.sampled_from(["barycentre", "vertex"]),
       seeds=st.lists(st.integers(0, 1_000), min_size=2, max_size=4, unique=True))
def test_every_simplex_seed_on_the_axis_has_the_metrics_of_its_own_run(problem, config, init,
                                                                        seeds):
    both("simplex", {**SIMPLEX[problem], "init": init}, methods(*config), seeds, 20)


@pytest.mark.parametrize("problem", sorted(SIMPLEX))
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c[0]}{c[1] or ''}")
def test_each_seed_keeps_its_own_step_sizes_and_gap(problem, config):
    """Per-seed scalars: the seeds' data differ, so do their FW gaps and (closed-loop) steps."""
    together = both("simplex", SIMPLEX[problem], methods(*config), [1, 2, 3], 25)
    gaps = {rows[-1][1]["train/fw_gap"] for rows in together.values()}
    assert len(gaps) == 3, gaps
    if config[0] == "fw_short_step":
        sizes = [tuple(m["method/step_size"] for _, m in rows[1:]) for rows in together.values()]
        assert len(set(sizes)) == 3
        assert all(0.0 <= s <= 1.0 for row in sizes for s in row)


def test_a_seed_at_its_optimum_stands_still_while_the_others_step_and_probe():
    """Portfolio seed 7 starts at its optimal vertex (gap 0): gamma = 0 every step and no
    first-step probe of the backtracking estimate, so it counts one gradient evaluation per
    step while seeds 1 and 2 count one more (their probe), as in their own runs."""
    params = {**SIMPLEX["portfolio"], "init": "vertex"}
    chosen = methods("fw_short_step", {"l_estimate": "backtracking"})
    together = both("simplex", params, chosen, [1, 7, 2], 15)
    assert all(m["method/step_size"] == 0.0 for _, m in together[7][1:])
    assert together[7][-1][1]["cost/grad_evals"] == 15
    assert {together[s][-1][1]["cost/grad_evals"] for s in (1, 2)} == {16}
    assert all(m["method/step_size"] > 0.0 for _, m in together[1][1:3])


def test_fixed_data_different_starts_only_differ_by_start():
    """data_seed shared: one smoothness and f* for all seeds (given as one float), and the
    same trajectory for all (the start is the barycentre)."""
    params = {**SIMPLEX["l1_least_squares"], "data_seed": 3}
    together = both("simplex", params, methods("fw_short_step", {}), [0, 1], 10)
    assert ([m["train/loss"] for _, m in together[0]]
            == [m["train/loss"] for _, m in together[1]])


LOGREG = {"n_samples": 96, "dim": 6}


@settings(deadline=None, max_examples=8, derandomize=True, database=None)
@given(lr=st.floats(1e-2, 1e2), batch_size=st.sampled_from([None, 16]),
       seeds=st.lists(st.integers(0, 1_000), min_size=2, max_size=4, unique=True))
def test_normalized_lr_on_a_seed_axis_matches_each_seeds_own_run(lr, batch_size, seeds):
    """beta_t = 1 / mean sigma(-margins) per seed over its own (mini)batch."""
    chosen = {"step_size": registry.get("step_size", "normalized_lr")(lr=lr),
              "batch_size": registry.get("batch_size", "constant")()}
    together = both("logreg", {**LOGREG, "batch_size": batch_size}, chosen, seeds, 20)
    sizes = {rows[1][1]["method/step_size"] for rows in together.values()}
    assert len(sizes) == len(seeds)  # each seed's own beta (its own start and data)


@pytest.mark.parametrize(("name", "hp"), [("fw_open_loop", {}), ("fw_short_step", {}),
                                          ("fw_short_step", {"l_estimate": "backtracking"}),
                                          ("normalized_lr", {"lr": 3.0})])
def test_the_contract_holds_the_methods_to_parity_on_stacked_quadratics(name, hp):
    cls = registry.get("step_size", name)
    check_configuration(cls, hp, cls(**hp))


def test_the_contract_refuses_a_frank_wolfe_gap_summed_over_the_seeds():
    fw = registry.get("step_size", "fw_short_step")

    class AcrossSeeds(fw):
        def build(self, params, info):
            optimizer = super().build(params, info)
            own = optimizer._sum_per_seed
            optimizer._sum_per_seed = lambda tensors: own(tensors).sum().expand(
                optimizer.seeds or ()).clone()
            return optimizer

    with pytest.raises(ContractViolation, match="on a seed axis, seed"):
        check_configuration(AcrossSeeds, {}, AcrossSeeds())
