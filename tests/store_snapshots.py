"""Test driver: create a sweep's store through the real set-up while photographing the disk
after every DDL statement and around every ``os.replace``.

A copy of the files taken between two statements, in the process that runs them, is what a
SIGKILL at that point leaves (the kernel keeps every byte written; a kill loses only what the
process had not written yet). For each photograph it checks that each of the store's two
databases, and the MLflow schema template in the cache, is either absent or complete (every
table of its schema's signature, at the installed revision) and that ``Store.check`` accepts
the store. Run as ``python -m tests.store_snapshots SPEC WORKDIR KEEP...``; prints a JSON
summary (photographs, DDL statements, renames, failures) and keeps the photographs numbered
KEEP (and the last) under WORKDIR/snapshots/.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import sqlalchemy
from sqlalchemy import event

from tests.kill_hooks.sitecustomize import is_ddl
from workbench.engine.studies import setup
from workbench.spec import sweep as spec
from workbench.store import schema as store_schema
from workbench.store.database import Store, StoreError


def complete(kind: str, path: Path) -> str | None:
    """None when the file at ``path`` is absent or a complete ``kind`` database, else why."""
    try:
        found = store_schema.inspect_sqlite(path)
    except StoreError as err:
        return str(err)
    if found is None:
        return None
    missing = store_schema.SIGNATURE[kind] - found.tables
    if missing or found.revision != store_schema.head(kind):
        return f"{path.name}: tables {sorted(found.tables)[:8]} revision {found.revision}"
    return None


def main(spec_path: str, workdir: str, *keep: str) -> None:
    sweep = spec.load(spec_path)
    store = Store.from_url(sweep.storage)
    folder = store.sqlite_paths()[0].parent
    cache = Path(os.environ["WORKBENCH_CACHE"])
    shots = Path(workdir) / "snapshots"
    kept = {int(k) for k in keep}
    state = {"points": 0, "ddl": 0, "replaces": 0, "failures": [], "last": None}

    def photograph(where: str) -> None:
        state["points"] += 1
        n = state["points"]
        target = shots / str(n)
        shutil.copytree(folder, target / "store", ignore=shutil.ignore_patterns("*.lock"))
        if cache.exists():
            shutil.copytree(cache, target / "cache")
        shot = Store.from_url(f"sqlite:///{target / 'store' / store.sqlite_paths()[0].name}")
        problems = [complete(kind, path) for kind, path
                    in zip(("optuna", "mlflow"), shot.sqlite_paths(), strict=True)]
        template = store_schema.template_path(target / "cache")
        problems.append(complete("mlflow", template))
        try:
            shot.check()
        except StoreError as err:
            problems.append(f"check: {err}")
        problems = [p for p in problems if p]
        if problems:
            state["failures"].append({"point": n, "after": where, "problems": problems})
        if state["last"] is not None and state["last"] not in kept:
            shutil.rmtree(shots / str(state["last"]))
        state["last"] = n

    @event.listens_for(sqlalchemy.engine.Engine, "after_cursor_execute")
    def _after(conn, cursor, statement, parameters, context, executemany):
        if is_ddl(statement):
            state["ddl"] += 1
            photograph(statement.split("(", 1)[0].strip()[:80])

    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        state["replaces"] += 1
        photograph(f"before replace {Path(dst).name}")
        real_replace(src, dst, *args, **kwargs)
        photograph(f"after replace {Path(dst).name}")

    os.replace = replace
    setup(sweep, store)
    os.replace = real_replace
    print(json.dumps({key: state[key] for key in ("points", "ddl", "replaces")}
                     | {"failures": state["failures"][:20]}))


if __name__ == "__main__":
    main(*sys.argv[1:])
