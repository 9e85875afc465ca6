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
from urllib.parse import quote

import pytest

from tests.waiting import scaled, wait_until


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
                  "-t", str(int(scaled(120))),
                  "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
                        "-c max_connections=200 -c fsync=off", "start")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, os.path.join(self.bindir, tool), *args], check=True,
                       capture_output=True, timeout=scaled(300))

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

    def new_password_database(self, password: str) -> str:
        """A new database owned by a new role that must log in with ``password`` (SCRAM, not
        trust); returns its URL, the password in it."""
        import psycopg2

        role, name = f"r_{uuid.uuid4().hex[:12]}", f"t_{uuid.uuid4().hex[:12]}"
        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres",
                                dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE ROLE "{role}" LOGIN CREATEDB PASSWORD %s', (password,))
            cur.execute(f'CREATE DATABASE "{name}" OWNER "{role}"')
            hba = os.path.join(self.data, "pg_hba.conf")
            with open(hba) as handle:
                rules = handle.read()
            with open(hba, "w") as handle:  # the first matching line wins
                handle.write(f"host all {role} 127.0.0.1/32 scram-sha-256\n{rules}")
            cur.execute("SELECT pg_reload_conf()")
        conn.close()
        self._await_password_required(role, name)
        secret = quote(password, safe="")
        return f"postgresql+psycopg2://{role}:{secret}@127.0.0.1:{self.port}/{name}"

    def _await_password_required(self, role: str, database: str) -> None:
        """Wait until the server has reloaded its rules: a login without a password fails."""
        import psycopg2

        seen = {"answer": "nothing yet"}

        def password_required() -> bool:
            try:
                psycopg2.connect(host="127.0.0.1", port=self.port, user=role, dbname=database,
                                 password="", connect_timeout=5).close()
                seen["answer"] = "a login without a password succeeded"
            except psycopg2.OperationalError as err:
                seen["answer"] = str(err).strip()
                return "password" in seen["answer"]
            return False

        wait_until(password_required, f"the server to require a password of {role}", 60,
                   interval=0.1, describe_state=lambda: seen["answer"])

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
