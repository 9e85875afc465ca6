"""A demo plugin: a step-size method registered through the ``workbench.methods`` entry point.

Installing this package makes ``halving_step`` appear beside the methods of the workbench
repository; nothing in the repository names it (tests/test_plugin_package.py).
"""
