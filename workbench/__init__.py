"""Workbench: compare training-method schemes fairly, with every number traceable to a run."""

__version__ = "0.1.0"
