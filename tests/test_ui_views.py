"""The MLflow UI views `workbench ui` saves: what they select and that MLflow can store them
(the browser test, tests/test_ui_browser.py, checks what they draw)."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workbench.spec import sweep as spec
from workbench.store import runs, ui_views

SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_every_shipped_sweeps_views_fit_in_an_experiment_tag(path: Path):
    sweep = spec.load(str(path), storage="sqlite:////nonexistent/store.db")
    views = ui_views.views(sweep)
    assert [v.key for v in views] == ["workbench-trials", "workbench-best",
                                      "workbench-studies", "workbench-chart"]
    for view in views:
        assert len(json.dumps(view.state)) <= runs.TAG_VALUE_CHARS, view.key
        query = urllib.parse.parse_qs(urllib.parse.urlparse(view.url("http://h:1", "7"))
                                      .fragment.split("?", 1)[1])
        assert query["workflowType"] == ["machine_learning"]
        assert query["viewStateShareKey"] == [view.key]
        # a search facet in the URL would make MLflow ignore the saved state
        assert not set(query) & {"searchFilter", "orderByKey", "orderByAsc"}
    searched = {f"params.`{name}`" for plan in sweep.studies for name in plan.search_space()}
    landing, best, _, chart = (v.state for v in views)
    assert searched <= set(landing["selectedColumns"]) and searched <= set(best["selectedColumns"])
    assert landing["orderByKey"] == "attributes.start_time"  # the order MLflow nests in
    assert best["orderByAsc"] == (sweep.direction == "minimize")
    assert chart["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": runs.METHOD}]
    assert [c["metricKey"] for c in chart["compareRunCharts"]] == [sweep.metric]


def test_the_chart_uses_a_log_axis_only_for_a_metric_that_spans_decades():
    sweep = spec.load(str(ROOT / "sweeps" / "quickstart.yaml"),
                      storage="sqlite:////nonexistent/store.db")
    scale = {log: ui_views.views(sweep, frozenset([sweep.metric]) if log else frozenset())[-1]
             .state["compareRunCharts"][0]["scaleType"] for log in (True, False)}
    assert scale == {True: "log", False: "linear"}


def test_the_chart_shows_each_methods_best_trial_as_the_report_does(write_spec, tmp_path,
                                                                    monkeypatch, capsys):
    """On a real store: the chart view's runs (its saved search filter, as the UI runs it) are
    each method's best trial's seed runs, the report's, and their mean per step by method (the
    UI's grouping) is the mean of those seeds' values, not of every trial's."""
    from mlflow import MlflowClient

    from tests.conftest import tiny_spec
    from workbench import report
    from workbench.cli import main as cli
    from workbench.cli.servers import print_views
    from workbench.store import results
    from workbench.store.database import Store

    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    path = write_spec(tiny_spec(trials=3, budget={"steps": 8}))
    assert cli.main(["sweep", str(path), "--storage", url, "--quiet"]) == 0
    sweep, store = spec.load(str(path), storage=url), Store.from_url(url)
    print_views(store, sweep, "http://h:1")
    client = MlflowClient(store.mlflow_url)
    experiment = results.experiment_id(store, sweep.name)
    state = json.loads(client.get_experiment(experiment).tags[
        ui_views.SHARED_STATE + "workbench-chart"])
    charted = client.search_runs([experiment], state["searchFilter"], max_results=1000)
    reported = report.data.read_sweep(report.data.SweepRef(sweep.name, url)).methods
    assert {r.info.run_id for r in charted} == {
        run for m in reported for run in m.seeds["run_id"]}
    all_seeds = client.search_runs([experiment], f"tags.`{runs.KIND}` = '{runs.SEED}'")
    assert len(all_seeds) == 3 * len(charted)  # three trials per method, one charted

    def mean_by_method(run_list):
        per_method: dict[str, dict[int, list[float]]] = {}
        for r in run_list:
            steps = per_method.setdefault(r.data.tags[runs.METHOD], {})
            for point in client.get_metric_history(r.info.run_id, sweep.metric):
                steps.setdefault(point.step, []).append(point.value)
        return {method: {s: sum(v) / len(v) for s, v in steps.items()}
                for method, steps in per_method.items()}

    best_seeds = [client.get_run(run) for m in reported for run in m.seeds["run_id"]]
    assert mean_by_method(charted) == mean_by_method(best_seeds)
    assert mean_by_method(charted) != mean_by_method(all_seeds)
    assert "best trial's seed runs" in capsys.readouterr().out  # the link says so
