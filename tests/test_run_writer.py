"""RunWriter writes, in one transaction, the rows MLflow's client writes run by run."""

import logging
import math
import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from workbench.store import runs
from workbench.store.run_writer import WRITTEN, NewRun, Retag, RunEnd, RunWriter

UNKNOWN = {**WRITTEN, "runs": (WRITTEN["runs"][0] | {"a column no store has"},
                               WRITTEN["runs"][1])}


@pytest.fixture
def sqlite_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(url)  # artifacts in the test's folder, not ./mlruns
    return url, client, client.create_experiment(
        "runs", artifact_location=(tmp_path / "artifacts").as_uri())


@pytest.fixture(scope="module")
def pg_store(postgres, tmp_path_factory):
    url = postgres.new_database()
    client = MlflowClient(url)
    return url, client, client.create_experiment(
        "runs", artifact_location=tmp_path_factory.mktemp("artifacts").as_uri())


def open_and_close(writer: RunWriter, experiment: str) -> list[str]:
    """A trial run and three seed runs, ended complete (renamed, with a metric), pruned
    (tags) and failed; the trial itself ends with a NaN and an infinite metric; then a second
    trial run that the complete seed run moves below (``RunWriter.retag``)."""
    (trial,) = writer.start(experiment, [NewRun(
        "label t0", {runs.KIND: runs.TRIAL, "optuna.trial_number": 0},
        {"lr": 0.1, "long": "x" * 7000})])
    seeds = writer.start(experiment, [
        NewRun(f"label t0 s{s}", {runs.KIND: runs.SEED, runs.SEED_TAG: s},
               {"lr": 0.1, "seed": s}, parent=trial) for s in range(3)])
    writer.finish([
        RunEnd(seeds[0], "complete", metrics={"objective": 0.25}, name="label t0 s0 | f=0.25"),
        RunEnd(seeds[1], "pruned", tags={runs.PRUNE_REASON: "diverged",
                                         runs.PRUNE_DETAIL: "at step 3"}),
        RunEnd(seeds[2], "fail", tags={runs.FAIL_REASON: "ValueError: no"}),
    ])
    writer.finish([RunEnd(trial, "complete", metrics={"objective": math.nan, "inf": math.inf},
                          name="label t0 | f=nan")])
    # a second trial takes the finished seed run over (kept from a stopped trial)
    (other,) = writer.start(experiment, [NewRun(
        "label t1", {runs.KIND: runs.TRIAL, "optuna.trial_number": 1}, {"lr": 0.1})])
    writer.retag([Retag(seeds[0], {"mlflow.parentRunId": other, "optuna.trial_number": 1,
                                   runs.KEPT_FROM: trial}, name="label t1 s0 | f=0.25")])
    writer.finish([RunEnd(other, "complete", metrics={"objective": 0.25})])
    return [trial, *seeds, other]


def described(client: MlflowClient, run_ids: list[str]) -> list[dict]:
    """What MLflow reads back of each run, with run ids replaced by their position."""
    position = {run_id: f"<run {i}>" for i, run_id in enumerate(run_ids)}
    out = []
    for run_id in run_ids:
        run = client.get_run(run_id)
        info = run.info
        out.append({
            "status": info.status, "name": info.run_name, "stage": info.lifecycle_stage,
            "user": info.user_id, "ended": info.end_time is not None and
                                           info.end_time >= info.start_time,
            "artifacts": info.artifact_uri.replace(run_id, "<run>"),
            "tags": {k: position.get(v, v) for k, v in run.data.tags.items()},
            "params": run.data.params,
            "metrics": {k: str(v) for k, v in run.data.metrics.items()},
            "history": {k: [(m.step, str(m.value)) for m in client.get_metric_history(run_id, k)]
                        for k in run.data.metrics},
        })
    return out


def both_ways(url, client, experiment):
    fast = RunWriter(client, url)
    slow = RunWriter(client, url, written=UNKNOWN)
    assert fast.fast and not slow.fast
    ours, theirs = open_and_close(fast, experiment), open_and_close(slow, experiment)
    fast.close()
    slow.close()
    return ours, theirs


def test_the_rows_are_the_ones_mlflow_writes_on_sqlite(sqlite_store):
    url, client, experiment = sqlite_store
    ours, theirs = both_ways(url, client, experiment)
    assert described(client, ours) == described(client, theirs)
    assert described(client, ours)[0]["params"]["long"] != "x" * 7000  # cut as MLflow allows
    moved = described(client, ours)[1]  # below the second trial now, still finished
    assert moved["status"] == "FINISHED" and moved["name"] == "label t1 s0 | f=0.25"
    assert moved["tags"]["mlflow.parentRunId"] == "<run 4>"
    assert moved["tags"][runs.KEPT_FROM] == "<run 0>"
    assert moved["metrics"] == {"objective": "0.25"}
    # the raw rows, ids and times aside, are the same too
    db = sqlite3.connect(url.removeprefix("sqlite:///"))
    for run_ids in (ours, theirs):
        assert {r[0] for r in db.execute("SELECT run_uuid FROM runs")} >= set(run_ids)

    def row(run_id):
        cells = db.execute("SELECT * FROM runs WHERE run_uuid = ?", (run_id,)).fetchone()
        names = [d[0] for d in db.execute("SELECT * FROM runs").description]
        return {n: c for n, c in zip(names, cells, strict=True)
                if n not in ("run_uuid", "start_time", "end_time", "artifact_uri")}
    assert [row(r) for r in ours] == [row(r) for r in theirs]


def test_search_finds_runs_written_directly(sqlite_store):
    url, client, experiment = sqlite_store
    ours, theirs = both_ways(url, client, experiment)
    found = client.search_runs([experiment], f"tags.`{runs.KIND}` = 'seed'")
    assert {r.info.run_id for r in found} == set(ours[1:4] + theirs[1:4])
    failed = client.search_runs([experiment], "attributes.status = 'FAILED'")
    assert {r.info.run_id for r in failed} == {ours[3], theirs[3]}


def test_the_rows_are_the_ones_mlflow_writes_on_postgresql(pg_store):
    url, client, experiment = pg_store
    ours, theirs = both_ways(url, client, experiment)
    assert described(client, ours) == described(client, theirs)


def test_a_failed_write_leaves_no_run_behind(sqlite_store):
    """The database refuses the last param of the second run: neither run exists after."""
    url, client, experiment = sqlite_store
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON params WHEN NEW.key = 'refused' "
                   "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
    writer = RunWriter(client, url)
    with pytest.raises(sqlite3.DatabaseError, match="refused by the test"):
        writer.start(experiment, [NewRun("a", {"t": 1}, {"p": 1}),
                                  NewRun("b", {"t": 2}, {"p": 2, "refused": 3})])
    writer.close()
    assert client.search_runs([experiment]) == []
    with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
        assert db.execute("SELECT COUNT(*) FROM tags").fetchone() == (0,)


def test_an_unknown_layout_goes_through_the_client_and_says_so_once(sqlite_store, caplog):
    url, client, experiment = sqlite_store
    with caplog.at_level(logging.WARNING, logger="workbench.store.sink"):
        for _ in range(2):
            RunWriter(client, url, written=UNKNOWN).close()
    said = [r for r in caplog.records if "run writer" in r.getMessage()]
    assert len(said) == 1 and "runs" in said[0].getMessage()


def test_an_artifact_written_directly_reads_back_as_the_clients(sqlite_store, tmp_path):
    url, client, experiment = sqlite_store
    text = "sweep: quickstart\nseeds:\n- 0\n"
    opened = []
    for writer in (RunWriter(client, url), RunWriter(client, url, written=UNKNOWN)):
        (run_id,) = writer.start(experiment, [NewRun("r", {})])
        writer.log_text(run_id, text, "config.yaml")
        writer.log_text(run_id, text.upper(), "nested/again.txt")
        writer.finish([RunEnd(run_id, "complete")])
        writer.close()
        opened.append(run_id)
    for run_id in opened:
        assert [a.path for a in client.list_artifacts(run_id)] == ["config.yaml", "nested"]
        folder = Path(client.download_artifacts(run_id, "", str(tmp_path / run_id)))
        assert (folder / "config.yaml").read_text() == text
        assert (folder / "nested" / "again.txt").read_text() == text.upper()
        assert sorted(p.name for p in folder.rglob("*")) == ["again.txt", "config.yaml",
                                                             "nested"]
