"""A store is absent or complete whatever moment its creation is killed at, and a store that
cannot be used as it is (corrupt, foreign, at another schema revision, not a file) is refused
with one message and exit 2, with nothing written (issue 13, items 1 and 7)."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import optuna
import pytest
import yaml

from tests.conftest import ROOT, run_cli, tiny_spec
from workbench.store import schema as store_schema
from workbench.store.database import Store

HOOKS = ROOT / "tests" / "kill_hooks"
SPEC = tiny_spec(methods={"step_size": ["constant"]}, seeds=1, trials=2,
                 budget={"steps": 10})


def write(folder: Path, spec: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def sweep_env(cache: Path, **extra: str) -> dict:
    return {**os.environ, "PYTHONWARNINGS": "ignore", "WORKBENCH_CACHE": str(cache), **extra}


def killed_sweep(folder: Path, cache: Path, **kill_point: str) -> subprocess.CompletedProcess:
    """``workbench sweep`` in a child that dies (os._exit, as SIGKILL: no cleanup) at the kill
    point of tests/kill_hooks/sitecustomize.py."""
    env = sweep_env(cache, **kill_point)
    env["PYTHONPATH"] = os.pathsep.join([str(HOOKS), str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "workbench", "sweep", "spec.yaml", "--quiet"],
                          cwd=folder, env=env, capture_output=True, text=True)


def assert_sweep_finishes(folder: Path, cache: Path) -> None:
    """The real command, run again, finishes the sweep: both trials complete, one study."""
    result = subprocess.run([sys.executable, "-m", "workbench", "sweep", "spec.yaml", "--quiet"],
                            cwd=folder, env=sweep_env(cache), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    storage = f"sqlite:///{folder / 'workbench.db'}"
    (name,) = optuna.get_all_study_names(storage)
    trials = optuna.load_study(study_name=name, storage=storage).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]


@pytest.mark.slow
def test_a_kill_after_any_ddl_statement_leaves_no_store_or_a_complete_one(tmp_path):
    """Photograph the disk after each of the ~420 DDL statements of a new store (MLflow's
    schema template included) and around each rename: every photograph holds each database
    absent or complete. Then die for real at a middle statement and between the two renames
    (the photographs already cover the first and the last): the same command run again
    finishes the sweep."""
    folder = tmp_path / "shots"
    spec_path = write(folder, {**SPEC, "storage": f"sqlite:///{folder / 'store' / 'wb.db'}"})
    (folder / "store").mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "tests.store_snapshots", str(spec_path), str(folder)],
        cwd=ROOT, env=sweep_env(tmp_path / "shot-cache"), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["points"] > 400, summary  # MLflow's migrations, Optuna's tables, renames
    assert summary["failures"] == [], summary["failures"]

    ddl, replaces = summary["ddl"], summary["replaces"]
    assert ddl > 400 and replaces == 3  # template, MLflow's file, Optuna's file
    points = {"middle": {"WORKBENCH_DIE_AFTER_DDL": str(ddl // 2)},
              "between the renames": {"WORKBENCH_DIE_BEFORE_REPLACE": "3"}}
    for name, point in points.items():
        folder, cache = tmp_path / name.replace(" ", "-"), tmp_path / f"{name}-cache"
        write(folder, SPEC)
        died = killed_sweep(folder, cache, **point)
        assert died.returncode == 137, (name, died.returncode, died.stderr[-2000:])
        assert_sweep_finishes(folder, cache)


def test_a_half_built_mlflow_database_left_by_an_older_version_is_refused(tmp_path, write_spec):
    """A store half-built by an interrupted set-up before stores were built atomically: one
    message saying so and how to repair it, exit 2, nothing written."""
    mlflow_db = tmp_path / "workbench.mlflow.db"
    with closing(sqlite3.connect(mlflow_db)) as db, db:
        db.execute("CREATE TABLE experiments (experiment_id INTEGER PRIMARY KEY)")
        db.execute("CREATE TABLE runs (run_uuid TEXT PRIMARY KEY)")
    assert_refused(tmp_path, write_spec(SPEC), "half-built mlflow schema", "delete it")


# ----------------------------------------------------------------------- bad stores (item 7)


def snapshot(folder: Path) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
            if not p.is_symlink()}


def assert_refused(folder: Path, spec_path: Path, *words: str, commands=("sweep",)) -> None:
    """Each command on the store: exit 2, one line naming it, nothing written."""
    before = snapshot(folder)
    for command in commands:
        result = run_cli(command, spec_path.name, cwd=folder)
        assert result.returncode == 2, (command, result.stdout, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        for word in words:
            assert word in lines[0], (word, lines[0])
        assert snapshot(folder) == before, "the refused command wrote files"


@pytest.fixture(scope="module")
def good_store(tmp_path_factory):
    """A finished tiny sweep's store, copied by the tests that spoil it."""
    folder = tmp_path_factory.mktemp("good")
    write(folder, SPEC)
    result = run_cli("sweep", "spec.yaml", "--quiet", cwd=folder)
    assert result.returncode == 0, result.stderr[-2000:]
    return folder


def spoiled(good_store: Path, tmp_path: Path) -> Path:
    for name in ("workbench.db", "workbench.mlflow.db", "spec.yaml"):
        shutil.copy(good_store / name, tmp_path / name)
    return tmp_path / "spec.yaml"


@pytest.mark.parametrize("which", ["workbench.db", "workbench.mlflow.db"])
def test_a_truncated_database_is_refused(good_store, tmp_path, which):
    spec_path = spoiled(good_store, tmp_path)
    path = tmp_path / which
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert_refused(tmp_path, spec_path, which, "truncated")


@pytest.mark.parametrize("which", ["workbench.db", "workbench.mlflow.db"])
def test_a_corrupt_database_is_refused(good_store, tmp_path, which):
    spec_path = spoiled(good_store, tmp_path)
    path = tmp_path / which
    data = bytearray(path.read_bytes())
    data[100:4096] = os.urandom(3996)  # the schema table on page 1
    path.write_bytes(bytes(data))
    assert_refused(tmp_path, spec_path, which, "corrupt")


def set_mlflow_revision(path: Path, revision: str) -> None:
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE alembic_version SET version_num = ?", (revision,))


def test_an_mlflow_database_at_an_older_revision_is_refused_with_the_upgrade_command(
        good_store, tmp_path):
    spec_path = spoiled(good_store, tmp_path)
    older = next(r for r in store_schema.known("mlflow") if r != store_schema.head("mlflow"))
    set_mlflow_revision(tmp_path / "workbench.mlflow.db", older)
    assert_refused(tmp_path, spec_path, "workbench.mlflow.db", older, "mlflow db upgrade")


def test_an_mlflow_database_at_an_unknown_newer_revision_is_refused(good_store, tmp_path):
    spec_path = spoiled(good_store, tmp_path)
    set_mlflow_revision(tmp_path / "workbench.mlflow.db", "ffffffffffff")
    assert_refused(tmp_path, spec_path, "workbench.mlflow.db", "ffffffffffff", "newer")


def test_an_optuna_database_at_an_older_revision_is_refused(good_store, tmp_path):
    spec_path = spoiled(good_store, tmp_path)
    older = next(r for r in store_schema.known("optuna") if r != store_schema.head("optuna"))
    with closing(sqlite3.connect(tmp_path / "workbench.db")) as db, db:
        db.execute("UPDATE alembic_version SET version_num = ?", (older,))
    assert_refused(tmp_path, spec_path, "workbench.db", "optuna storage upgrade")


def test_a_directory_where_the_store_file_should_be_is_refused(tmp_path, write_spec):
    (tmp_path / "workbench.db").mkdir()
    assert_refused(tmp_path, write_spec(SPEC), "workbench.db", "is a directory",
                   commands=("sweep", "status", "report"))


def test_a_symlink_to_a_text_file_is_refused(tmp_path, write_spec):
    (tmp_path / "notes.txt").write_text("my notes\n" * 50)
    (tmp_path / "workbench.db").symlink_to(tmp_path / "notes.txt")
    # the spec resolves the link: the message names the file it points to
    assert_refused(tmp_path, write_spec(SPEC), "notes.txt", "not a SQLite database")


def test_a_store_path_under_a_regular_file_is_refused(tmp_path, write_spec):
    (tmp_path / "plain.txt").write_text("x")
    spec_path = write_spec({**SPEC, "storage": f"sqlite:///{tmp_path / 'plain.txt' / 'x.db'}"})
    assert_refused(tmp_path, spec_path, "plain.txt", "not a directory")


def test_someone_elses_sqlite_database_is_refused_and_left_as_it_was(tmp_path, write_spec):
    with closing(sqlite3.connect(tmp_path / "workbench.db")) as db, db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers (name) VALUES ('Ada')")
    assert_refused(tmp_path, write_spec(SPEC), "workbench.db", "not a Workbench store",
                   "customers")
    with closing(sqlite3.connect(tmp_path / "workbench.db")) as db, db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    assert tables == {"customers"}


def test_the_store_check_accepts_a_good_store_and_writes_nothing(good_store):
    before = snapshot(good_store)
    Store.from_url(f"sqlite:///{good_store / 'workbench.db'}").check()
    assert snapshot(good_store) == before


@pytest.mark.slow
def test_a_kill_while_the_postgresql_schema_is_built_then_the_rerun_finishes(postgres, tmp_path):
    """MLflow's database is built under a temporary name and renamed: a kill half-way leaves
    the target absent, and the same command run again drops the leftover and finishes."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    url = postgres.new_database()
    folder, cache = tmp_path / "pg", tmp_path / "cache"
    write(folder, {**SPEC, "storage": url})
    died = killed_sweep(folder, cache, WORKBENCH_DIE_AFTER_DDL="200")
    assert died.returncode == 137, died.stderr[-2000:]
    name = make_url(url).database
    admin = sa.create_engine(postgres.url(), poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        databases = {row[0] for row in conn.execute(sa.text("SELECT datname FROM pg_database"))}
    assert f"{name}_mlflow" not in databases and f"{name}_mlflow__building" in databases
    result = subprocess.run([sys.executable, "-m", "workbench", "sweep", "spec.yaml", "--quiet"],
                            cwd=folder, env=sweep_env(cache), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    with admin.connect() as conn:
        databases = {row[0] for row in conn.execute(sa.text("SELECT datname FROM pg_database"))}
    admin.dispose()
    assert f"{name}_mlflow" in databases and f"{name}_mlflow__building" not in databases
    storage = Store.from_url(url).optuna_url
    (study,) = optuna.get_all_study_names(storage)
    trials = optuna.load_study(study_name=study, storage=storage).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
