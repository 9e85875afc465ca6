"""How long each command takes to start, against Python's own start-up, in one run.

    .venv/bin/python benchmarks/cli_start.py

Each command runs REPEATS times in a fresh process (``workbench.cli.entry`` as the console script
does); the figure is the median wall time, as a ratio to the median of ``python -c pass``, and
which heavy libraries it imported (``python -X importtime``). The listings read the catalogue
(``workbench/catalogue/cache.py``), built once before timing as a first call would;
``status`` runs on
a store holding a small sweep's study, after one call has kept the spec's resolution
(``workbench/spec/resolved.py``; an edited spec or edited code resolves it again, importing the
task's and methods' modules, torch among them).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL_SWEEP = """\
name: small
task: {name: logreg, params: {n_samples: 64, dim: 5}}
methods: {step_size: [constant, polyak]}
seeds: 2
trials: 2
budget: {steps: 20}
"""
REPEATS = 5
HEAVY = ("torch", "transformers", "mlflow", "optuna", "pandas", "sklearn", "gymnasium",
         "pydantic", "matplotlib")
ENTRY = "import sys; from workbench.cli.entry import main; sys.argv[0] = 'workbench'; " \
        "sys.exit(main())"


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=env["HOME"], capture_output=True, check=False)
    return time.perf_counter() - start


def heavy_imports(argv: list[str], env: dict) -> list[str]:
    out = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=env["HOME"],
                         capture_output=True, text=True, check=False)
    seen = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    return [name for name in HEAVY if name in seen]


def main() -> None:
    python = sys.executable
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HOME": home, "WORKBENCH_CACHE": str(Path(home) / "cache")}
        spec = str(Path(home) / "small.yaml")
        store = f"sqlite:///{Path(home) / 'store.db'}"
        Path(spec).write_text(SMALL_SWEEP)
        commands = {
            "--help": ["--help"], "--version": ["--version"], "methods": ["methods"],
            "tasks": ["tasks"], "tasks logreg": ["tasks", "logreg"],
            "methods step_size/polyak": ["methods", "step_size/polyak"],
            "new-method --plugin": ["new-method", "step_size", "my_rule", "--plugin",
                                    str(Path(home) / "plugin")],
            "status": ["status", spec, "--storage", store],
        }
        subprocess.run([python, "-c", ENTRY, "methods"], env=env, cwd=home, check=True,
                       capture_output=True)  # the catalogue, as the first call builds it
        for first in (["sweep", spec, "--storage", store, "--quiet"],
                      ["status", spec, "--storage", store]):  # the store; the resolution
            done = subprocess.run([python, "-c", ENTRY, *first], env=env, cwd=home,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"workbench {' '.join(first)} failed:\n{done.stderr}")
        baseline = statistics.median(timed([python, "-c", "pass"], env)
                                     for _ in range(REPEATS))
        print(f"python -c pass: {baseline * 1e3:.0f} ms (median of {REPEATS})")
        print(f"{'command':<36}{'median':>9}{'ratio':>8}{'own':>9}  heavy imports")
        for label, args in commands.items():
            argv = [python, "-c", ENTRY, *args]
            times = []
            for _ in range(REPEATS):
                shutil.rmtree(Path(home) / "plugin", ignore_errors=True)
                times.append(timed(argv, env))
            median = statistics.median(times)
            print(f"workbench {label:<26}{median * 1e3:>7.0f} ms{median / baseline:>7.1f}x"
                  f"{(median - baseline) * 1e3:>6.0f} ms  "
                  f"{', '.join(heavy_imports(argv, env)) or '-'}")


if __name__ == "__main__":
    main()
