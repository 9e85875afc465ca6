#!/usr/bin/env bash
# Set up (the venv; PostgreSQL's server binaries and Debian's chromium for the tests that need
# a real database or browser), lint,
# and run the whole test suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_postgres.sh
bash scripts/setup_browser.sh
.venv/bin/ruff check .
.venv/bin/lint-imports  # the import rules of DESIGN.md (pyproject.toml, [tool.importlinter])
.venv/bin/python -m pytest -q --durations=10 "$@"
