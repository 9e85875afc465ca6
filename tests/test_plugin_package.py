"""A method in another installed package registers through the ``workbench.methods`` entry point
and takes part in a sweep beside the repository's own methods (tests/plugin_package)."""

import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli, tiny_spec
from tests.waiting import scaled

pytestmark = pytest.mark.slow

PACKAGE = "workbench-demo-plugin"


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          timeout=scaled(300))


@pytest.fixture
def installed_plugin(tmp_path):
    """Install a copy of tests/plugin_package (built in tmp_path, so the repository stays clean)
    into the running environment; yield a function that uninstalls it; always uninstall."""
    source = shutil.copytree(ROOT / "tests" / "plugin_package", tmp_path / "plugin_package")
    installed = pip("install", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    str(source))
    assert installed.returncode == 0, installed.stderr

    def uninstall():
        removed = pip("uninstall", "-y", PACKAGE)
        assert removed.returncode == 0, removed.stderr

    try:
        yield uninstall
    finally:
        if PACKAGE in pip("list", "--format=freeze").stdout:
            uninstall()


def step_size_methods(cwd) -> str:
    listing = run_cli("methods", "--family", "step_size", cwd=cwd)
    assert listing.returncode == 0, listing.stderr
    return listing.stdout


def test_a_plugin_method_is_listed_swept_and_reported_until_uninstalled(
        installed_plugin, write_spec, tmp_path):
    listing = step_size_methods(tmp_path)
    assert "\nhalving_step " in listing
    whole = run_cli("methods", "step_size/halving_step", cwd=tmp_path)
    assert "demo plugin for the workbench tests" in whole.stdout, whole.stderr

    path = write_spec(tiny_spec(methods={"step_size": ["constant", "halving_step"]}, trials=2,
                                seeds=2, storage=f"sqlite:///{tmp_path / 'store.db'}"))
    sweep = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    status = run_cli("status", path, cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()  # cells are 2 spaces apart (a state reads "up to date")
    header = re.split(r"\s{2,}", lines[1].strip())
    rows = {cells[0]: cells[header.index("done")] for cells in
            (re.split(r"\s{2,}", line.strip()) for line in lines[3:] if line.strip())}
    assert rows == {"constant": "2/2", "halving_step": "2/2"}, status.stdout
    report = run_cli("report", path, "--out", tmp_path / "report", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    table = (tmp_path / "report" / "table_tiny.md").read_text()
    assert "| halving_step † |" in table  # reconstructed
    assert "| constant |" in table  # reference-checked: no mark

    installed_plugin()
    assert "halving_step" not in step_size_methods(tmp_path)
