"""Trial throughput of a tiny objective with 1, 2 and 4 workers on PostgreSQL, as plain worker
processes (`workbench sweep --workers N`) and as Ray workers (`--ray ADDRESS --workers N`, on a
two-node Ray cluster of this machine: tests/ray_cluster.py), each as a ratio to one plain worker
measured in the same run; the per-trial overhead Ray adds; and the peak number of connections
each run held to the store's two databases (sampled from pg_stat_activity every 20 ms).

    .venv/bin/python benchmarks/ray_throughput.py [--trials 40]

Each run is a whole `workbench sweep` command on a database of its own (start-up included:
importing the workbench, joining the cluster, starting the workers). A
throwaway PostgreSQL server is started (Debian's binaries, as the tests do).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.postgres import PostgresServer, _binaries  # noqa: E402
from tests.ray_cluster import RayCluster  # noqa: E402


def spec(url: str, trials: int) -> dict:
    return {"name": "throughput", "task": {"name": "logreg", "params": {"n_samples": 64,
                                                                         "dim": 5}},
            "methods": {"step_size": ["constant"]}, "seeds": 1, "trials": trials,
            "sampler": {"name": "random", "seed": 0}, "pruner": "none",
            "budget": {"steps": 5}, "storage": url,
            "launcher": {"cpus_per_worker": 0.5}}


class Peak:
    """The most connections seen at once to ``database`` and its MLflow twin."""

    def __init__(self, server: PostgresServer, database: str):
        import psycopg2

        self.conn = psycopg2.connect(host="127.0.0.1", port=server.port, user="postgres",
                                     dbname="postgres")
        self.conn.autocommit = True
        self.names, self.most, self.stop = (database, f"{database}_mlflow"), (0, 0), False
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        with self.conn.cursor() as cur:
            while not self.stop:
                cur.execute("SELECT datname, COUNT(*) FROM pg_stat_activity WHERE datname IN "
                            "(%s, %s) GROUP BY datname", self.names)
                found = dict(cur.fetchall())
                now = tuple(found.get(n, 0) for n in self.names)
                if sum(now) > sum(self.most):
                    self.most = now
                time.sleep(0.02)

    def close(self) -> tuple[int, int]:
        self.stop = True
        self.thread.join()
        self.conn.close()
        return self.most


def run(server, cluster, folder: Path, trials: int, workers: int, ray: bool) -> dict:
    url = server.new_database()
    path = folder / f"{'ray' if ray else 'plain'}-{workers}.yaml"
    path.write_text(yaml.safe_dump(spec(url, trials)))
    command = [sys.executable, "-m", "workbench", "sweep", str(path), "--quiet", "--workers",
               str(workers)] + (["--ray", cluster.address] if ray else [])
    peak = Peak(server, url.rsplit("/", 1)[1])
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=cluster.env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    optuna_peak, mlflow_peak = peak.close()
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return {"wall": wall, "optuna": optuna_peak, "mlflow": mlflow_peak,
            "steady": steady_rate(url)}


def steady_rate(url: str) -> float:
    """Trials per second between the first trial's start and the last one's end (the workers'
    start-up left out), from Optuna's own timestamps."""
    import optuna

    (name,) = optuna.get_all_study_names(url)
    trials = optuna.load_study(study_name=name, storage=url).get_trials()
    first = min(t.datetime_start for t in trials)
    last = max(t.datetime_complete for t in trials)
    return len(trials) / (last - first).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()
    server = PostgresServer(_binaries())
    cluster = RayCluster()
    try:
        with tempfile.TemporaryDirectory() as folder:
            rows = {}
            for ray in (False, True):
                for workers in (1, 2, 4):
                    rows[ray, workers] = run(server, cluster, Path(folder), args.trials,
                                             workers, ray)
    finally:
        cluster.close()
    base = args.trials / rows[False, 1]["wall"]
    print(f"{args.trials} trials of a 5-step logreg run, one seed; PostgreSQL; Ray: 2 nodes "
          "(1 + 2 CPUs), 0.5 CPU per worker")
    steady_base = rows[False, 1]["steady"]
    print("whole: the command's trials per wall second; steady: trials per second from the "
          "first trial's start to the last one's end")
    print(f"{'launcher':8} {'workers':>7} {'wall s':>7} {'whole/s':>8} {'x plain 1':>9} "
          f"{'steady/s':>8} {'x plain 1':>9} {'optuna conns':>12} {'mlflow conns':>12}")
    for (ray, workers), row in rows.items():
        rate = args.trials / row["wall"]
        print(f"{'ray' if ray else 'plain':8} {workers:7d} {row['wall']:7.1f} {rate:8.2f} "
              f"{rate / base:9.2f} {row['steady']:8.2f} {row['steady'] / steady_base:9.2f} "
              f"{row['optuna']:12d} {row['mlflow']:12d}")
    for workers in (1, 2, 4):
        whole = (rows[True, workers]["wall"] - rows[False, workers]["wall"]) / args.trials
        steady = 1 / rows[True, workers]["steady"] - 1 / rows[False, workers]["steady"]
        print(f"Ray's overhead per trial at {workers} worker(s): {whole * 1000:+.0f} ms whole, "
              f"{steady * 1000:+.0f} ms steady")


if __name__ == "__main__":
    main()
