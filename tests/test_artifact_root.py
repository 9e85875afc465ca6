"""Artifacts every host reaches: the artifact root's forms, the refusal of workers on a host that
cannot reach a host-local artifact folder, and local workers' GPUs."""

import os

import pytest

from tests.conftest import run_cli, tiny_spec
from workbench.engine.workers import gpu_for_worker
from workbench.store.artifacts import BadArtifactRoot, experiment_location, normalise_root


@pytest.mark.parametrize("given, stored", [
    ("/shared/wb", "file:///shared/wb"),
    ("/shared/with space/", "file:///shared/with%20space"),
    ("file:///shared/wb/", "file:///shared/wb"),
    ("s3://bucket/prefix/", "s3://bucket/prefix"),
    ("gs://bucket", "gs://bucket"),
    ("mlflow-artifacts://art.example:5000",
     "http://art.example:5000/api/2.0/mlflow-artifacts/artifacts"),
    ("mlflow-artifacts://art.example:5000/team",
     "http://art.example:5000/api/2.0/mlflow-artifacts/artifacts/team"),
    ("https://art.example/api/2.0/mlflow-artifacts/artifacts/x",
     "https://art.example/api/2.0/mlflow-artifacts/artifacts/x"),
])
def test_artifact_roots_every_host_reaches(given, stored):
    assert normalise_root(given) == stored


@pytest.mark.parametrize("given, says", [
    ("relative/dir", "a relative path means a different folder on each host"),
    ("file://host/dir", "file:///ABSOLUTE/PATH"),
    ("s3://", "name the bucket"),
    ("mlflow-artifacts://art.example", "host and port"),
    ("http://art.example/files", "an MLflow artifact server's"),
    ("ftp://x/y", "unsupported scheme ftp"),
    ("", "empty"),
])
def test_other_artifact_roots_are_refused_saying_what_is_allowed(given, says):
    with pytest.raises(BadArtifactRoot, match=says):
        normalise_root(given)


def test_an_experiment_lives_under_its_root():
    assert experiment_location("file:///shared/a%20b", "tiny") == "file:///shared/a%20b/tiny"
    assert experiment_location("s3://b/p", "tiny") == "s3://b/p/tiny"


@pytest.mark.parametrize("where", ["spec", "command line"])
def test_a_bad_artifact_root_exits_2_naming_it_and_writes_nothing(where, write_spec, tmp_path):
    spec = tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}")
    extra = ["--artifact-root", "not/absolute"] if where == "command line" else []
    if where == "spec":
        spec["artifact_root"] = "not/absolute"
    path = write_spec(spec)
    before = set(tmp_path.iterdir())
    result = run_cli("sweep", path, *extra, cwd=tmp_path)
    assert result.returncode == 2
    named = "--artifact-root" if where == "command line" else f"{path}: artifact_root"
    assert named in result.stderr and "a relative path means" in result.stderr
    assert set(tmp_path.iterdir()) == before


def test_a_shared_root_holds_the_artifacts_and_the_experiment_keeps_it(write_spec, tmp_path):
    from mlflow.tracking import MlflowClient

    shared = tmp_path / "shared"
    path = write_spec(tiny_spec(trials=1, storage=f"sqlite:///{tmp_path / 'store.db'}",
                                artifact_root=str(shared)))
    result = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny")
    assert experiment.artifact_location == (shared / "tiny").as_uri()
    assert "workbench.artifact_host" not in experiment.tags  # shared: no host to stay on
    assert len(list(shared.rglob("config.yaml"))) == 2  # one trial of each of two studies
    other = run_cli("sweep", path, "--quiet", "--artifact-root", str(tmp_path / "elsewhere"),
                    cwd=tmp_path)
    assert other.returncode == 2
    assert f"keeps its artifacts in {(shared / 'tiny').as_uri()}" in other.stderr


def test_workers_on_another_host_refuse_a_host_local_artifact_folder(write_spec, tmp_path):
    import sqlalchemy as sa

    path = write_spec(tiny_spec(trials=1, storage=f"sqlite:///{tmp_path / 'store.db'}"))
    first = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    spec = tiny_spec(trials=2, storage=f"sqlite:///{tmp_path / 'store.db'}")
    path = write_spec(spec)
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'store.mlflow.db'}")
    with engine.connect() as conn:
        runs_before = conn.execute(sa.text("SELECT COUNT(*) FROM runs")).scalar()
    os.environ["WORKBENCH_HOST"] = "another-host"
    try:
        refused = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    finally:
        del os.environ["WORKBENCH_HOST"]
    assert refused.returncode == 2, refused.stderr
    assert "a folder of host" in refused.stderr and "this worker runs on another-host" in (
        refused.stderr)
    assert "artifact_root in the spec or --artifact-root" in refused.stderr
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT COUNT(*) FROM runs")).scalar() == runs_before
    engine.dispose()


def test_local_workers_take_the_gpus_in_turn():
    assert [gpu_for_worker(i, ["0", "1", "2"]) for i in range(5)] == ["0", "1", "2", "0", "1"]
    assert gpu_for_worker(3, ["5", "7"]) == "7"  # CUDA_VISIBLE_DEVICES as the user set it
    assert gpu_for_worker(0, []) is None
