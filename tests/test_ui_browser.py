"""The MLflow UI of a real small sweep, rendered in headless chromium (Debian's package).

`bash scripts/setup_browser.sh` installs the browser; without /usr/bin/chromium the test skips.
Each render gets a fresh profile, so the page shows what a first-time user sees.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli, tiny_spec
from tests.waiting import scaled, wait_until

CHROMIUM = Path("/usr/bin/chromium")
METHODS = ("constant", "polyak")
SEEDS = (0, 1)
TRIALS = 2

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at "
                       "/usr/bin/chromium; `bash scripts/setup_browser.sh` installs it"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen, grace: float = 5) -> None:
    """SIGTERM the process group (mlflow ui starts job consumers in it); SIGKILL stragglers."""
    deadline = time.time() + grace
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        while time.time() < deadline:
            os.killpg(proc.pid, 0)  # ProcessLookupError once every member has exited
            proc.poll()  # reap the leader, which would otherwise linger as a zombie
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _chromium(tmp_path: Path, profile: str, url: str, screenshot: Path, budget_ms: int) -> str:
    """Load URL in headless chromium with `budget_ms` of virtual time (the page's fetches
    complete within it), save a screenshot and return the DOM."""
    command = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / profile}", "--window-size=1600,1000",
               f"--virtual-time-budget={budget_ms}", "--dump-dom", f"--screenshot={screenshot}",
               url]
    with open(tmp_path / "chromium.log", "a") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True,
                                start_new_session=True)
        try:
            return proc.communicate(timeout=scaled(120))[0]
        finally:
            _kill_group(proc)


def _visible_text(dom: str) -> str:
    dom = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)))


def _render(tmp_path: Path, name: str, url: str, ready: re.Pattern) -> str:
    """The page's text once `ready` shows up in it (trying longer virtual-time budgets), with
    its screenshot in tmp_path / f"{name}.png"."""
    text = ""
    for attempt, budget_ms in enumerate((15_000, 30_000, 60_000)):
        dom = _chromium(tmp_path, f"profile-{name}-{attempt}", url, tmp_path / f"{name}.png",
                        budget_ms=budget_ms)
        text = _visible_text(dom)
        if ready.search(text):
            break
    return text


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def _experiment_id(base: str, name: str) -> str:
    """Poll the UI's REST API until it answers; the experiment's id."""
    query = urllib.parse.urlencode({"experiment_name": name})
    url = f"{base}/api/2.0/mlflow/experiments/get-by-name?{query}"
    seen = {"answer": "no request made yet"}

    def answer():
        try:
            with urllib.request.urlopen(url, timeout=scaled(5)) as response:
                return json.load(response)["experiment"]["experiment_id"]
        except OSError as err:
            seen["answer"] = repr(err)
            return None

    return wait_until(answer, f"the UI's REST API to answer {url}", 300, interval=0.5,
                      describe_state=lambda: f"last answer: {seen['answer']}")


def test_the_ui_lands_on_trials_with_their_columns_and_charts_by_method(write_spec, tmp_path):
    spec = write_spec(tiny_spec(methods={"step_size": list(METHODS)}, trials=TRIALS,
                                description="a browser's view of two methods",
                                seeds=len(SEEDS), storage=f"sqlite:///{tmp_path / 'store.db'}"))
    sweep = run_cli("sweep", spec, "--quiet", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    port = _free_port()
    ui_log = open(tmp_path / "ui.log", "w")  # what the UI server said, for a failure message
    ui = subprocess.Popen([sys.executable, "-m", "workbench", "ui", str(spec), "--port",
                           str(port)], cwd=tmp_path, stdout=ui_log, stderr=subprocess.STDOUT,
                          start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        experiment = _experiment_id(base, "tiny")
        links = _links(tmp_path / "ui.log")
        # once it answers, the command says so (its links come before it does)
        wait_until(lambda: "ready: the MLflow UI answers at " in
                   (tmp_path / "ui.log").read_text(), "the UI's ready line", 30)

        # The landing view: the model-training runs page (not MLflow 3's GenAI overview), one
        # row per trial with its seed runs nested under it, method/seed/objective as columns,
        # and the spec's description on the experiment.
        landing = links["trials, each with its seed runs one click away (landing)"]
        assert "workflowType=machine_learning" in landing and experiment in landing
        trial_row = re.compile(r"\b(constant|polyak) t(\d+)\b(?! s\d)")
        text = _render(tmp_path, "landing", landing, trial_row)
        assert "a browser's view of two methods" in text, text[-2000:]
        for header in ("workbench.method", "workbench.seed", "objective", "train/loss",
                       "step_size.lr"):
            assert header in text, (header, text[-2000:])
        assert {(m, int(t)) for m, t in trial_row.findall(text)} == \
            {(m, t) for m in METHODS for t in range(TRIALS)}, text[-2000:]
        assert "matching runs" in text and "Traces" in text and "Overview" not in text, \
            text[-2000:]
        assert _png_size(tmp_path / "landing.png") == (1600, 1000)

        # Trials best first: each trial row names its method and aggregated objective.
        best = _render(tmp_path, "best", links["trials, best objective first"],
                       re.compile(r"\bt\d+ \| loss="))
        losses = [float(v) for v in re.findall(r"\bt\d+ \| loss=([-+0-9.e]+)", best)]
        assert len(losses) == len(METHODS) * TRIALS and losses == sorted(losses), best[-2000:]

        # Each study's best finished trial: its seed runs by a search on their parent.
        for method in METHODS:
            link = links[f"seeds of {method}'s best trial:"]
            query = urllib.parse.parse_qs(link.split("?", 1)[1])
            parent = re.fullmatch(r"tags\.`mlflow\.parentRunId` = '(\w+)'",
                                  query["searchFilter"][0])[1]
            trials = _search(base, experiment, f"tags.`workbench.kind` = 'trial' and "
                                               f"tags.`workbench.method` = '{method}'")
            objective = {r["info"]["run_id"]: {m["key"]: m["value"] for m in
                                               r["data"].get("metrics", [])}.get("objective")
                         for r in trials}
            finished = {k: v for k, v in objective.items() if v is not None}
            assert parent == min(finished, key=finished.get), (method, objective)

        # The metric chart grouped by method: one aggregated line per method, drawn.
        chart_url = links["train/loss by method (mean of its best trial's seed runs, as in the "
                          "report)"]
        seen = {"dom": ""}

        def grouped_chart_drawn() -> bool:
            seen["dom"] = _chromium(tmp_path, f"profile-grouped-{time.monotonic_ns()}",
                                    chart_url, tmp_path / "grouped.png", budget_ms=30_000)
            text = _visible_text(seen["dom"])
            return all(f"Group: {m}" in text for m in METHODS) and "main-svg" in seen["dom"] \
                and "(train/loss)" in text

        wait_until(grouped_chart_drawn, f"{chart_url} to draw train/loss grouped by method",
                   600, interval=1, describe_state=lambda: _visible_text(seen["dom"])[-1500:])

        # A seed run's page charts its step metrics.
        run_id = _a_seed_run(base, experiment)
        _metric_history(base, run_id, "cost/samples")  # the API the charts read answers
        page = f"{base}/#/experiments/{experiment}/runs/{run_id}/model-metrics"
        seen = {"dom": "", "attempts": 0}

        def charts_drawn() -> bool:
            attempt = seen["attempts"] = seen["attempts"] + 1
            seen["dom"] = _chromium(tmp_path, f"profile-chart-{attempt}", page,
                                    tmp_path / "chart.png",
                                    budget_ms=min(20_000 * attempt, 80_000))
            return "(cost/samples)" in _visible_text(seen["dom"]) and "main-svg" in seen["dom"]

        wait_until(charts_drawn, f"the seed run's page {page} to draw its cost/samples chart",
                   600, interval=1, describe_state=lambda: (
                       f"{seen['attempts']} renders, each with a fresh profile; the last page "
                       f"read: {_visible_text(seen['dom'])[-1500:]}\nthe UI server's log ended "
                       f"with: {(tmp_path / 'ui.log').read_text()[-1500:]}"))
        assert (tmp_path / "chart.png").stat().st_size > 20_000
        keep = ROOT / "test-artifacts"  # git-ignored; the screenshots outlive the test
        keep.mkdir(exist_ok=True)
        for name in ("landing.png", "best.png", "grouped.png", "chart.png"):
            shutil.copy(tmp_path / name, keep / f"ui-{name}")
    finally:
        _kill_group(ui)
        ui_log.close()


def _links(log: Path) -> dict[str, str]:
    """The views `workbench ui` printed: label -> URL, once it has printed them."""
    def printed():
        found = dict(re.findall(r"^  (\S.*?\S)\s+(http://\S+)$", log.read_text(), re.M))
        return found if len(found) >= 4 else None

    return wait_until(printed, f"`workbench ui` to print its views in {log}", 300,
                      interval=0.5, describe_state=lambda: log.read_text()[-1500:])


def _metric_history(base: str, run_id: str, key: str) -> list:
    """Poll the UI's REST API until it returns run_id's history of `key` (non-empty)."""
    query = urllib.parse.urlencode({"run_id": run_id, "metric_key": key})
    url = f"{base}/api/2.0/mlflow/metrics/get-history?{query}"
    seen = {"answer": "no request made yet"}

    def answer():
        try:
            with urllib.request.urlopen(url, timeout=scaled(30)) as response:
                metrics = json.load(response).get("metrics", [])
        except OSError as err:
            seen["answer"] = repr(err)
            return None
        seen["answer"] = f"{len(metrics)} points"
        return metrics or None

    return wait_until(answer, f"the UI's REST API to return the history at {url}", 300,
                      interval=0.5, describe_state=lambda: f"last answer: {seen['answer']}")


def _a_seed_run(base: str, experiment: str) -> str:
    return _search(base, experiment, "tags.`workbench.kind` = 'seed'")[0]["info"]["run_id"]


def _search(base: str, experiment: str, search: str) -> list[dict]:
    """The runs of the experiment that match ``search``, through the UI's REST API."""
    body = json.dumps({"experiment_ids": [experiment], "max_results": 1000,
                       "filter": search}).encode()
    request = urllib.request.Request(f"{base}/api/2.0/mlflow/runs/search", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=scaled(30)) as response:
        return json.load(response)["runs"]
