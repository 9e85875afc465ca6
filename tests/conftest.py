"""Shared helpers: write a spec into a temporary folder and run the real CLI on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.waiting import scaled, tail

ROOT = Path(__file__).resolve().parent.parent


def tiny_spec(**overrides) -> dict:
    """A small logreg sweep that runs in seconds."""
    spec = {
        "name": "tiny",
        "task": {"name": "logreg", "params": {"n_samples": 64, "dim": 5}},
        "methods": {"step_size": ["constant", "polyak"]},
        "seeds": 2,
        "trials": 3,
        "sampler": {"name": "random", "seed": 0},
        "pruner": "none",
        "budget": {"steps": 20},
    }
    spec.update(overrides)
    return spec


@pytest.fixture
def write_spec(tmp_path):
    def write(spec: dict, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    return write


def run_cli(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``workbench ARGS`` in a child process, as a user would run it.

    ``timeout`` only stops a hung command; it is scaled by WORKBENCH_TEST_TIMEOUT_SCALE
    (tests/waiting.py), and running past it fails with the command's output so far."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, "-m", "workbench", *map(str, args)]
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              timeout=scaled(timeout), env=env)
    except subprocess.TimeoutExpired as err:
        output = {name: data.decode(errors="replace") if isinstance(data, bytes) else data
                  for name, data in (("stdout", err.stdout), ("stderr", err.stderr))}
        raise AssertionError(
            f"waited {scaled(timeout):.0f} s for `workbench {' '.join(map(str, args))}` to "
            f"exit (raise WORKBENCH_TEST_TIMEOUT_SCALE on a slow machine); it was killed; its "
            f"stderr ended with:\n{tail(output['stderr'])}\nits stdout ended with:\n"
            f"{tail(output['stdout'])}") from None


def study_name(storage: str, title: str) -> str:
    """The Optuna study that a sweep runs under its readable name ``SWEEP.SLOT=LABEL[+...]``
    (Optuna's name carries the study's fingerprint): the current one, found through the
    sweep's study runs (tag ``workbench.study_title``)."""
    from workbench.store import runs
    from workbench.store.database import Store

    client = Store.from_url(storage).mlflow_client()
    experiment = client.get_experiment_by_name(title.split(".", 1)[0])
    assert experiment is not None, f"no experiment for {title}"
    found = client.search_runs(
        [experiment.experiment_id],
        f"tags.`{runs.KIND}` = 'study' and tags.`{runs.STUDY_TITLE}` = '{title}' "
        f"and tags.`{runs.STUDY_STATE}` = '{runs.CURRENT}'")
    assert len(found) == 1, f"{len(found)} current study runs titled {title}"
    return found[0].data.tags[runs.STUDY_NAME]


def files_under(path: Path) -> set[Path]:
    return {p for p in path.rglob("*")}


from tests.postgres import postgres  # noqa: E402,F401  (the session's PostgreSQL server)

# entries a test session may leave at the repository's root (all git-ignored): caches, and
# test-artifacts/, where tests/test_ui_browser.py keeps its screenshots to be looked at
ROOT_CACHES = frozenset({"__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache",
                         "test-artifacts"})


@pytest.fixture(scope="session", autouse=True)
def nothing_new_at_the_root():
    """Fail the session when a test leaves a new entry at the repository's root (e.g. the
    ./mlflow.db that an MLflow call without a tracking URI creates in the working folder):
    tests write under their tmp_path only."""
    before = set(os.listdir(ROOT))
    yield
    new = sorted(set(os.listdir(ROOT)) - before - ROOT_CACHES)
    if new:
        pytest.fail(f"the tests left new entries at the repository's root {ROOT}: "
                    f"{', '.join(new)} (a test or the code it calls wrote into the working "
                    "folder; write under tmp_path)", pytrace=False)
