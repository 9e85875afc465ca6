"""The per-family contracts (workbench.families): every registered method passes its family's
contract; each deliberately broken method in tests/broken_methods.py is caught with a sentence
naming what is wrong; the correct entropy and advantage fixtures pass."""

import pytest
import torch

from tests.broken_methods import (
    BROKEN,
    CORRECT,
    ConstantEntropy,
    ForgetfulStepSize,
    GrowingEntropyCoefficient,
    InPlaceAdvantage,
    LeakyReturns,
    NaNLossHook,
    NegativeStepSize,
    RandomBatch,
    ZeroBatch,
)
from workbench import families, registry
from workbench.families import AdvantageMethod, EntropyMethod, StepSizeMethod
from workbench.families.optim import FlatOptimizer
from workbench.hyperparams import Choice, Float
from workbench.registry import Reference


@pytest.fixture
def registered():
    """Register fixture classes for one test; remove them from the registry afterwards."""
    registry.available()  # discover the real methods first
    added = []

    def add(*classes):
        for cls in classes:
            registry.register(cls)
            added.append((cls.family, cls.name))

    yield add
    for key in added:
        registry._REGISTRY.pop(key, None)


@pytest.mark.parametrize("key", registry.available())
def test_every_registered_method_passes_its_family_contract(key):
    assert families.check(registry.get(*key.split("/", 1))) == []


@pytest.mark.parametrize(("cls", "words"), [
    (NegativeStepSize, ["step 5", "step size -0.25", "finite and >= 0"]),
    (ForgetfulStepSize, ["state_dict()/load_state_dict()", "before step 1", "different point"]),
    (ZeroBatch, ["returned 0 at step 2", "positive integer within [1, 256]"]),
    (RandomBatch, ["not deterministic", "same statistics"]),
    (GrowingEntropyCoefficient, ["coefficient(step=11", "returned 0.11",
                                 "outside its coefficient_bounds() [0.0, 0.1]"]),
    (NaNLossHook, ["policy_loss_hook()", "non-finite", "'entropy_bonus'"]),
    (InPlaceAdvantage, ["changed its input 'rewards' in place",
                        "invariant 'zero_mean_per_group'", "group"]),
    (LeakyReturns, ["padded positions", "changed its returns at valid positions"]),
], ids=lambda value: value.__name__ if isinstance(value, type) else "")
def test_each_broken_method_is_caught_with_a_sentence_naming_the_fault(cls, words):
    problems = families.check(cls)
    assert problems, f"{cls.key()} passed its contract"
    text = "\n".join(problems)
    assert all(line.startswith(cls.key() + ": ") for line in problems), text
    for word in words:
        assert word in text, (word, text)


def test_the_broken_advantage_method_shows_both_of_its_faults():
    problems = families.check(InPlaceAdvantage)
    assert len(problems) == 2
    assert "in place" in problems[0] and "average" in problems[1]


@pytest.mark.parametrize("cls", CORRECT, ids=lambda cls: cls.__name__)
def test_correct_entropy_and_advantage_fixtures_pass(cls):
    assert families.check(cls) == []


def test_check_all_covers_registered_entropy_and_advantage_methods(registered):
    registered(*BROKEN, *CORRECT)
    entropy = families.check_all("entropy")
    assert entropy["entropy/fixture_constant_coef"] == []
    assert entropy["entropy/broken_nan_hook"] and entropy["entropy/broken_growing_coef"]
    assert all(key.startswith("entropy/") for key in entropy)
    everything = families.check_all()
    assert everything["advantage/fixture_group_normalized"] == []
    assert "in place" in everything["advantage/broken_inplace_advantage"][0]
    assert set(everything) == set(registry.available())


def test_check_all_no_longer_lists_fixtures_after_the_test():
    assert not any("broken_" in key or "fixture_" in key for key in registry.available())


class _CappedSGD(FlatOptimizer):
    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    def _update(self):
        self.last_step_size = min(self.param_groups[0]["lr"], 2.0) * 1.5
        self._descend(self._grads(), self.last_step_size * 0.01)


class CapBrokenAtHighEnd(StepSizeMethod):
    """Reports 1.5 min(lr, 2) against a cap of 1.5 min(lr, 1): over its cap only for lr > 1,
    so only the high end of its search range shows it."""

    name = "cap_broken_at_high_end"
    hyperparameters = {"lr": Float(0.1, low=1e-2, high=10.0, log=True, minimum=0.0)}
    reference = Reference("test", 2026)
    fidelity = "reconstructed"

    def step_size_cap(self):
        return min(self.hp.lr, 1.0) * 1.5

    def build(self, params, info):
        return _CappedSGD(params, self.hp.lr)


def test_a_fault_at_the_end_of_a_search_range_names_that_configuration():
    problems = families.check(CapBrokenAtHighEnd)
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "step_size/cap_broken_at_high_end with lr=10.0 (the high end of its search range): ")
    assert "above its step_size_cap() 1.5" in problems[0]


class RaisesInCompute(AdvantageMethod):
    name = "raises_in_compute"
    requires = frozenset({"rewards"})
    reference = Reference("test", 2026)
    fidelity = "reconstructed"

    def compute(self, rewards):
        raise RuntimeError("no values given")


def test_an_exception_becomes_a_problem_with_its_type_and_message():
    problems = families.check(RaisesInCompute)
    assert problems == ["advantage/raises_in_compute: raised RuntimeError: no values given "
                        "in compute()"]


class NeedsAnOracle(EntropyMethod):
    name = "needs_an_oracle"
    hyperparameters = {"mode": Choice("a", ("a", "b"))}
    requires = frozenset({"entropy_oracle"})
    reference = Reference("test", 2026)
    fidelity = "reconstructed"

    def coefficient(self, step, entropy):
        return 0.0


def test_a_method_no_configuration_of_which_can_run_is_reported():
    (problem,) = families.check(NeedsAnOracle)
    assert "no configuration can run" in problem and "entropy_oracle" in problem


def test_configurations_are_defaults_search_range_ends_and_every_choice():
    labels = [label for label, _ in families.configurations(registry.get("step_size", "adgd"))]
    assert labels == ["defaults", "variant='delta_sgd'"]
    configs = dict(families.configurations(ConstantEntropy))
    assert configs == {
        "defaults": {},
        "coef=0.0001 (the low end of its search range)": {"coef": 1e-4},
        "coef=0.1 (the high end of its search range)": {"coef": 0.1},
    }


def test_advantage_inputs_have_the_documented_shapes_and_padding():
    inputs = families.advantage._advantage_inputs()
    assert inputs["rewards"].shape == inputs["mask"].shape == inputs["dones"].shape == (8, 12)
    assert inputs["values"].shape == (8, 13)
    assert inputs["group_ids"].dtype == torch.long
    assert sorted(torch.bincount(inputs["group_ids"]).tolist()) == [2, 2, 2, 2]
    assert (inputs["mask"] == 0).any() and bool(inputs["mask"][0].all())
    trees, groups = inputs["tree_ids"], inputs["group_ids"]
    assert sorted(torch.unique(trees, return_counts=True)[1].tolist()) == [1, 1, 1, 1, 2, 2]
    for tree in trees.unique():  # a tree lies within one group; its rows share two steps
        rows = trees == tree
        assert len(groups[rows].unique()) == 1
        nodes = inputs["node_ids"][rows]
        assert bool((nodes[:, :2] == nodes[:1, :2]).all())
        assert rows.sum() == 1 or len(nodes[:, 2].unique()) == int(rows.sum())


def test_the_check_command_reports_in_plain_words(registered, capsys):
    from tests.broken_methods import NegativeStepSize
    from workbench.cli import main as cli

    registered(NegativeStepSize)
    assert cli.main(["check", "step_size/broken_negative_step"]) == 1
    out = capsys.readouterr().out
    assert "FAIL step_size/broken_negative_step" in out and "must be finite and >= 0" in out
    assert "0 of 1 methods meet their family contract" in out
    assert cli.main(["check", "step_size/constant"]) == 0
    assert "ok   step_size/constant: meets the step_size contract" in capsys.readouterr().out
    assert cli.main(["check", "constant"]) == 2
