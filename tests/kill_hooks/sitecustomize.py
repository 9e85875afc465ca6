"""Test instrumentation, imported at start-up by a child Python whose PYTHONPATH holds this
folder: it dies as SIGKILL does (``os._exit``, no cleanup, no flush) at the kill point the
environment names.

- ``WORKBENCH_DIE_AFTER_DDL=N``: right after the N-th DDL statement (CREATE, ALTER, DROP, or
  a write to ``alembic_version``) that SQLAlchemy executes in this process;
- ``WORKBENCH_DIE_BEFORE_REPLACE=N``: right before the N-th ``os.replace``.
"""

import os

KILLED = 137


def is_ddl(statement: str) -> bool:
    words = statement.lstrip().split(None, 2)
    verb = words[0].upper() if words else ""
    if verb in ("CREATE", "ALTER", "DROP"):
        return True
    return verb in ("INSERT", "UPDATE", "DELETE") and "alembic_version" in statement


def _install() -> None:
    die_ddl = int(os.environ.get("WORKBENCH_DIE_AFTER_DDL", 0))
    die_replace = int(os.environ.get("WORKBENCH_DIE_BEFORE_REPLACE", 0))
    if not (die_ddl or die_replace):
        return
    seen = {"ddl": 0, "replace": 0}
    if die_ddl:
        import sqlalchemy
        from sqlalchemy import event

        @event.listens_for(sqlalchemy.engine.Engine, "after_cursor_execute")
        def _after(conn, cursor, statement, parameters, context, executemany):
            if is_ddl(statement):
                seen["ddl"] += 1
                if seen["ddl"] == die_ddl:
                    os._exit(KILLED)

    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        seen["replace"] += 1
        if seen["replace"] == die_replace:
            os._exit(KILLED)
        return real_replace(src, dst, *args, **kwargs)

    os.replace = replace


_install()
