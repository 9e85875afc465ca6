"""A sweep imports only what its testbed needs: a logreg or CartPole sweep, run whole through
``workbench sweep`` in a fresh process, never imports transformers (the RLVR and
language-model testbeds' library), matplotlib (the report's) or scikit-learn."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT, tiny_spec
from tests.waiting import scaled

HEAVY = ["transformers", "matplotlib", "sklearn"]

# runs the command line in this process, then prints which of HEAVY it imported
PROBE = """
import json, sys
from workbench.cli.main import main
code = main(sys.argv[2:])
print(json.dumps({"code": code, "imported": [m for m in sys.argv[1].split(",")
                                             if m in sys.modules],
                  "gymnasium": "gymnasium" in sys.modules, "torch": "torch" in sys.modules}))
"""


def sweep_modules(spec: dict, tmp_path) -> dict:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY), "sweep", str(path),
                          "--storage", f"sqlite:///{tmp_path / 'store.db'}", "--quiet"],
                         cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=scaled(300))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_logreg_sweep_imports_no_transformers_matplotlib_or_sklearn(tmp_path):
    found = sweep_modules(tiny_spec(trials=1, seeds=1, budget={"steps": 5}), tmp_path)
    assert found["code"] == 0
    assert found["torch"]  # the probe sees what the sweep imported: it ran a torch task
    assert found["imported"] == []
    assert not found["gymnasium"]  # the control testbed's environments: not for logreg


@pytest.mark.slow
def test_a_cartpole_sweep_imports_no_transformers_matplotlib_or_sklearn(tmp_path):
    spec = {"name": "tiny-cartpole",
            "task": {"name": "cartpole", "params": {"num_envs": 4, "rollout_len": 16}},
            "methods": {"advantage": ["gae"]}, "seeds": 1, "trials": 1,
            "sampler": {"name": "random", "seed": 0}, "pruner": "none",
            "objective": {"metric": "train/return_recent", "direction": "maximize"},
            "budget": {"steps": 128}}
    found = sweep_modules(spec, tmp_path)
    assert found["code"] == 0
    assert found["imported"] == []
