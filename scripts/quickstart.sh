#!/usr/bin/env bash
# The main job: set up, run the quickstart sweep into ./workbench.db, then build its report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/workbench sweep sweeps/quickstart.yaml "$@"
.venv/bin/workbench report sweeps/quickstart.yaml
echo "report: reports/out/quickstart/index.html   UI: .venv/bin/workbench ui sweeps/quickstart.yaml"
