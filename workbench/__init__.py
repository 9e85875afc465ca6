"""Workbench: compare training-method schemes fairly, with every number traceable to a run."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``load_runs`` and ``load_metrics`` (``workbench.api``), imported on first use so that
    ``import workbench`` stays light."""
    if name in ("load_runs", "load_metrics"):
        from workbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
