"""Bad arguments to the notebook API (``load_runs``, ``load_metrics``) are refused with one
message naming the argument and what it allows, never answered with an empty frame or an
AttributeError from deep inside; and ``workbench report --sweep`` refuses a sweep the store
does not hold with exit 2, as every other refusal does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_spec
from workbench import load_metrics, load_runs
from workbench.cli import main as cli
from workbench.engine.sweep_run import run_sweep
from workbench.spec import sweep as spec


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A real store holding one small sweep, ``tiny`` (trial, seed and study runs)."""
    folder = tmp_path_factory.mktemp("api-bad-input")
    storage = f"sqlite:///{folder / 'store.db'}"
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_spec(storage=storage, trials=2, seeds=1,
                                             budget={"steps": 4})))
    run_sweep(spec.load(path), device="cpu", say=lambda line: None)
    return storage


def test_good_arguments_still_give_their_frames(store):
    assert set(load_runs("tiny", store)["kind"]) == {"seed"}
    assert set(load_runs("tiny", store, kinds=["trial", "seed"])["kind"]) == {"trial", "seed"}
    assert set(load_runs("tiny", store, kinds=("study",))["kind"]) == {"study"}
    curves = load_metrics("tiny", ["train/loss"], store)
    assert not curves.empty and set(curves["key"]) == {"train/loss"}
    objective = load_metrics("tiny", ["objective"], store, kinds=["trial"])
    assert not objective.empty and set(objective["kind"]) == {"trial"}


@pytest.mark.parametrize("kinds", [["bogus"], ["seed", "bogus"], ["Seed"]])
def test_an_unknown_run_kind_is_refused_naming_the_allowed_ones(store, kinds):
    with pytest.raises(ValueError, match=r"^kinds: '(bogus|Seed)' is not a run kind") as err:
        load_runs("tiny", store, kinds=kinds)
    assert "allowed: study, trial, seed, evaluation" in str(err.value)
    with pytest.raises(ValueError, match="^kinds: "):
        load_metrics("tiny", ["train/loss"], store, kinds=kinds)


@pytest.mark.parametrize("kinds", ["trial", "seed", b"seed", 3, None, [3], []])
def test_kinds_that_are_not_a_list_of_kinds_are_refused(store, kinds):
    with pytest.raises(ValueError, match="^kinds: ") as err:
        load_runs("tiny", store, kinds=kinds)
    assert "allowed: study, trial, seed, evaluation" in str(err.value)


def test_a_kind_as_a_string_is_refused_with_the_list_it_should_be(store):
    with pytest.raises(ValueError, match=r"^kinds: a list of run kinds, e.g. \['trial'\], "
                                         r"not 'trial'; allowed: "):
        load_runs("tiny", store, kinds="trial")


def test_a_string_of_keys_is_refused_with_the_list_it_should_be(store):
    with pytest.raises(ValueError, match=r"^keys: a list of metric names, e.g. \['train/loss'\], "
                                         r"not 'train/loss'$"):
        load_metrics("tiny", "train/loss", store)


@pytest.mark.parametrize("keys", [[], None, 3, [3], ["train/loss", None]])
def test_keys_that_are_not_metric_names_are_refused(store, keys):
    with pytest.raises(ValueError, match="^keys: "):
        load_metrics("tiny", keys, store)


@pytest.mark.parametrize("keys", [["nope/x"], ["train/loss", "nope/x"]])
def test_a_metric_no_run_logged_is_a_lookup_error_naming_the_logged_ones(store, keys):
    with pytest.raises(LookupError, match=r"^keys: no seed or evaluation run of sweep 'tiny' "
                                          r"logged 'nope/x'") as err:
        load_metrics("tiny", keys, store)
    assert "logged: " in str(err.value) and "train/loss" in str(err.value)


def test_the_lookup_error_names_what_the_chosen_kinds_of_run_logged(store):
    """Study runs log only the study's ``objective``."""
    with pytest.raises(LookupError, match=r"no study run of sweep 'tiny' logged 'nope/x' "
                                          r"\(nor is it a name of the metric vocabulary\); "
                                          r"logged: objective$"):
        load_metrics("tiny", ["nope/x"], store, kinds=["study"])


def test_a_vocabulary_metric_these_runs_do_not_log_has_no_rows(store):
    """A name of the metric vocabulary that this sweep's methods do not log (the noise scale of
    a batch-size method it does not use) is no mistake: a reproduction asks each of its
    sweeps for the same curves."""
    curves = load_metrics("tiny", ["train/loss", "batch/noise_scale"], store)
    assert set(curves["key"]) == {"train/loss"}
    assert load_metrics("tiny", ["batch/noise_scale"], store).empty


@pytest.mark.parametrize("storage", [123, 1.5, b"sqlite:///x.db", ["sqlite:///x.db"],
                                     Path("store.db")])
def test_a_storage_that_is_not_a_url_is_refused_naming_the_forms(storage):
    with pytest.raises(ValueError, match=r"^storage: .* sqlite:///FILE, "
                                         r"postgresql://USER@HOST/DB, or None"):
        load_runs("tiny", storage)
    with pytest.raises(ValueError, match="^storage: "):
        load_metrics("tiny", ["train/loss"], storage)


def test_an_unsupported_storage_url_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="storage: unsupported storage"):
        load_runs("tiny", "mysql://somewhere/db")


@pytest.mark.parametrize("sweep", [123, None, ["tiny"], ""])
def test_a_sweep_that_is_not_a_name_is_refused(store, sweep):
    with pytest.raises(ValueError, match="^sweep: "):
        load_runs(sweep, store)


def test_a_sweep_the_store_lacks_is_a_lookup_error(store):
    with pytest.raises(LookupError, match="the store has no sweep 'nosuchsweep'"):
        load_runs("nosuchsweep", store)


@pytest.mark.parametrize("value", ["no", 1, None])
def test_include_superseded_must_be_true_or_false(store, value):
    with pytest.raises(ValueError, match="^include_superseded: .*True or False"):
        load_runs("tiny", store, include_superseded=value)


@pytest.mark.parametrize("storage", ["store", "none"])
def test_report_of_a_sweep_the_store_lacks_exits_2_with_one_line(store, storage, tmp_path,
                                                                 capsys, monkeypatch):
    """Every refusal of `workbench report` exits 2: a sweep the store does not hold, as a
    store that is not there."""
    monkeypatch.chdir(tmp_path)
    url = store if storage == "store" else f"sqlite:///{tmp_path / 'none.db'}"
    code = cli.main(["report", "--sweep", "nosuchsweep", "--storage", url,
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert ("nosuchsweep" if storage == "store" else "no store at") in err
    assert not (tmp_path / "out").exists()
