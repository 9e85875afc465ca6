"""Sweeps placed by Ray on a real two-node cluster (tests/ray_cluster.py), against a real
PostgreSQL store and MLflow's artifact server: exact trial counts, artifacts every host reads,
lost workers and a lost node, Ray and plain workers on one sweep, a GPU the cluster lacks."""

import os
import re
import signal
import subprocess
import sys
import urllib.request

import optuna
import pytest
import sqlalchemy as sa
from optuna.trial import TrialState

from tests.conftest import study_name, tiny_spec
from tests.test_crash_resume import (
    FINISHED,
    check_store,
    mlflow_url_of,
    trial_states,
    wait_for_sweeps,
)
from tests.waiting import communicate, kill, wait_until

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

TITLES = ("tiny.step_size=constant", "tiny.step_size=polyak")
STEPS = 400


@pytest.fixture(scope="module")
def cluster():
    from tests.ray_cluster import RayCluster

    found = RayCluster()
    yield found
    found.close()


@pytest.fixture(scope="module")
def artifact_server():
    from tests.ray_cluster import ArtifactServer

    server = ArtifactServer()
    yield server
    server.close()


def sweep_process(path, cwd, env, *extra):
    return subprocess.Popen([sys.executable, "-m", "workbench", "sweep", str(path), "--quiet",
                             *map(str, extra)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def spec_for(url, trials=3, steps=STEPS, **more):
    return tiny_spec(trials=trials, seeds=2, budget={"steps": steps}, storage=url, **more)


def studies_of(url):
    return [study_name(url, title) for title in TITLES]


def check_every_step(url, steps=STEPS):
    """Every finished seed run has every step of its loss; none is left RUNNING."""
    client, runs = check_store(url, mlflow_url_of(url), "tiny", studies_of(url), 3)
    engine = sa.create_engine(mlflow_url_of(url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        counts = dict(conn.execute(sa.text(
            "SELECT r.run_uuid, COUNT(DISTINCT m.step) FROM runs r JOIN metrics m ON "
            "m.run_uuid = r.run_uuid JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = "
            "'workbench.kind' AND t.value = 'seed' WHERE r.status = 'FINISHED' AND m.key = "
            "'train/loss' GROUP BY r.run_uuid")).all())
        running = conn.execute(sa.text("SELECT COUNT(*) FROM runs WHERE status = 'RUNNING'"))
        assert running.scalar() == 0
    engine.dispose()
    assert counts and set(counts.values()) == {steps + 1}
    return client, runs


def running_trials(url):
    found = []
    for name in optuna.get_all_study_names(url):
        for t in optuna.load_study(study_name=name, storage=url).get_trials():
            if t.state == TrialState.RUNNING and "worker" in t.user_attrs:
                found.append(t)
    return found


def test_a_sweep_through_ray_on_two_nodes_with_an_artifact_server(
        cluster, artifact_server, postgres, write_spec, tmp_path):
    url = postgres.new_database()
    path = write_spec(spec_for(url, steps=1500, launcher={"name": "ray", "cpus_per_worker": 1}))
    proc = sweep_process(path, tmp_path, cluster.env, "--ray", cluster.address,
                         "--artifact-root", artifact_server.root)
    [err] = wait_for_sweeps([proc], url, "a sweep of 3 Ray workers on two nodes", timeout=900)
    client, runs = check_every_step(url, steps=1500)
    trial_runs = [r for r in runs if r.data.tags["workbench.kind"] == "trial"]
    assert len(trial_runs) == 2 * 3
    for run in trial_runs:  # written by workers on both nodes, read back through the server
        assert run.info.artifact_uri.startswith(f"http://127.0.0.1:{artifact_server.port}/")
        local = client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))
        assert "step_size" in open(local).read()
    assert len([f for f in artifact_server.files() if f.name == "config.yaml"]) == 6
    # three workers of one CPU each, spread over a 1 + 2 CPU cluster: workers on both nodes
    # (which of them claims trials first is the machine's timing, not asserted), and the
    # trials they say they ran are the trials the store has, each with its worker's node
    placed = re.findall(r"Ray worker (\d) ran (\d+) trial\(s\) on node (\w+) ", err)
    assert sorted(int(i) for i, _, _ in placed) == [0, 1, 2], err
    assert len({node for _, _, node in placed}) == 2, err
    assert sum(int(n) for _, n, _ in placed) == 2 * 3
    ran_on = {node for _, n, node in placed if int(n)}
    trial_nodes = {t.user_attrs["worker"]["ray_node"][:len(next(iter(ran_on)))]
                   for name in studies_of(url)
                   for t in optuna.load_study(study_name=name, storage=url).get_trials()}
    assert trial_nodes == ran_on
    assert "step_size" in ui_artifact(path, tmp_path, trial_runs[0].info.run_id, "config.yaml")


def ui_artifact(spec_path, cwd, run_id, name) -> str:
    """An artifact as `workbench ui` serves it to the browser (MLflow's get-artifact)."""
    from tests.postgres import _free_port
    from tests.test_ui_browser import _kill_group

    port = _free_port()
    ui = subprocess.Popen([sys.executable, "-m", "workbench", "ui", str(spec_path), "--port",
                           str(port)], cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}/get-artifact?path={name}&run_uuid={run_id}"

    def fetched():
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return answer.read().decode()
        except OSError:
            assert ui.poll() is None, "workbench ui exited"
            return None

    try:
        return wait_until(fetched, f"workbench ui to serve {name}", 180, interval=0.5)
    finally:
        _kill_group(ui)


@pytest.mark.parametrize("loss", ["worker process", "second node"])
def test_a_lost_worker_or_node_leaves_exact_counts(loss, cluster, postgres, write_spec,
                                                   tmp_path):
    url = postgres.new_database()
    path = write_spec(spec_for(url, steps=1500, launcher={"name": "ray", "max_restarts": 3}))
    proc = sweep_process(path, tmp_path, cluster.env, "--ray", cluster.address, "--workers", 3)
    try:
        wait_until(lambda: len(running_trials(url)) >= 2 or proc.poll() is not None,
                   "two Ray workers inside trials", 300, interval=0.2,
                   describe_state=lambda: f"trial states {trial_states(url)}")
        assert proc.poll() is None, proc.stderr.read()
        if loss == "worker process":
            os.kill(running_trials(url)[0].user_attrs["worker"]["pid"], signal.SIGKILL)
        else:
            cluster.stop_second_node()
        wait_for_sweeps([proc], url, f"the sweep to finish after losing a {loss}",
                        timeout=1200)
    finally:
        if proc.poll() is None:
            kill(proc)
            proc.wait()
        if loss == "second node" and cluster.second.poll() is not None:
            cluster.add_second_node()
    check_every_step(url, steps=1500)
    failed = [t for name in studies_of(url)
              for t in optuna.load_study(study_name=name, storage=url).get_trials()
              if t.state == TrialState.FAIL]
    assert failed, "the lost worker's trial was failed and run again"


def test_ray_workers_and_a_plain_process_share_one_sweep(cluster, postgres, write_spec,
                                                         tmp_path):
    url = postgres.new_database()
    path = write_spec(spec_for(url, trials=4, steps=200))
    ray_sweep = sweep_process(path, tmp_path, cluster.env, "--ray", cluster.address,
                              "--workers", 2)
    plain = sweep_process(path, tmp_path, cluster.env, "--workers", 1)
    wait_for_sweeps([ray_sweep, plain], url, "Ray workers and a plain worker", timeout=900)
    for name in studies_of(url):
        trials = optuna.load_study(study_name=name, storage=url).get_trials()
        assert sum(t.state in FINISHED for t in trials) == 4
        assert len(trials) == 4  # none claimed twice, none beyond the count
    _, runs = check_store(url, mlflow_url_of(url), "tiny", studies_of(url), 4)
    assert sum(r.data.tags["workbench.kind"] == "trial" for r in runs) == 2 * 4


def test_a_gpu_the_cluster_lacks_is_a_clear_message(cluster, postgres, write_spec, tmp_path):
    url = postgres.new_database()
    path = write_spec(spec_for(url, launcher={"name": "ray", "gpus_per_worker": 1}))
    proc = sweep_process(path, tmp_path, cluster.env, "--ray", cluster.address)
    out, err = communicate(proc, "the sweep to refuse a GPU the cluster lacks", 300)
    assert proc.returncode == 2, err
    assert "no node of the Ray cluster has 1 CPU and 1 GPU" in err
    assert "gpus_per_worker" in err and "Traceback" not in err
    assert trial_states(url) == {}  # nothing claimed


def test_an_unreachable_ray_address_is_a_clear_message(write_spec, tmp_path):
    from tests.postgres import _free_port

    path = write_spec(tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = sweep_process(path, tmp_path, env, "--ray", f"127.0.0.1:{_free_port()}")
    _, err = communicate(proc, "the sweep to give up on a Ray address nobody answers",
                         300)
    assert proc.returncode == 2, err
    assert "cannot join the Ray cluster at 127.0.0.1:" in err and "Traceback" not in err


def test_ray_without_an_address_runs_a_local_cluster_on_loopback(write_spec, tmp_path):
    """``--ray`` alone starts a cluster of this machine bound to 127.0.0.1 (the detected node
    address may not be reachable) and the sweep's trials land in the store."""
    store = tmp_path / "store.db"
    path = write_spec(tiny_spec(storage=f"sqlite:///{store}", trials=2, seeds=[0],
                                budget={"steps": 5}))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = sweep_process(path, tmp_path, env, "--ray", "--workers", 1)
    _, err = communicate(proc, "a 2-trial sweep on a local Ray cluster", 300)
    assert proc.returncode == 0, err
    studies = optuna.get_all_study_summaries(f"sqlite:///{store}")
    assert studies and all(s.n_trials == 2 for s in studies), studies
    for summary in studies:
        study = optuna.load_study(study_name=summary.study_name, storage=f"sqlite:///{store}")
        assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 2
