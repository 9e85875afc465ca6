"""Reports rebuilt from the store alone: figures, tables and their provenance.

``build(sweeps, out_dir)`` reads each sweep's runs with a handful of SQL queries
(``workbench.store.results``) and what its study runs recorded in place of the spec
(``workbench.store.study_record``): the report imports neither the spec nor a testbed. It writes:

- ``curves_<metric>_<axis>.{png,pdf,csv}``, ``final``, ``profiles``, ``best_of_k`` and
  ``sensitivity_<sweep>`` (``figures``), each with the CSV of the numbers it draws
  (``figure_data``);
- ``table_<sweep>.{md,tex,html,csv}`` and ``poi_<sweep>.{md,csv}`` (``tables``);
- a ``.json`` beside every file (query, run ids, git commits, statistics settings, time),
  ``provenance.json`` for the whole report (``provenance``), and ``index.html`` showing
  everything (``index``).

It shows each sweep's current studies (superseded ones on request), marks the stale ones
(code changed since they ran), and shows each best trial on its held-out evaluation seeds where
the sweep ran them; every caption says on which seeds the best trial was chosen and shown, and
how its intervals are made. Modules: ``data`` (what is read back), ``captions`` (the words
every caption shares), ``figure_data`` (each figure's numbers), ``figures`` (drawing them),
``tables``, ``provenance``, ``index``, ``folder`` (file names, atomic replacement), ``entry``
(``build``).
"""

from workbench.report.data import ReportError, SweepRef
from workbench.report.entry import build
from workbench.report.folder import replaceable

__all__ = ["ReportError", "SweepRef", "build", "replaceable"]
