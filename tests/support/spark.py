"""The suite's plain Spark session: one per worker process, shared by every file that decodes
on Spark without a catalog of its own.

It is made by cdclake's own factory (:func:`cdclake.sparkenv.session.session`) as the decode
step makes its own: ``local[2]``, two partitions, the decode job's module loaded in the Python
workers before they fork. pyspark keeps one JVM per process, so a session made per file only
rebuilt the SparkContext on it (about a second of CPU each); one per worker also keeps what
the JVM compiled for the decode job.

A file that needs a session of its own (its home's catalog: the Spark merge tests; no JVM
with Iceberg at first: test_spark_sql_reads_mirrors.py; the DAG's in-process tasks:
tests/e2e/pipeline/conftest.py) stops the process's session when it ends; the next test that
asks for this one gets it made again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdclake.config import Config
from cdclake.spark import job
from cdclake.sparkenv.session import session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONFIG = Config(spark_master="local[2]", spark_partitions=2)

#: the session :func:`shared_session` made last
_shared: SparkSession | None = None


def shared_session() -> SparkSession:
    """This process's shared session: the live one if it is the shared one, else a new one
    (a file's own session still running is stopped first: a test asking for this one is
    done with it)."""
    global _shared
    from pyspark.sql import SparkSession

    live = SparkSession._instantiatedSession
    if live is not None and live is _shared:
        return live
    if live is not None:
        live.stop()
    _shared = session(CONFIG, "suite", tasks=(job.__name__,))
    return _shared


def stop_shared_session() -> None:
    """Stop the shared session if it is still the live one (at the end of a worker's
    session, not at interpreter exit, when logging is already torn down)."""
    global _shared
    if _shared is not None and type(_shared)._instantiatedSession is _shared:
        _shared.stop()
    _shared = None
