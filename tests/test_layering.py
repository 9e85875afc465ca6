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
    assert "10 kept, 0 broken" in result.stdout


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


def test_the_value_testbed_shares_only_the_environments_with_the_control_testbed(tmp_path):
    copy = copy_of_the_code(tmp_path)
    loop = copy / "workbench" / "testbeds" / "value" / "loop.py"
    loop.write_text(loop.read_text()
                    + "\nfrom workbench.testbeds.control import ppo  # noqa: E402,F401\n")
    result = lint(copy)
    assert result.returncode != 0
    assert "no testbed imports another testbed BROKEN" in result.stdout
    assert "workbench.testbeds.value.loop -> workbench.testbeds.control.ppo" in result.stdout


def test_a_report_importing_the_spec_breaks_a_contract(tmp_path):
    copy = copy_of_the_code(tmp_path)
    tables = copy / "workbench" / "report" / "tables.py"
    tables.write_text(tables.read_text() + "\nfrom workbench import spec  # noqa: E402,F401\n")
    result = lint(copy)
    assert result.returncode != 0
    assert "the report never imports the spec, a testbed or the engine" in result.stdout
    assert "workbench.report.tables -> workbench.spec" in result.stdout


def test_the_top_level_holds_packages_and_at_most_five_modules():
    """The public surface a user or method author imports (``api``, ``registry``,
    ``hyperparams``) beside ``__init__``/``__main__``; everything else lives in a package."""
    modules = sorted(p.name for p in (ROOT / "workbench").glob("*.py"))
    assert modules == ["__init__.py", "__main__.py", "api.py", "hyperparams.py", "registry.py"]
    packages = {p.name for p in (ROOT / "workbench").iterdir() if (p / "__init__.py").is_file()}
    contracted = (ROOT / "pyproject.toml").read_text()
    assert all(f'"workbench.{name}' in contracted for name in packages), packages


def test_no_two_modules_import_each_other():
    """A two-module import circle (even through an import inside a function) ties two files
    into one; none is left."""
    import grimp

    graph = grimp.build_graph("workbench", "methods", cache_dir=None)  # writes nothing
    circles = sorted({tuple(sorted((a, b))) for a in graph.modules
                      for b in graph.find_modules_directly_imported_by(a)
                      if a in graph.find_modules_directly_imported_by(b)})
    assert circles == []
