"""How long each command takes to start, against Python's own start-up, in one run.

    .venv/bin/python benchmarks/cli_start.py

Each command runs REPEATS times in a fresh process (``workbench.entry`` as the console script
does); the figure is the median wall time, as a ratio to the median of ``python -c pass``, and
which heavy libraries it imported (``python -X importtime``). The listings read the catalogue
(``workbench/catalogue.py``), built once before timing as a first call would; ``status`` runs on
a store the quickstart sweep has not reached (it must still resolve the spec, and so import the
task's and the methods' modules, torch among them).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 5
HEAVY = ("torch", "transformers", "mlflow", "optuna", "pandas", "sklearn", "gymnasium",
         "pydantic", "matplotlib")
ENTRY = "import sys; from workbench.entry import main; sys.argv[0] = 'workbench'; " \
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
        spec = str(ROOT / "sweeps" / "quickstart.yaml")
        store = f"sqlite:///{Path(home) / 'none.db'}"
        commands = {
            "--help": ["--help"], "--version": ["--version"], "methods": ["methods"],
            "tasks": ["tasks"], "tasks logreg": ["tasks", "logreg"],
            "methods step_size/polyak": ["methods", "step_size/polyak"],
            "new-method": ["new-method", "step_size", "my_rule", "--root", home],
            "status": ["status", spec, "--storage", store],
        }
        (Path(home) / "methods" / "step_size").mkdir(parents=True)
        (Path(home) / "tests").mkdir()
        subprocess.run([python, "-c", ENTRY, "methods"], env=env, cwd=home, check=True,
                       capture_output=True)  # the catalogue, as the first call builds it
        baseline = statistics.median(timed([python, "-c", "pass"], env)
                                     for _ in range(REPEATS))
        print(f"python -c pass: {baseline * 1e3:.0f} ms (median of {REPEATS})")
        print(f"{'command':<36}{'median':>9}{'ratio':>8}{'own':>9}  heavy imports")
        for label, args in commands.items():
            argv = [python, "-c", ENTRY, *args]
            times = []
            for _ in range(REPEATS):
                for leftover in Path(home).glob("**/my_rule.py"):
                    leftover.unlink()
                for leftover in Path(home).glob("tests/test_method_my_rule.py"):
                    leftover.unlink()
                times.append(timed(argv, env))
            median = statistics.median(times)
            print(f"workbench {label:<26}{median * 1e3:>7.0f} ms{median / baseline:>7.1f}x"
                  f"{(median - baseline) * 1e3:>6.0f} ms  "
                  f"{', '.join(heavy_imports(argv, env)) or '-'}")


if __name__ == "__main__":
    main()
