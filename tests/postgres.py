"""A throwaway PostgreSQL server for tests that need many processes on one real database.

Uses Debian's PostgreSQL binaries (``.ci/run`` installs the ``postgresql`` package): a fresh
cluster in a temporary folder, trust authentication on 127.0.0.1 and a free port, stopped at
the end of the session. When the binaries are missing the tests that need it are skipped with
that reason (CI always has them).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest


def _binaries() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self, bindir: str):
        self.bindir = bindir
        self.folder = tempfile.mkdtemp(prefix="wb-pg-")
        self.port = _free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.folder, "postgres", "postgres")
        self.data = os.path.join(self.folder, "data")
        self._run("initdb", "-D", self.data, "--auth=trust", "-U", "postgres", "-E", "UTF8")
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.folder, "log"), "-w",
                  "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                        "-c max_connections=200 -c fsync=off", "start")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, os.path.join(self.bindir, tool), *args], check=True,
                       capture_output=True, timeout=120)

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL (psycopg2 driver)."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg2

        name = f"t_{uuid.uuid4().hex[:12]}"
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres",
                                dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            time.sleep(0.2)
            shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres():
    bindir = _binaries()
    if bindir is None:
        pytest.skip("PostgreSQL binaries are not installed (apt-get install postgresql)")
    server = PostgresServer(bindir)
    yield server
    server.stop()
