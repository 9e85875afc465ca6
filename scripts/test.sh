#!/usr/bin/env bash
# Set up (the venv; PostgreSQL's server binaries for the tests that need a real one), lint,
# and run the whole test suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_postgres.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
