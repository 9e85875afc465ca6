"""Seeds added or removed without rerunning: the seed list is not in a study's fingerprint, so a
sweep run again with more seeds keeps its study and runs only the seeds each trial lacks, with
the real CLI on a real SQLite store (``workbench.engine.trial_seeds``)."""

from __future__ import annotations

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.conftest import run_cli, tiny_spec
from workbench.engine import trial_seeds
from workbench.report.data import SweepRef, read_sweep
from workbench.spec import sweep as spec
from workbench.spec.plan import Sweep
from workbench.stats import aggregates as stats
from workbench.store import runs
from workbench.store.database import Store

pytestmark = pytest.mark.slow


def edit_spec(path, **edit) -> None:
    document = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**document, **edit}, sort_keys=False))


def sweep_with(path, tmp_path, said: str = "", **edit) -> Sweep:
    """Write the spec with ``edit``, run `workbench sweep` on it (its stderr says ``said``);
    the loaded sweep."""
    edit_spec(path, **edit)
    result = run_cli("sweep", path, "--device", "cpu", "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert said in result.stderr
    return spec.load(path).on_device("cpu")


def seed_runs(sweep: Sweep) -> dict[str, list[int]]:
    """Trial run id -> the seeds of its finished seed runs."""
    client = Store.from_url(sweep.storage).mlflow_client()
    experiment = client.get_experiment_by_name(sweep.name).experiment_id
    found: dict[str, list[int]] = {}
    for run in client.search_runs([experiment], f"tags.`{runs.KIND}` = '{runs.SEED}' and "
                                  "attributes.status = 'FINISHED'", max_results=10_000):
        found.setdefault(run.data.tags["mlflow.parentRunId"], []).append(
            int(run.data.tags[runs.SEED_TAG]))
    return {trial: sorted(seeds) for trial, seeds in found.items()}


def seed_run_count(sweep: Sweep) -> int:
    """Every seed run of the sweep, whatever its status (each one a training execution)."""
    client = Store.from_url(sweep.storage).mlflow_client()
    experiment = client.get_experiment_by_name(sweep.name).experiment_id
    return len(client.search_runs([experiment], f"tags.`{runs.KIND}` = '{runs.SEED}'",
                                  max_results=10_000))


def seed_objectives(sweep: Sweep) -> dict[tuple[str, int], float]:
    client = Store.from_url(sweep.storage).mlflow_client()
    experiment = client.get_experiment_by_name(sweep.name).experiment_id
    return {(r.data.tags["mlflow.parentRunId"], int(r.data.tags[runs.SEED_TAG])):
            r.data.metrics["objective"]
            for r in client.search_runs([experiment], f"tags.`{runs.KIND}` = '{runs.SEED}' and "
                                        "attributes.status = 'FINISHED'", max_results=10_000)}


def check_values_over(sweep: Sweep, seeds: list[int]) -> list:
    """Every trial of the one study is complete with its Optuna value over ``seeds`` exactly
    (the aggregate of those seed runs' objectives); its trials."""
    (plan,) = sweep.studies
    studies = optuna.get_all_study_summaries(sweep.storage, False)
    assert [s.study_name for s in studies] == [plan.name]  # no new study
    study = optuna.load_study(study_name=plan.name, storage=sweep.storage)
    objectives = seed_objectives(sweep)
    trials = study.get_trials()
    for t in trials:
        assert t.state == TrialState.COMPLETE
        run = t.user_attrs["mlflow_run_id"]
        assert t.value == pytest.approx(stats.aggregate([objectives[(run, s)] for s in seeds],
                                                        "mean"))
        assert trial_seeds.comparable(t, study.user_attrs, seeds)
    return trials


def status_of(path, tmp_path) -> str:
    result = run_cli("status", path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout


def check_report(sweep: Sweep, seeds: list[int]) -> None:
    """The report ranks every trial on ``seeds`` and shows the best trial's runs of them."""
    data = read_sweep(SweepRef(sweep.name, sweep.storage))
    (method,) = data.methods
    assert method.stale is None and data.record.seeds == seeds
    assert method.trials["objective"].notna().all()
    assert sorted(method.seeds["seed"]) == seeds
    objectives = seed_objectives(sweep)
    for _, trial in method.trials.iterrows():
        assert trial["objective"] == pytest.approx(stats.aggregate(
            [objectives[(trial["run_id"], s)] for s in seeds], "mean"))


def test_more_seeds_run_only_the_missing_ones_and_fewer_run_none(write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=2, seeds=3, methods={"step_size": ["constant"]},
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    three = sweep_with(path, tmp_path)
    before = seed_runs(three)
    assert sorted(map(len, before.values())) == [3, 3]
    first = check_values_over(three, [0, 1, 2])
    edit_spec(path, seeds=5)  # not run yet: status says the trials lack seeds
    shown = status_of(path, tmp_path)
    assert "seeds to add" in shown and "2 complete trials have their objective over" in shown

    five = sweep_with(path, tmp_path, "note: constant: 2 trials lack seeds among [3, 4]; "
                                      "running only those")
    assert five.studies[0].name == three.studies[0].name  # the same study, still current
    after = seed_runs(five)
    assert after.keys() == before.keys()  # no new trial
    assert all(seeds == [0, 1, 2, 3, 4] for seeds in after.values())
    added = sum(map(len, after.values())) - sum(map(len, before.values()))
    assert added == 2 * len(before)  # two training runs per trial, nothing rerun
    assert seed_run_count(five) == sum(map(len, after.values()))  # none failed
    trials = check_values_over(five, [0, 1, 2, 3, 4])
    assert [t.params for t in trials] == [t.params for t in first]
    shown = status_of(path, tmp_path)
    assert "up to date" in shown and "stale" not in shown and "superseded" not in shown
    assert "seeds to add" not in shown and "2/2" in shown
    check_report(five, [0, 1, 2, 3, 4])

    back = sweep_with(path, tmp_path, "2 trials recomputed over seeds [0, 1, 2] from the seed "
                      "runs they have (no run)", seeds=3)  # fewer seeds: the first three reused
    assert seed_runs(back) == after and seed_run_count(back) == 10  # no run added
    check_values_over(back, [0, 1, 2])
    assert "up to date" in status_of(path, tmp_path)
    check_report(back, [0, 1, 2])


def test_another_seed_list_reuses_the_seeds_it_shares(write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=2, seeds=[0, 1], methods={"step_size": ["constant"]},
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    before = seed_runs(sweep_with(path, tmp_path))
    other = sweep_with(path, tmp_path, seeds=[1, 7])
    after = seed_runs(other)
    assert after.keys() == before.keys() and all(s == [0, 1, 7] for s in after.values())
    check_values_over(other, [1, 7])
    check_report(other, [1, 7])


def test_on_a_seed_axis_the_missing_seeds_run_on_an_axis_of_their_own(write_spec, tmp_path):
    path = write_spec(tiny_spec(trials=2, seeds=2, methods={"step_size": ["constant"]},
                                execution={"seeds": "vectorised"},
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    two = sweep_with(path, tmp_path)
    assert two.studies[0].vectorised
    before = seed_runs(two)
    four = sweep_with(path, tmp_path, seeds=4)
    after = seed_runs(four)
    assert after.keys() == before.keys() and all(s == [0, 1, 2, 3] for s in after.values())
    check_values_over(four, [0, 1, 2, 3])
    check_report(four, [0, 1, 2, 3])


def test_a_trial_over_other_seeds_is_left_out_of_the_ranking():
    """What status, the claims and the evaluation rank: only complete trials whose objective
    is over the sweep's seeds; a trial lacking seeds is pending until its extension ends."""
    from workbench.store.optuna_tables import TrialRow

    told = TrialRow(0, "COMPLETE", 1.0, user_attrs={trial_seeds.SEED_VALUES: {"0": 1.0,
                                                                               "1": 1.0}})
    extended = TrialRow(1, "COMPLETE", 2.0, user_attrs={trial_seeds.SEED_VALUES: {"0": 2.0}})
    pruned = TrialRow(2, "PRUNED")
    study = {trial_seeds.record_key(1): {"values": {"0": 2.0, "1": 2.0}, "over": [1, 0]}}
    trials = [told, extended, pruned]
    assert trial_seeds.ranked(trials, study, [0, 1]) == trials
    assert trial_seeds.ranked(trials, study, [0, 1, 2]) == [pruned]
    assert trial_seeds.pending(trials, study, [0, 1, 2]) == [told, extended]
    assert trial_seeds.missing(trial_seeds.of(told.user_attrs, study, 0), [2, 0, 5]) == [2, 5]
    failed = {**study, trial_seeds.extension_key(0): {"state": "failed", "seeds": [0, 1, 2]}}
    assert trial_seeds.pending(trials, failed, [0, 1, 2]) == [extended]


def test_an_extension_whose_worker_died_is_taken_again_and_its_run_failed(write_spec, tmp_path):
    """A kill during an extension leaves its claim ``running`` under a dead process and a seed
    run RUNNING: the next sweep fails that run and runs the trial's missing seeds again."""
    import subprocess
    import sys

    from workbench.common.processes import this_host

    path = write_spec(tiny_spec(trials=1, seeds=2, methods={"step_size": ["constant"]},
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    two = sweep_with(path, tmp_path)
    (plan,) = two.studies
    study = optuna.load_study(study_name=plan.name, storage=two.storage)
    (trial,) = study.get_trials()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    study.set_user_attr(trial_seeds.extension_key(trial.number), {
        "state": "running", "owner": {"host": this_host(), "pid": int(dead)}, "beat": 0.0,
        "seeds": [0, 1, 2]})
    client = Store.from_url(two.storage).mlflow_client()
    left = runs.start_run(client, study.user_attrs["mlflow_experiment_id"], "killed s2",
                          tags={runs.KIND: runs.SEED, runs.SEED_TAG: 2,
                                "optuna.trial_id": trial._trial_id,
                                "optuna.trial_number": trial.number},
                          parent=trial.user_attrs["mlflow_run_id"])

    three = sweep_with(path, tmp_path, seeds=3)
    assert client.get_run(left).info.status == "FAILED"
    experiment = client.get_experiment_by_name(three.name).experiment_id
    finished = [r for r in client.search_runs([experiment], f"tags.`{runs.KIND}` = "
                                              f"'{runs.SEED}'", max_results=100)
                if r.info.status == "FINISHED"]
    assert sorted(int(r.data.tags[runs.SEED_TAG]) for r in finished) == [0, 1, 2]
    check_values_over(three, [0, 1, 2])
    entry = optuna.load_study(study_name=plan.name, storage=two.storage).user_attrs[
        trial_seeds.extension_key(trial.number)]
    assert entry["state"] == "done" and entry["owner"]["pid"] != int(dead)
