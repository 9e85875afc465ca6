"""The import rules of DESIGN.md as import-linter contracts (pyproject.toml): they hold, and a
module that breaks one is caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LINT = str(Path(sys.executable).with_name("lint-imports"))


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=root, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})


def test_the_layering_contracts_hold():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "7 kept, 0 broken" in result.stdout


def copy_of_the_code(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    for part in ("workbench", "methods"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def test_a_loop_importing_the_engine_breaks_a_contract(tmp_path):
    copy = copy_of_the_code(tmp_path)
    loop = copy / "workbench" / "testbeds" / "control" / "loop.py"
    loop.write_text(loop.read_text() + "\nfrom workbench import engine  # noqa: E402,F401\n")
    result = lint(copy)
    assert result.returncode != 0
    assert "testbeds never import the engine" in result.stdout
    assert "workbench.testbeds.control.loop -> workbench.engine" in result.stdout


def test_the_value_testbed_takes_only_the_control_testbeds_environments(tmp_path):
    copy = copy_of_the_code(tmp_path)
    loop = copy / "workbench" / "testbeds" / "value" / "loop.py"
    loop.write_text(loop.read_text()
                    + "\nfrom workbench.testbeds.control import ppo  # noqa: E402,F401\n")
    result = lint(copy)
    assert result.returncode != 0
    assert "the value testbed takes only the control testbed's environments" in result.stdout
    assert "workbench.testbeds.value.loop -> workbench.testbeds.control.ppo" in result.stdout


def test_a_report_importing_the_spec_breaks_a_contract(tmp_path):
    copy = copy_of_the_code(tmp_path)
    tables = copy / "workbench" / "report" / "tables.py"
    tables.write_text(tables.read_text() + "\nfrom workbench import spec  # noqa: E402,F401\n")
    result = lint(copy)
    assert result.returncode != 0
    assert "the report never imports the spec or a testbed" in result.stdout
    assert "workbench.report.tables -> workbench.spec" in result.stdout
