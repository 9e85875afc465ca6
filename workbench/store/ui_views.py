"""The views `workbench ui` opens in MLflow's UI, and the links to them.

Only what MLflow 3.17's own UI code honours (read from its source, never patched):

- ``?workflowType=machine_learning`` puts the UI in its model-training workflow (runs, metric
  charts) instead of the GenAI one that opens by default; the experiment's
  ``mlflow.experimentKind`` tag is no longer read for that choice.
- ``?viewStateShareKey=KEY`` loads the view state saved as the experiment's tag
  ``mlflow.sharedViewState.KEY``, plain JSON (what the runs page's "Share" button writes): the
  search facets (``searchFilter``, ``orderByKey``, ``orderByAsc``, ...) and the table's UI state
  (``selectedColumns``, ``columnOrder``, ``columnWidths``, ``groupBy``, ``runsHiddenMode``,
  ``compareRunCharts``, ...). A URL carrying a search facet of its own ignores the shared state.
- ``?compareRunsMode=CHART`` opens the chart view instead of the table.
- Nested rows (a parent run with its children one click away) are drawn only when runs are
  listed by start time; the page then also fetches the parents of the runs it lists.

So the views below list seed runs and let the UI bring in their trial runs as parents.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass

from workbench.store import runs

SHARED_STATE = "mlflow.sharedViewState."
MACHINE_LEARNING = {"workflowType": "machine_learning"}
RUN_NAME_COLUMN = "attributes.`Run Name`"


def column(kind: str, key: str) -> str:
    """MLflow's column id: ``metrics.`train/loss```, ``params.`step_size.lr```, ..."""
    return f"{kind}.`{key}`"


def _tag_is(key: str, value: str) -> str:
    return f"tags.`{key}` = '{value}'"


@dataclass(frozen=True)
class View:
    """One saved view: its share key, what the link says, the state it loads and whether it
    opens as charts."""

    key: str
    label: str
    state: dict
    charts: bool = False

    def url(self, base: str, experiment: str) -> str:
        query = {**MACHINE_LEARNING, "viewStateShareKey": self.key}
        if self.charts:
            query["compareRunsMode"] = "CHART"
        return f"{base}/#/experiments/{experiment}/runs?{urllib.parse.urlencode(query)}"


def views(sweep, log_scale: frozenset[str] = frozenset(),
          charted: list[str] | None = None) -> list[View]:
    """The sweep's views, the landing one first: trials with their seeds nested, trials best
    first, studies side by side, and the objective's metric charted per method (the mean of
    the seed runs of each method's best trial, MLflow's run grouping over the ``charted`` run
    ids: ``best_seed_runs``, the runs the report draws), on a log axis when it is in
    ``log_scale``. Without ``charted`` (no finished trial yet) the chart lists the finished
    seed runs."""
    metric, ascending = sweep.metric, sweep.direction == "minimize"
    hyperparameters = sorted({name for plan in sweep.studies for name in plan.search_space()})
    method, seed = column("tags", runs.METHOD), column("tags", runs.SEED_TAG)
    objective = column("metrics", "objective")
    searched = [column("params", name) for name in hyperparameters]
    duration = column("attributes", "Duration")
    trial_columns = [method, seed, objective, column("metrics", metric), *searched, duration]
    seeds = _tag_is(runs.KIND, runs.SEED)

    def table(search: str, columns: list[str], order: str, asc: bool) -> dict:
        return {"searchFilter": search, "orderByKey": order, "orderByAsc": asc,
                "selectedColumns": columns, "columnOrder": [RUN_NAME_COLUMN, *columns],
                "columnWidths": {RUN_NAME_COLUMN: 260}, "runsHiddenMode": "SHOW_ALL"}

    by_start = "attributes.start_time"  # the one order that nests children under parents
    shown = (f"{seeds} AND attributes.status = 'FINISHED'" if not charted else
             f"{seeds} AND attributes.run_id IN ({', '.join(repr(str(r)) for r in charted)})")
    chart = {
        **table(shown, trial_columns, objective, ascending),
        "groupBy": {"aggregateFunction": "average",
                    "groupByKeys": [{"mode": "tag", "groupByData": runs.METHOD}]},
        "useGroupedValuesInCharts": True, "hideEmptyCharts": True,
        "compareRunSections": [{"uuid": "workbench-objective", "name": metric, "display": True,
                                "isReordered": False, "deleted": False, "isGenerated": False}],
        "compareRunCharts": [_line_chart(metric, log=metric in log_scale)],
        "chartsSearchFilter": metric,  # the other metrics' charts are a cleared search away
    }
    return [
        View("workbench-trials", "trials, each with its seed runs one click away (landing)",
             table(seeds, trial_columns, by_start, False)),
        View("workbench-best", "trials, best objective first",
             table(_tag_is(runs.KIND, runs.TRIAL), [method, objective, *searched, duration],
                   objective, ascending)),
        View("workbench-studies", "studies side by side",
             table(_tag_is(runs.KIND, runs.STUDY),
                   [method, objective, column("tags", runs.STUDY_STATE),
                    column("tags", runs.FIDELITY), column("tags", runs.STUDY_NAME)],
                   objective, ascending)),
        View("workbench-chart", f"{metric} by method (mean of its best trial's seed runs, as "
             "in the report)", chart, charts=True),
    ]


def _line_chart(metric: str, log: bool) -> dict:
    """A line-chart card of ``metric`` over steps (MLflow's RunsChartsLineCardConfig)."""
    return {"uuid": f"workbench-{metric}", "type": "LINE", "metricSectionId": "workbench-objective",
            "displayName": metric, "metricKey": metric, "selectedMetricKeys": [metric],
            "runsCountToCompare": 100, "deleted": False, "isGenerated": False,
            "lineSmoothness": 0, "xAxisScaleType": "linear",
            "scaleType": "log" if log else "linear",
            "xAxisKey": "step", "selectedXAxisMetricKey": "", "yAxisKey": "metric",
            "yAxisExpressions": [], "ignoreOutliers": False, "useGlobalXaxisKey": True,
            "useGlobalLineSmoothing": True,
            "range": {"xMin": None, "xMax": None, "yMin": None, "yMax": None}}


def save(client, experiment: str, sweep_views: list[View]) -> None:
    """Write each view's state as the experiment's shared view state tag."""
    for view in sweep_views:
        client.set_experiment_tag(experiment, SHARED_STATE + view.key, json.dumps(view.state))


def seeds_url(base: str, experiment: str, trial_run: str) -> str:
    """One trial's seed runs (its children), by a search filter."""
    query = {**MACHINE_LEARNING, "searchFilter": _tag_is("mlflow.parentRunId", trial_run)}
    return f"{base}/#/experiments/{experiment}/runs?{urllib.parse.urlencode(query)}"


def best_trials(sweep, table, final) -> dict[str, str]:
    """Each current study's best finished trial run: its label -> run id. ``table`` is
    ``results.runs``, ``final`` ``results.latest_metrics`` of the sweep's experiment."""
    if table.empty or "objective" not in final:
        return {}
    trials = table[(table.get(runs.KIND) == runs.TRIAL) & (table["status"] == runs.FINISHED)]
    trials = trials.merge(final[["run_id", "objective"]], on="run_id").dropna(
        subset=["objective"])
    best = {}
    for plan in sweep.studies:
        mine = trials[trials[runs.STUDY_NAME] == plan.name]
        if not mine.empty:
            pick = (mine["objective"].idxmin() if sweep.direction == "minimize"
                    else mine["objective"].idxmax())
            best[plan.label] = mine.loc[pick, "run_id"]
    return best


def best_seed_runs(methods) -> list[str]:
    """The run ids the report draws of each method (``report.data.MethodData``): its best
    trial's seed runs (or held-out runs), the chart's runs."""
    return [str(run) for m in methods for run in m.seeds["run_id"]]


def log_scale_metrics(sweep, table, final) -> frozenset[str]:
    """The objective's metric when its final values over the seed runs want a log axis
    (``stats.wants_log_scale``, the report's rule)."""
    from workbench.stats import aggregates as stats

    if table.empty:
        return frozenset()
    seeds = final[final["run_id"].isin(table.loc[table.get(runs.KIND) == runs.SEED, "run_id"])]
    wanted = sweep.metric in seeds and stats.wants_log_scale(seeds[sweep.metric])
    return frozenset([sweep.metric] if wanted else [])
