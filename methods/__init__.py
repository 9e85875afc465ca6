"""Registered schemes, one file each, grouped by family (discovered by workbench.registry)."""
