"""`workbench dashboard` and `ui` against DNS rebinding and cross-site writes, bad ports, a
server that dies, and SIGTERM: real HTTP requests to a real dashboard on a SQLite store."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.waiting import kill, scaled, tail, wait_until
from workbench.cli import servers
from workbench.cli.host_guard import allowed_hosts
from workbench.cli.main import main

ALLOWED = "wb.test"  # a name the user allows with --allowed-host


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _store(folder: Path) -> str:
    """A SQLite store with two small Optuna studies, ``a`` (two trials) and ``b`` (none)."""
    import optuna

    from workbench.store.database import Store

    url = f"sqlite:///{folder / 'store.db'}"
    Store.from_url(url).prepare(None)  # both halves, as a sweep makes them
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="a", storage=url)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    optuna.create_study(study_name="b", storage=url)
    return url


def _request(port: int, method: str, path: str, **headers: str) -> tuple[int, bytes]:
    """(status, body) of one request to 127.0.0.1:port, with these headers (Host among them:
    a browser sends the name it resolved, which may now point here)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=scaled(10))
    try:
        connection.putrequest(method, path, skip_host="Host" in headers)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _start(folder: Path, url: str, *flags: str) -> tuple[subprocess.Popen, int]:
    """`workbench dashboard` on the store, once its API answers; (the process, its port)."""
    port = _free_port()
    log = folder / f"dashboard-{port}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "workbench", "dashboard", "--storage", url,
                                 "--port", str(port), *flags], cwd=folder, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def answers():
        if proc.poll() is not None:
            raise AssertionError(f"the dashboard exited ({proc.returncode}): "
                                 f"{tail(log.read_text())}")
        try:
            return _request(port, "GET", "/api/studies")[0] == 200
        except OSError:  # not listening yet
            return False

    wait_until(answers, "the dashboard to answer", 60, interval=0.1,
               describe_state=lambda: tail(log.read_text()))
    return proc, port


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(a running dashboard's port, its store's path), allowing ALLOWED."""
    folder = tmp_path_factory.mktemp("guard")
    url = _store(folder)
    proc, port = _start(folder, url, "--allowed-host", ALLOWED)
    yield port, folder / "store.db"
    _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, for `workbench dashboard` to stop its server's session (SIGKILL would leave
    the server running), then SIGKILL should it hang."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=scaled(10))
    except subprocess.TimeoutExpired:
        kill(proc)
        proc.wait()


def _studies(port: int) -> dict[str, int]:
    status, body = _request(port, "GET", "/api/studies", Host=f"127.0.0.1:{port}")
    assert status == 200, body
    return {s["study_name"]: s["study_id"] for s in json.loads(body)["study_summaries"]}


def _tables(path: Path) -> dict[str, list]:
    """Every row of every table of the store: Optuna's tables as they stand."""
    with sqlite3.connect(path) as db:
        names = [n for (n,) in db.execute("select name from sqlite_master where type='table'")]
        return {n: sorted(map(repr, db.execute(f'select * from "{n}"'))) for n in names}


def test_a_foreign_host_is_refused(served):
    port, _ = served
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}"):
        status, body = _request(port, "GET", "/api/studies", Host=host)
        assert status == 403 and b"study" not in body, (host, status, body)


def test_a_cross_origin_delete_is_refused_and_changes_nothing(served):
    port, store = served
    before, tables = _studies(port), _tables(store)
    assert set(before) == {"a", "b"} and tables["trials"], (before, tables)
    evil = "http://evil.example"
    for host in (f"127.0.0.1:{port}", f"evil.example:{port}"):  # a cross-site page; rebound
        status, body = _request(port, "DELETE", f"/api/studies/{before['b']}", Host=host,
                                Origin=evil)
        assert status == 403, (host, status, body)
    status, body = _request(port, "POST", "/api/studies", Host=f"127.0.0.1:{port}",
                            Origin=evil, **{"Content-Type": "application/json"})
    assert status == 403, body
    assert _studies(port) == before and _tables(store) == tables
    # the same DELETE from the dashboard's own page goes through: the refusals above were
    # the guard's, not a route that deletes nothing
    status, body = _request(port, "DELETE", f"/api/studies/{before['b']}",
                            Host=f"127.0.0.1:{port}", Origin=f"http://127.0.0.1:{port}")
    assert status == 204, body
    assert _studies(port) == {"a": before["a"]}


def test_the_served_address_and_an_allowed_name_are_answered(served):
    port, _ = served
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"{ALLOWED}:{port}", ALLOWED):
        status, body = _request(port, "GET", "/api/studies", Host=host)
        assert status == 200 and "a" in {s["study_name"] for s in
                                         json.loads(body)["study_summaries"]}, (host, body)
    assert _request(port, "GET", "/api/studies", Host=f"other.test:{port}")[0] == 403


def test_the_dashboard_says_when_it_answers(served):
    """One ``ready:`` line once the server answers (its links are printed before it does)."""
    port, store = served
    log = store.parent / f"dashboard-{port}.log"
    wait_until(lambda: "ready: " in log.read_text(), "the dashboard's ready line", 30,
               interval=0.1, describe_state=lambda: tail(log.read_text()))
    (line,) = [x for x in log.read_text().splitlines() if x.startswith("ready: ")]
    assert re.fullmatch(rf"ready: Optuna's dashboard answers at http://127\.0\.0\.1:{port} "
                        r"\(\d+ s after start\)", line), line


def test_allowed_hosts_name_the_port_and_bracket_ipv6():
    assert allowed_hosts("::1", 8080, ["Wb.test", "proxy.test:443", "fe80::1"]) == [
        "127.0.0.1:8080", "localhost:8080", "[::1]:8080", "wb.test", "wb.test:8080",
        "proxy.test:443", "[fe80::1]", "[fe80::1]:8080"]
    assert allowed_hosts("0.0.0.0", 80) == ["127.0.0.1:80", "localhost:80", "[::1]:80"]
    assert "192.168.1.5:80" in allowed_hosts("192.168.1.5", 80)


@pytest.mark.parametrize("command,port", [("dashboard", "99999"), ("dashboard", "-1"),
                                          ("ui", "0"), ("ui", "http")])
def test_a_port_out_of_range_exits_2_with_one_line_before_anything(command, port, tmp_path,
                                                                   monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main([command, "--storage", f"sqlite:///{tmp_path / 'store.db'}", "--port", port])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert exited.value.code == 2 and len(errors) == 1, err
    assert "--port" in errors[0] and "1-65535" in errors[0] and repr(port) in errors[0], err
    assert not any(tmp_path.iterdir())


def test_a_bind_beyond_this_machine_needs_expose(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    url = _store(tmp_path)
    assert main(["dashboard", "--storage", url, "--host", "0.0.0.0"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--expose" in err, (out, err)
    hosts = servers._bind(Namespace(host="0.0.0.0", port=8080, allowed_host=[ALLOWED],
                                    expose=True))
    said = capsys.readouterr().err
    assert f"{ALLOWED}:8080" in hosts and "0.0.0.0 port 8080" in said
    assert f"{ALLOWED}:8080" in said and said.count("\n") == 1, said


def test_a_server_that_ends_on_its_own_ends_the_command(tmp_path):
    url = _store(tmp_path)
    with socket.socket() as taken:  # the port is someone else's: the server cannot listen
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("dashboard", "--storage", url, "--port", str(port), cwd=tmp_path,
                         timeout=60)
    assert result.returncode == 1, result
    assert "error: Optuna's dashboard stopped on its own" in result.stderr.splitlines()[-1]


def test_sigterm_stops_the_dashboard_and_its_server_within_2_seconds(tmp_path):
    proc, port = _start(tmp_path, _store(tmp_path))
    try:
        server = int(Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()[0])
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        wait_until(lambda: proc.poll() is not None and not _alive(server),
                   "the dashboard and its server to end after SIGTERM", 2, interval=0.02)
        elapsed = time.monotonic() - start
    finally:
        _stop(proc)
    assert proc.returncode == 128 + signal.SIGTERM, proc.returncode
    print(f"gone {elapsed:.2f} s after SIGTERM")


def test_stop_session_kills_what_ignores_sigterm_within_2_seconds():
    """The MLflow UI's workers take 10-20 s over SIGTERM: SIGKILL follows within a second."""
    stubborn = ("import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                "child = subprocess.Popen(['sleep', '60']); print(child.pid, flush=True); "
                "time.sleep(60)")  # the child inherits the ignored SIGTERM
    proc = subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        child = int(proc.stdout.readline())
        start = time.monotonic()
        servers._stop_session(proc)
        elapsed = time.monotonic() - start
        wait_until(lambda: not _alive(child), "the session's other process to end", 2)
    finally:
        kill(proc)
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL and elapsed < scaled(2), (proc.returncode,
                                                                          elapsed)
    print(f"stopped in {elapsed:.2f} s")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
