"""The naive baseline of benchmarks/report_speed.py's small case: what a researcher would write
in a notebook to draw a sweep's learning curves, through MLflow's client.

    python benchmarks/naive_curves.py TRACKING_URI EXPERIMENT OUT_DIR METRIC [METRIC ...]

Every seed run's history of each metric and of each x-axis (``get_metric_history``, one call
per run and key), the mean over a method's seed runs at each step, one PNG per metric and
x-axis, as ``workbench report`` draws them (which also draws its other figures, a PDF of each
and its tables).
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

X_AXES = ["step", "cost/samples", "cost/grad_evals", "time/wall_seconds"]


def main() -> None:
    tracking, experiment_name, out = sys.argv[1:4]
    metrics = sys.argv[4:]
    client = MlflowClient(tracking)
    experiment = client.get_experiment_by_name(experiment_name)
    runs = client.search_runs([experiment.experiment_id], "tags.`workbench.kind` = 'seed'",
                              max_results=50_000)
    keys = metrics + [x for x in X_AXES if x != "step"]
    rows = [(run.data.tags["workbench.method"], run.info.run_id, key, m.step, m.value)
            for run in runs for key in keys
            for m in client.get_metric_history(run.info.run_id, key)]
    frame = pd.DataFrame(rows, columns=["method", "run", "key", "step", "value"])
    wide = frame.pivot_table(index=["method", "run", "step"], columns="key", values="value")
    wide = wide.reset_index()
    for metric in metrics:
        for x in X_AXES:
            fig, ax = plt.subplots(figsize=(6, 4))
            for method, group in wide.groupby("method"):
                mean = group.groupby("step")[[metric, x] if x != "step" else [metric]].mean()
                ax.plot(mean[x] if x != "step" else mean.index, mean[metric], label=method)
            ax.set_xlabel(x)
            ax.set_ylabel(metric)
            ax.legend()
            fig.savefig(f"{out}/{metric.replace('/', '-')}_{x.replace('/', '-')}.png", dpi=120)
            plt.close(fig)


if __name__ == "__main__":
    main()
