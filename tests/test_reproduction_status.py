"""Findings that know whether they are current: `workbench reproduce --status` (current, stale
with what changed, missing, verified by the quick form), the quick numbers compared with the
committed ones, and numbers quoted in Markdown rendered from their files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from workbench.cli import main as cli
from workbench.reproduce import ROOT, claim, entry, numbers, provenance, quick_places, quotes

NAME = "tyurin-table1"  # the cheapest reproduction: its quick form runs in seconds


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A copy of a reproduction whose results were made here (its quick form standing in for
    the full one), with the quick numbers beside them (a copy: the same run) as a full run
    leaves them."""
    root = tmp_path_factory.mktemp("reproductions")
    folder = root / NAME
    shutil.copytree(ROOT / NAME, folder, ignore=shutil.ignore_patterns("results"))
    c = claim.load(folder)
    places = entry.Places(root / "out" / NAME / "work", folder / "results")
    entry.run(NAME, folder, c, places, True, "test", say=lambda line: None)
    quick = quick_places(places).results
    quick.mkdir()
    for path in places.results.iterdir():
        if path.is_file():
            shutil.copyfile(path, quick / path.name)
    return folder


def fresh_copy(made: Path, tmp_path: Path) -> Path:
    folder = tmp_path / NAME
    shutil.copytree(made, folder)
    return folder


def test_results_just_made_are_current_and_record_the_machines_load(made):
    state = provenance.status(NAME, made, claim.load(made))
    assert state.state == "current", state.line()
    run = json.loads((made / "results" / "run.json").read_text())
    assert run["cpus"] >= 1 and 0 <= run["load_mean"] <= run["load_max"]
    record = json.loads((made / "results" / provenance.PROVENANCE_FILE).read_text())
    table = pd.read_csv(made / "results" / f"table_{NAME}.csv")
    assert record["studies"][NAME] == dict(zip(table["method"], table["fingerprint"],
                                               strict=True))
    assert "workbench.report" in record["code"] and "methods.step_size" in record["code"]


def test_a_changed_spec_makes_them_stale_and_says_which(made, tmp_path):
    folder = fresh_copy(made, tmp_path)
    spec = folder / "sweep.yaml"
    spec.write_text(spec.read_text() + "\n# an edit\n")
    state = provenance.status(NAME, folder, claim.load(folder))
    assert state.state == "stale" and state.changes == ["changed file sweep.yaml"]


def test_changed_code_and_versions_are_named(made, tmp_path):
    folder = fresh_copy(made, tmp_path)
    path = folder / "results" / provenance.PROVENANCE_FILE
    record = json.loads(path.read_text())
    record["code"]["workbench.report.tables"] = "0" * 16
    record["versions"]["numpy"] = "0.0"
    path.write_text(json.dumps(record))
    state = provenance.status(NAME, folder, claim.load(folder))
    assert state.state == "stale"
    assert state.changes[0] == "changed code: workbench.report.tables"
    assert state.changes[1].startswith("versions: numpy 0.0 → ")
    assert not state.verified


def test_a_stale_result_whose_quick_form_still_gives_its_numbers_says_verified(made, tmp_path):
    folder = fresh_copy(made, tmp_path)
    path = folder / "results" / provenance.PROVENANCE_FILE
    record = json.loads(path.read_text())
    record["code"]["workbench.report.tables"] = "0" * 16  # the full results predate a change
    path.write_text(json.dumps(record))
    c = claim.load(folder)
    rerun = entry.run(NAME, folder, c, entry.Places(tmp_path / "work", tmp_path / "rerun"),
                      True, "test", say=lambda line: None)
    committed = folder / "results" / provenance.QUICK
    assert numbers.differences(committed, rerun.results, c.quick_tolerance) == []
    provenance.write_verified(committed, rerun.results)
    state = provenance.status(NAME, folder, c)
    assert state.state == "stale" and state.verified
    assert "quick form verified at" in state.line()


def test_results_without_a_record_are_stale_and_none_are_missing(made, tmp_path):
    folder = fresh_copy(made, tmp_path)
    (folder / "results" / provenance.PROVENANCE_FILE).unlink()
    assert provenance.status(NAME, folder, claim.load(folder)).changes == [
        "what determined the results was not recorded"]
    shutil.rmtree(folder / "results")
    assert provenance.status(NAME, folder, claim.load(folder)).state == "missing"


def test_moved_quick_numbers_are_named_cell_by_cell(made, tmp_path):
    committed = made / "results" / provenance.QUICK
    moved = tmp_path / "moved"
    shutil.copytree(committed, moved)
    table = pd.read_csv(moved / f"table_{NAME}.csv")
    table.loc[1, "steps_to_target"] += 1
    table.loc[0, "fingerprint"] = "another code"  # not a number: never compared
    table.to_csv(moved / f"table_{NAME}.csv", index=False)
    tolerance = claim.Tolerance()
    [line] = numbers.differences(committed, moved, tolerance)
    assert line.startswith(f"table_{NAME}.csv: row 2 steps_to_target")
    (moved / f"table_{NAME}.csv").unlink()
    assert numbers.differences(committed, moved, tolerance) == [f"table_{NAME}.csv: not made"]


def test_the_status_command_lists_every_reproduction(capsys):
    assert cli.main(["reproduce", "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = sorted(p.parent.name for p in ROOT.glob("*/claim.yaml"))
    assert [line.split(":")[0] for line in lines[:-1]] == names
    assert lines[-1].endswith("missing") and all(
        line.split(": ")[1].split(" ")[0] in ("current", "stale", "missing")
        for line in lines[:-1])


def test_a_quote_is_rendered_from_its_file_and_a_wrong_one_is_named(tmp_path):
    (tmp_path / "t.csv").write_text("method,iqm\na+b,0.54934\nc,1.5\n")
    (tmp_path / "r.json").write_text('{"run": {"cpu_seconds": 330.0}}')
    text = ("AUC <!--q t.csv method=a+b:iqm .3f-->0.549<!--/q--> in "
            "<!--q r.json run.cpu_seconds /60:.1f-->5.5<!--/q--> CPU min")
    assert quotes.stale(text, tmp_path) == []
    wrong = text.replace("0.549", "0.55")
    assert quotes.stale(wrong, tmp_path) == [
        "t.csv method=a+b:iqm: shows 0.55, the file gives 0.549"]
    assert quotes.render(wrong, tmp_path) == text
    assert "unreadable" in quotes.stale(text.replace("a+b", "zz"), tmp_path)[0]
    assert [q.shown for q in quotes.quotes(text)] == ["0.549", "5.5"]  # two on one line


def test_rendering_a_quote_whose_file_is_missing_names_it_and_leaves_the_page(tmp_path,
                                                                              capsys):
    page = tmp_path / "page.md"
    text = "AUC <!--q no/such/table.csv method=a:iqm .3f-->0.5<!--/q-->\n"
    page.write_text(text)
    assert quotes.main([str(page)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "no/such/table.csv method=a:iqm: unreadable" in out[0]
    assert page.read_text() == text  # nothing half-rendered


@pytest.mark.parametrize("doc", ["README.md", *sorted(
    str(p.relative_to(ROOT.parent)) for p in ROOT.glob("*/README.md"))])
def test_every_number_quoted_in_the_readmes_is_what_its_file_gives(doc):
    text = (ROOT.parent / doc).read_text()
    assert quotes.stale(text) == []
