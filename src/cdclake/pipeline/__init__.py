"""One ingest run: ship → snapshot → decode → validate stream → merge → validate tables → report.

The steps live in :mod:`cdclake.pipeline.steps`, each a function of the Config and the run's
:class:`RunParams` returning a JSON-able dict; the Airflow DAG (``dags/cdclake_ingest.py``)
runs them as tasks, ``cdclake run`` in sequence (:func:`run_once`). ``cdclake status``
(:mod:`cdclake.pipeline.status`) shows where the stream stands. Spark, pyiceberg and GX are
imported inside the steps, so importing this package — as the DAG file does at every parse —
stays cheap.
"""

from __future__ import annotations

from cdclake.pipeline.params import RunParams
from cdclake.pipeline.steps import (
    STEPS,
    decode,
    merge,
    raise_for_failed_tables,
    report,
    run_once,
    ship,
    snapshot,
    validate_stream,
    validate_tables,
)

__all__ = [
    "STEPS",
    "RunParams",
    "decode",
    "merge",
    "raise_for_failed_tables",
    "report",
    "run_once",
    "ship",
    "snapshot",
    "validate_stream",
    "validate_tables",
]
