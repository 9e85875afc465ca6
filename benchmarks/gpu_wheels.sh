#!/usr/bin/env bash
# Wheels for the device check (gpu_check.sh) on a machine that has torch, transformers, pandas,
# matplotlib, scipy and pytest but none of workbench's other dependencies, and no network.
#
#   bash benchmarks/gpu_wheels.sh [PYTHON_VERSION]   # default 3.12 (the GPU machine's)
#
# Downloads (at install time, from the package index) the wheels of what `workbench run` and
# the method registry import beyond that set, at the versions installed in .venv, for CPython
# PYTHON_VERSION on manylinux x86_64, into .whl/ (git-ignored; about 10 MB). gpu_check.sh
# installs them offline from there (WHEELS=DIR for another folder). MLflow is left out: with
# its dependencies (pyarrow, scikit-learn, Flask...) it outgrows what one call may carry, so
# the check's sweep step runs untracked and says so.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${1:-3.12}"
abi="cp${version/./}"
out="$root/.whl"
packages=(pydantic pydantic_core annotated-types typing-inspection optuna SQLAlchemy
          alembic Mako colorlog cmaes gymnasium Farama-Notifications cloudpickle PyYAML)

pins=$("$root/.venv/bin/python" - "${packages[@]}" <<'PY'
import importlib.metadata as md
import sys

print(" ".join(f"{name}=={md.version(name)}" for name in sys.argv[1:]))
PY
)
rm -rf "$out"
mkdir -p "$out"
# shellcheck disable=SC2086
"$root/.venv/bin/python" -m pip download -q --no-deps --only-binary=:all: \
    --python-version "$version" --implementation cp --abi "$abi" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$out" $pins
echo "$(ls "$out" | wc -l) wheels for CPython $version in $out ($(du -sh "$out" | cut -f1)):"
ls "$out"
