"""The MLflow UI views `workbench ui` saves: what they select and that MLflow can store them
(the browser test, tests/test_ui_browser.py, checks what they draw)."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workbench import runs, spec, ui_views

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
