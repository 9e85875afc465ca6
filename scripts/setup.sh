#!/usr/bin/env bash
# Create .venv and install the workbench with its test and Ray extras; again only when pyproject changes.
# torch==2.13.0 first: on the CPU machines that pin takes the local CPU build instead of
# pulling a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.setup-stamp 2>/dev/null)" != "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q -e '.[test,ray]'
  echo "$stamp" > .venv/.setup-stamp
fi
