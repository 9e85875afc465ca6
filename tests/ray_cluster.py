"""A real two-node Ray cluster on this machine, and an MLflow artifact server, for the tests of
the Ray launcher.

The head (``ray start --head``, 1 CPU) and a second node (``ray start --address ... --block``,
2 CPUs and a resource of its own) are separate raylets as on two hosts; the second runs in a
session of its own, so a test can stop that node alone (SIGKILL to its process group: the
raylet and its workers die as with a lost host). Token authentication is on, with a token of
the test's (Ray's default for clusters started by ``ray start``).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from tests.postgres import _free_port
from tests.waiting import scaled, wait_until

BIN = Path(sys.executable).parent
# prints "alive: N"; the driver's stdout also carries Ray's own lines (a raylet's "node ...
# marked dead" while a lost node is noticed), so the count is read from its tagged line only
NODES_ALIVE = ("import sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', "
               "log_to_driver=False); print(f\"alive: {sum(n['Alive'] for n in ray.nodes())}\")")
OBJECT_STORE = str(80 * 1024 * 1024)  # bytes per node: the tests move no objects


class RayCluster:
    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="wb-ray-"))
        token = self.folder / "token"
        token.write_text(secrets.token_hex(32))
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
                    "RAY_USAGE_STATS_ENABLED": "0", "PYTHONWARNINGS": "ignore"}
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.second = None
        subprocess.run([str(BIN / "ray"), "start", "--head", f"--port={self.port}",
                        "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0",
                        f"--object-store-memory={OBJECT_STORE}", "--include-dashboard=false",
                        "--disable-usage-stats"], env=self.env, check=True,
                       capture_output=True, timeout=scaled(180))
        self.add_second_node()

    def nodes_alive(self) -> int:
        found = subprocess.run([sys.executable, "-c", NODES_ALIVE, self.address], env=self.env,
                               capture_output=True, text=True, timeout=scaled(120))
        counts = re.findall(r"^alive: (\d+)$", found.stdout, re.MULTILINE)
        return int(counts[-1]) if counts else 0

    def add_second_node(self) -> None:
        """Start the second node (again, after ``stop_second_node``) and wait until the
        cluster sees it."""
        log = open(self.folder / "second-node.log", "ab")
        self.second = subprocess.Popen(
            [str(BIN / "ray"), "start", f"--address={self.address}",
             "--node-ip-address=127.0.0.1", "--num-cpus=2", "--num-gpus=0",
             "--resources={\"second_node\": 2}", f"--object-store-memory={OBJECT_STORE}",
             "--disable-usage-stats", "--block"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: self.nodes_alive() == 2, "the second Ray node to join", 180,
                   interval=1.0)

    def stop_second_node(self) -> None:
        """The second node dies as a lost host does: its raylet and workers, at once."""
        os.killpg(self.second.pid, signal.SIGKILL)
        self.second.wait()

    def close(self) -> None:
        if self.second is not None and self.second.poll() is None:
            self.stop_second_node()
        subprocess.run([str(BIN / "ray"), "stop", "--force"], env=self.env,
                       capture_output=True, timeout=scaled(120))
        shutil.rmtree(self.folder, ignore_errors=True)


class ArtifactServer:
    """``mlflow server --artifacts-only``: MLflow's artifact proxy on a free localhost port,
    storing into a folder of its own."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="wb-artifacts-"))
        self.port = _free_port()
        self.root = f"mlflow-artifacts://127.0.0.1:{self.port}"
        log = open(self.folder / "server.log", "ab")
        self.process = subprocess.Popen(
            [str(BIN / "mlflow"), "server", "--artifacts-only", "--serve-artifacts",
             "--artifacts-destination", str(self.folder / "store"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            cwd=self.folder)  # no --backend-store-uri: MLflow 3 defaults to ./mlflow.db
        wait_until(self._healthy, "the MLflow artifact server to answer", 120, interval=0.5)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5):
                return True
        except OSError:
            if self.process.poll() is not None:
                raise AssertionError((self.folder / "server.log").read_text()[-3000:]) from None
            return False

    def files(self) -> list[Path]:
        return [p for p in (self.folder / "store").rglob("*") if p.is_file()]

    def close(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=scaled(60))
        shutil.rmtree(self.folder, ignore_errors=True)
