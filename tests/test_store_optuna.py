"""The worker's Optuna storage: a trial's intermediate values kept until it ends, finished
trials re-read only when there are more; what Optuna and its pruners see is unchanged."""

import optuna
import pytest
from optuna.trial import TrialState

from workbench.store.database import Store
from workbench.store.optuna_storage import WorkerStorage


@pytest.fixture
def stores(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.create_study(study_name="s", storage=url)
    return url, Store.from_url(f"sqlite:///{tmp_path / 'store.db'}")


def test_intermediate_values_are_kept_until_the_trial_ends_then_written_whole(stores):
    url, _ = stores
    storage = WorkerStorage(optuna.storages.RDBStorage(url))
    study = optuna.load_study(study_name="s", storage=storage)
    trial = study.ask()
    for step in range(5):
        trial.report(float(step), step)
    other = optuna.load_study(study_name="s", storage=url)  # another process's view
    assert other.trials[0].intermediate_values == {}
    # this process sees them, as a pruner reading the trial or the study does
    assert storage.get_trial(trial._trial_id).intermediate_values == {i: float(i)
                                                                      for i in range(5)}
    (running,) = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    assert len(running.intermediate_values) == 5
    study.tell(trial, 1.0)
    again = optuna.load_study(study_name="s", storage=url)
    assert again.trials[0].intermediate_values == {i: float(i) for i in range(5)}
    assert again.trials[0].state == TrialState.COMPLETE


def test_a_failed_trial_writes_its_values_and_one_ended_elsewhere_raises_as_in_optuna(stores):
    url, _ = stores
    storage = WorkerStorage(optuna.storages.RDBStorage(url))
    study = optuna.load_study(study_name="s", storage=storage)
    trial = study.ask()
    trial.report(3.0, 0)
    study.tell(trial, state=TrialState.FAIL)
    assert optuna.load_study(study_name="s", storage=url).trials[0].intermediate_values == {
        0: 3.0}
    second = study.ask()
    second.report(1.0, 0)
    plain = optuna.storages.RDBStorage(url)
    plain.set_trial_state_values(second._trial_id, TrialState.FAIL)  # failed by a claim
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        storage.set_trial_state_values(second._trial_id, TrialState.COMPLETE, [1.0])


def test_finished_trials_follow_other_processes_as_optunas_own_storage(stores):
    url, _ = stores
    storage = WorkerStorage(optuna.storages.RDBStorage(url))
    study = optuna.load_study(study_name="s", storage=storage)
    elsewhere = optuna.load_study(study_name="s", storage=url)

    def complete():
        return [t.number for t in study.get_trials(deepcopy=False,
                                                   states=(TrialState.COMPLETE,))]

    assert complete() == []
    mine = study.ask()
    for value in (1.0, 2.0):
        t = elsewhere.ask()
        t.report(value, 0)
        elsewhere.tell(t, value)
    assert complete() == [1, 2]
    assert complete() == [1, 2]  # unchanged count: the cache, the same answer
    study.tell(mine, 0.5)
    assert complete() == [0, 1, 2]
    reference = optuna.load_study(study_name="s", storage=url)
    assert [(t.number, t.intermediate_values) for t in study.get_trials(
        states=(TrialState.COMPLETE,))] == [(t.number, t.intermediate_values)
                                            for t in reference.trials]


def test_the_median_pruner_decides_as_on_optunas_storage(stores):
    url, _ = stores
    pruner = optuna.pruners.MedianPruner(n_startup_trials=2)
    study = optuna.load_study(study_name="s", storage=WorkerStorage(
        optuna.storages.RDBStorage(url)), pruner=pruner)
    for value in (1.0, 2.0, 3.0):
        t = study.ask()
        t.report(value, 0)
        study.tell(t, value)
    good, bad = study.ask(), study.ask()
    good.report(1.5, 0)
    bad.report(2.5, 0)
    assert not good.should_prune()
    assert bad.should_prune()


def test_the_store_hands_workers_this_storage(stores):
    _, store = stores
    assert isinstance(store.worker_storage(), WorkerStorage)
