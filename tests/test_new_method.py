"""From `workbench new-method` to a sweep: scaffold, fill in the formula, pass the contract,
compare the new method in a short sweep."""

import subprocess
import sys
import uuid

import pytest

from tests.conftest import ROOT, run_cli, tiny_spec
from tests.waiting import scaled

pytestmark = pytest.mark.slow


@pytest.fixture
def scaffolded():
    """Names scaffolded into this checkout; their files are removed afterwards."""
    made = []
    yield made
    for family, name in made:
        for path in (ROOT / "methods" / family / f"{name}.py",
                     ROOT / "tests" / f"test_method_{name}.py"):
            path.unlink(missing_ok=True)
        for cache in ROOT.glob(f"**/__pycache__/*{name}*"):
            cache.unlink(missing_ok=True)


def test_scaffold_fill_in_check_and_sweep(scaffolded, write_spec, tmp_path):
    name = f"halved_{uuid.uuid4().hex[:6]}"
    scaffolded.append(("step_size", name))
    made = run_cli("new-method", "step_size", name, "--root", ROOT, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert f"workbench check step_size/{name}" in made.stdout
    method_file = ROOT / "methods" / "step_size" / f"{name}.py"
    text = method_file.read_text()
    rule = 'step = self.param_groups[0]["lr"]  # TODO: your step-size rule'
    assert rule in text
    method_file.write_text(text.replace(rule, 'step = 0.5 * self.param_groups[0]["lr"]'))

    check = run_cli("check", f"step_size/{name}", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "1 of 1 methods meet their family contract" in check.stdout
    pytest_run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                 str(ROOT / "tests" / f"test_method_{name}.py")], cwd=ROOT,
                                capture_output=True, text=True, timeout=scaled(300))
    assert pytest_run.returncode == 0, pytest_run.stdout

    once = run_cli("run", "logreg", f"step_size={name}", "step_size.lr=0.4", "--steps", "30",
                   "--json", cwd=tmp_path)
    assert once.returncode == 0, once.stderr
    assert '"method/step_size": 0.2' in once.stdout  # the filled-in formula: half of lr

    path = write_spec(tiny_spec(methods={"step_size": ["constant", name]}, trials=2,
                                storage=f"sqlite:///{tmp_path / 'store.db'}"))
    sweep = run_cli("sweep", path, "--quiet", cwd=tmp_path)
    assert sweep.returncode == 0, sweep.stderr
    assert sweep.stdout.count("2/2") == 2 and name in sweep.stdout


@pytest.mark.parametrize("family", ["batch_size", "entropy", "advantage"])
def test_every_family_template_meets_its_contract(family, scaffolded, tmp_path):
    name = f"demo_{uuid.uuid4().hex[:6]}"
    scaffolded.append((family, name))
    assert run_cli("new-method", family, name, "--root", ROOT, cwd=tmp_path).returncode == 0
    check = run_cli("check", f"{family}/{name}", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_new_method_refuses_bad_names_and_existing_files(tmp_path):
    bad = run_cli("new-method", "step_size", "Bad-Name", "--root", ROOT, cwd=tmp_path)
    assert bad.returncode == 2 and "lower-case letters" in bad.stderr
    taken = run_cli("new-method", "step_size", "polyak", "--root", ROOT, cwd=tmp_path)
    assert taken.returncode == 2 and "already exists" in taken.stderr
    family = run_cli("new-method", "optimizer", "x1", "--root", ROOT, cwd=tmp_path)
    assert family.returncode == 2


def test_new_method_refuses_a_root_that_is_not_the_installed_methods_package(tmp_path):
    (tmp_path / "other" / "methods" / "step_size").mkdir(parents=True)
    wrong = run_cli("new-method", "step_size", "my_rule", "--root", tmp_path / "other",
                    cwd=tmp_path)
    assert wrong.returncode == 2
    assert "is not the methods package this workbench imports" in wrong.stderr
    assert "--plugin DIR" in wrong.stderr
    assert not list((tmp_path / "other").rglob("my_rule.py"))


@pytest.mark.slow
def test_a_plugin_written_by_new_method_installs_and_is_listed_checked_and_tested(tmp_path):
    """new-method --plugin DIR, then pip install -e DIR: the method is listed, meets its
    contract and its test passes; uninstalled, it is gone."""
    folder = tmp_path / "my-methods"
    made = run_cli("new-method", "step_size", "my_plugin_rule", "--plugin", folder,
                   cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert f"pip install -e {folder}" in made.stdout

    def pip(*args):
        return subprocess.run([sys.executable, "-m", "pip", *args, "-q"], capture_output=True,
                              text=True, timeout=scaled(300))

    installed = pip("install", "--no-deps", "--no-build-isolation", "--no-index", "-e",
                    str(folder))
    assert installed.returncode == 0, installed.stderr
    try:
        listing = run_cli("methods", "--family", "step_size", cwd=tmp_path)
        assert "\nmy_plugin_rule " in listing.stdout, listing.stdout
        check = run_cli("check", "step_size/my_plugin_rule", cwd=tmp_path)
        assert check.returncode == 0 and "meets the step_size contract" in check.stdout
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                str(folder / "tests")], capture_output=True, text=True,
                               cwd=tmp_path, timeout=scaled(300))
        assert tests.returncode == 0 and "2 passed" in tests.stdout, tests.stdout
    finally:
        removed = pip("uninstall", "-y", "my-methods")
        assert removed.returncode == 0, removed.stderr
    assert "my_plugin_rule" not in run_cli("methods", cwd=tmp_path).stdout
