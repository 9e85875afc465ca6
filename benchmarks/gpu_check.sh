#!/usr/bin/env bash
# The device check: one GPU, no network, at most 8 minutes; everything under $OUT.
#
#   bash benchmarks/gpu_check.sh            # on a machine with CUDA
#   bash benchmarks/gpu_check.sh --dry-run  # anywhere: the CPU, tiny sizes, seconds (CI runs it)
#
# Steps (benchmarks/gpu_check.py says what each measures): machine, parity, control_ppo,
# seed_axis, rlvr_fp32, rlvr_bf16, sweep, pytest_gpu. Each runs in its own process under its
# own timeout and writes $OUT/STEP.json (status ok|failed|skipped|timeout, figures) and
# $OUT/STEP.log; a failing step does not stop the others. $OUT/summary.txt and summary.json
# list every step's status and figures. The exit status is 0 when the summary was written.
#
# Needs no installed workbench: the repository root goes on PYTHONPATH (kept in front of what
# PYTHONPATH already holds). Python packages the machine lacks (workbench needs pydantic,
# optuna, sqlalchemy, gymnasium...) can come as wheels: WHEELS=DIR (default: .whl in the
# repository root, when present) is installed offline into a temporary site folder first.
# PYTHON picks the interpreter (default python3, else python).
set -uo pipefail

dry_run=""
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry_run="--dry-run" ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "unknown argument: $arg (only --dry-run)" >&2; exit 2 ;;
    esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$(mktemp -d -t gpu_check.XXXXXX)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"
export PYTHONUNBUFFERED=1 PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"

wheels="${WHEELS:-$root/.whl}"
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
    site="$(mktemp -d -t gpu_check_site.XXXXXX)"
    if "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --target "$site" "$wheels"/*.whl >"$OUT/wheels.log" 2>&1; then
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
        echo "wheels from $wheels installed into $site"
    else
        echo "wheels from $wheels did not install (see $OUT/wheels.log); going on without"
    fi
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"

# step name and its timeout in seconds (the sum stays under 8 minutes)
if [ -n "$dry_run" ]; then
    steps=(machine:60 parity:60 control_ppo:90 seed_axis:90 rlvr_fp32:90 rlvr_bf16:90
           sweep:120 pytest_gpu:120)
else
    steps=(machine:15 parity:45 control_ppo:100 seed_axis:60 rlvr_fp32:50 rlvr_bf16:50
           sweep:60 pytest_gpu:80)
fi

echo "device check$([ -n "$dry_run" ] && echo ' (dry run: CPU, tiny sizes)'), results in $OUT"
names=()
for entry in "${steps[@]}"; do
    name="${entry%%:*}" limit="${entry##*:}"
    names+=("$name")
    started=$(date +%s)
    if [ "$name" = pytest_gpu ]; then
        # the gpu-marked tests (skipped without CUDA); the files that hold them
        files=$(grep -l "mark.gpu" "$root"/tests/test_*.py | tr '\n' ' ')
        # shellcheck disable=SC2086
        (cd "$root" && timeout --kill-after=10 "$limit" "$PYTHON" -m pytest -m gpu -q \
            -p no:cacheprovider $files) >"$OUT/$name.log" 2>&1
        rc=$?
    else
        timeout --kill-after=10 "$limit" "$PYTHON" "$root/benchmarks/gpu_check.py" "$name" \
            --out "$OUT" $dry_run >"$OUT/$name.log" 2>&1
        rc=$?
    fi
    seconds=$(( $(date +%s) - started ))
    if [ "$name" = pytest_gpu ]; then
        tally=$(grep -E "(passed|failed|skipped|error|no tests ran)" "$OUT/$name.log" | tail -1)
        case $rc in 0|5) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
        "$PYTHON" - "$OUT/$name.json" "$status" "$seconds" "$tally" "$rc" <<'EOF'
import json, sys
path, status, seconds, tally, rc = sys.argv[1:]
json.dump({"step": "pytest_gpu", "status": status, "seconds": float(seconds),
           "note": f"pytest -m gpu: {tally or 'no summary line'} (exit {rc})",
           "figures": {"pytest_exit": int(rc)}}, open(path, "w"), indent=2)
EOF
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        "$PYTHON" - "$OUT/$name.json" "$name" "$seconds" "$limit" <<'EOF'
import json, sys
path, name, seconds, limit = sys.argv[1:]
json.dump({"step": name, "status": "timeout", "seconds": float(seconds),
           "note": f"stopped at its {limit} s limit (see {name}.log)", "figures": {}},
          open(path, "w"), indent=2)
EOF
    elif [ ! -s "$OUT/$name.json" ]; then
        "$PYTHON" - "$OUT/$name.json" "$name" "$seconds" "$rc" <<'EOF'
import json, sys
path, name, seconds, rc = sys.argv[1:]
json.dump({"step": name, "status": "failed", "seconds": float(seconds),
           "note": f"exit {rc} before writing a result (see {name}.log)", "figures": {}},
          open(path, "w"), indent=2)
EOF
    fi
    echo "  $name: exit $rc after ${seconds}s"
done

joined=$(IFS=,; echo "${names[*]}")
"$PYTHON" "$root/benchmarks/gpu_check.py" summary --out "$OUT" --steps "$joined" \
    >"$OUT/summary.log" 2>&1 || echo "summary failed: see $OUT/summary.log"
cat "$OUT/summary.txt" 2>/dev/null
echo "results in $OUT"
[ -s "$OUT/summary.json" ]
