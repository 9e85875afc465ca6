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


def _top_level_imports(path) -> list[str]:
    import ast

    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module)
    return names


def test_the_command_line_is_the_start_up_boundary():
    """README "Start-up: one boundary": the parser and every command module import only the
    standard library (and each other) at their top; a command imports what it needs when it
    runs, so `workbench --help` loads none of the workbench's libraries."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    seen, todo = set(), ["workbench.cli.entry", "workbench.cli.main"]
    while todo:  # what the console script loads before a command runs
        module = todo.pop()
        seen.add(module)
        path = ROOT / (module.replace(".", "/") + ".py")
        for name in _top_level_imports(path):
            if name.startswith("workbench.cli."):
                todo += [name] if name not in seen else []
            else:
                assert name.split(".")[0] in stdlib, f"{path.name} imports {name} at its top"
    assert len(seen) >= 6  # the parser and every command module


def test_packages_import_nothing_on_their_own():
    """A package's ``__init__`` imports nothing (so importing one module of it loads no
    other), except the interfaces a method or testbed implements (``families``,
    ``testbeds``), the entries of the report and of the reproductions (``report.build``,
    ``reproduce``'s list), and the root's ``load_runs`` (on first use)."""
    allowed = {"families", "testbeds", "report", "reproduce"}
    for init in sorted((ROOT / "workbench").rglob("__init__.py")):
        package = init.parent.relative_to(ROOT / "workbench").parts
        if package and package[0] in allowed:
            continue
        assert _top_level_imports(init) in ([], ["__future__"]), init


def test_help_imports_no_heavy_library():
    probe = ("import sys\nfrom workbench.cli.main import build_parser\nbuild_parser()\n"
             "print(sorted(m for m in ('torch', 'optuna', 'mlflow', 'sqlalchemy', 'pydantic', "
             "'pandas', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=scaled(120))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
