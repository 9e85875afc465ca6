"""What keying studies by their fingerprint costs, against the quickstart sweep it keys.

    .venv/bin/python benchmarks/fingerprint_cost.py

In one run: the quickstart sweep (`workbench sweep sweeps/quickstart.yaml`, a fresh SQLite
store, one process, as README's first command runs it) timed whole; then, each in a fresh
process (so no file is cached), the work the fingerprint adds to it:

- computing the three studies' fingerprint documents and digests (hashing every module the
  runs import, found by parsing their imports), on top of what loading the spec costs anyway;
- the sweep's extra bookkeeping in the store: reading its experiment's study runs to find the
  superseded ones, on the store the sweep just wrote.

Each is the median of several fresh processes; the figure is their sum as a fraction of the
sweep's time (the target: under 1%).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "sweeps" / "quickstart.yaml"
REPEATS = 7

# the fingerprints of the quickstart's studies, cold, after the imports the spec needs anyway
FINGERPRINTS = """
import sys, time
from workbench.spec import resolve, schema
from workbench.spec.sweep import read_yaml
from workbench.testbeds import get_task
from workbench import registry
get_task("logreg"); registry.available()
from workbench.common import fingerprint
sweep_spec = schema.SweepSpec.model_validate(read_yaml(sys.argv[1]))
start = time.perf_counter()
sweep = resolve.resolve(sweep_spec, sys.argv[1])
digests = [plan.fingerprint for plan in sweep.studies]
print(time.perf_counter() - start)
"""

# resolve without fingerprints: the same call with the document function stubbed out (a
# distinct trivial document per study, as distinct studies must have)
BASELINE = FINGERPRINTS.replace(
    "start = time.perf_counter()",
    "import itertools\ncount = itertools.count()\n"
    "resolve.fingerprint_document = lambda *a: {'n': next(count)}\nstart = time.perf_counter()")

# the supersede bookkeeping: the experiment's study runs, read once per sweep
BOOKKEEPING = """
import sys, time
from workbench.engine.studies import study_runs
from workbench.store.database import Store
client = Store.from_url(sys.argv[1]).mlflow_client()
experiment = client.get_experiment_by_name("quickstart").experiment_id
study_runs(client, experiment)  # the client's own first-call set-up is not ours
start = time.perf_counter()
study_runs(client, experiment)
print(time.perf_counter() - start)
"""


def python(code: str, *args: str) -> float:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True,
                         text=True, cwd=ROOT)
    return float(out.stdout.strip().splitlines()[-1])


def median_of(code: str, *args: str) -> float:
    return statistics.median(python(code, *args) for _ in range(REPEATS))


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = f"sqlite:///{Path(folder) / 'bench.db'}"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "workbench", "sweep", str(SPEC), "--storage",
                        store, "--quiet", "--device", "cpu"], check=True, cwd=folder,
                       capture_output=True)
        sweep_seconds = time.perf_counter() - start
        with_fp = median_of(FINGERPRINTS, str(SPEC))
        without = median_of(BASELINE, str(SPEC))
        bookkeeping = median_of(BOOKKEEPING, store)
    added = max(0.0, with_fp - without) + bookkeeping
    print(f"quickstart sweep (fresh store, one process):      {sweep_seconds:8.2f} s")
    print(f"resolving its spec with fingerprints (cold):       {with_fp * 1e3:8.1f} ms")
    print(f"resolving its spec without them:                   {without * 1e3:8.1f} ms")
    print(f"reading the sweep's study runs (supersede check):  {bookkeeping * 1e3:8.1f} ms")
    print(f"added by fingerprints: {added * 1e3:.1f} ms = {added / sweep_seconds:.2%} of the "
          f"sweep's time (target: under 1%; medians of {REPEATS} fresh processes)")


if __name__ == "__main__":
    main()
