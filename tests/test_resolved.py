"""`status` and `report` keep a spec's resolution (workbench/spec/resolved.py): read back while
nothing it depends on changed, resolved again (with every check) as soon as something did."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.conftest import tiny_spec
from workbench.spec import resolved
from workbench.spec import sweep as spec


def _count_resolutions(monkeypatch) -> list[str]:
    calls = []
    real = spec.load
    monkeypatch.setattr(spec, "load", lambda path, **kw: calls.append(str(path))
                        or real(path, **kw))
    return calls


def test_a_kept_resolution_equals_the_full_one_until_the_spec_or_the_code_changes(
        write_spec, tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE", str(tmp_path / "cache"))
    storage = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(tiny_spec(storage=storage))
    calls = _count_resolutions(monkeypatch)
    first = resolved.load(path)
    again = resolved.load(path)
    assert len(calls) == 1 and again == first
    full = spec.load(path)
    assert first == resolved.summary(full)
    assert first.studies[0].document == full.studies[0].document
    assert first.any_device() == {p.fingerprint for kind in ("cpu", "cuda")
                                  for p in full.on_device(kind).studies}
    assert first.report == full.report and first.max_failed_trials == 3

    calls.clear()
    path.write_text(yaml.safe_dump(tiny_spec(storage=storage, trials=4)))  # the spec
    assert resolved.load(path).studies[0].n_trials == 4 and len(calls) == 1
    assert resolved.load(path, storage=f"sqlite:///{tmp_path / 'other.db'}").storage \
        .endswith("other.db") and len(calls) == 2  # the --storage given

    calls.clear()  # the code: any package file's size or time
    monkeypatch.setattr(resolved.catalogue, "key", lambda: "another checkout")
    resolved.load(path)
    assert len(calls) == 1


def test_status_with_a_kept_resolution_imports_neither_torch_nor_mlflow(write_spec, tmp_path):
    path = write_spec(tiny_spec(storage=f"sqlite:///{tmp_path / 'store.db'}", trials=1))
    env_cache = {"WORKBENCH_CACHE": str(tmp_path / "cache")}
    probe = ("import sys; from workbench.cli.entry import main; sys.argv[0] = 'workbench'; "
             "code = main(); print('imported:', sorted(m for m in ('torch', 'mlflow', "
             "'transformers', 'pandas') if m in sys.modules)); sys.exit(code)")
    import os

    env = {**os.environ, **env_cache, "PYTHONWARNINGS": "ignore"}
    sweep = subprocess.run([sys.executable, "-m", "workbench", "sweep", str(path), "--quiet"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert sweep.returncode == 0, sweep.stderr
    outputs = []
    for edit in (False, True):  # as the sweep kept it; then with the spec's bytes changed
        if edit:
            path.write_text(path.read_text() + "# an edit\n")
        done = subprocess.run([sys.executable, "-c", probe, "status", str(path)], cwd=tmp_path,
                              env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert "imported: []" in outputs[0], outputs[0]
    assert "imported: ['torch']" in outputs[1], outputs[1]  # resolved again
    table = [line for line in outputs[0].splitlines() if line.startswith(("constant", "polyak"))]
    assert len(table) == 2 and all("up to date" in line and "1/1" in line for line in table), \
        outputs[0]
    assert outputs[1].replace("['torch']", "[]") == outputs[0]  # the same answer
