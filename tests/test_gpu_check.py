"""``benchmarks/gpu_check.sh --dry-run``: the device check, run whole on the CPU with tiny
sizes, writes every step's result file and a summary that lists every step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import ROOT
from tests.waiting import scaled

STEPS = ["machine", "parity", "control_ppo", "seed_axis", "rlvr_fp32", "rlvr_bf16", "sweep",
         "pytest_gpu"]


def test_dry_run_writes_every_step_and_the_summary(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "WHEELS": str(tmp_path)}
    env.pop("PYTHONPATH", None)  # the script puts the repository root there itself
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run"],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=scaled(900))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {row["step"]: row for row in json.loads((out / "summary.json").read_text())["steps"]}
    assert list(rows) == STEPS
    text = (out / "summary.txt").read_text()
    for step in STEPS:
        assert (out / f"{step}.json").is_file() and (out / f"{step}.log").is_file(), step
        assert json.loads((out / f"{step}.json").read_text())["step"] == step
        assert step in text
    for step in STEPS:
        assert rows[step]["status"] == "ok", (step, rows[step], (out / f"{step}.log").read_text())
    for precision in ("fp32", "bf16"):  # rollout and training figures, under that precision
        figures = rows[f"rlvr_{precision}"]["figures"]
        assert figures["precision"] == precision
        assert figures["cpu_hf_rollout_tokens_per_s"] > 0
        assert figures["cpu_hf_train_tokens_per_s"] > 0
    parity = rows["parity"]["figures"]
    assert parity["CartPole-v1"]["flag_mismatches"] == 0
    assert rows["control_ppo"]["figures"]["cpu_steps_per_s"] > 0
    assert rows["sweep"]["figures"]["tracked"] is True  # mlflow and optuna are here
    assert (out / "sweep_store.db").is_file()
    assert "skipped" in rows["pytest_gpu"]["note"]  # no CUDA here: the gpu tests skip
