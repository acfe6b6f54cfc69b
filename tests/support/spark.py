"""The plain Spark session the suite's files decode on.

Made by cdclake's own factory (:func:`cdclake.sparkenv.session.session`) as the decode step
makes its own: ``local[2]``, two partitions, the decode job's module loaded in the Python
workers before they fork. Each file that asks for it (the ``spark`` fixture,
tests/conftest.py) gets one, stopped at the file's end: a session left running into the next
file would be what that file's own session turns out to be (pyspark's ``getOrCreate``), with
this one's static settings — no catalog of its home at start, not its task modules preloaded.
pyspark keeps one JVM per process, so a file's session only builds a SparkContext on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdclake.config import Config
from cdclake.spark import job
from cdclake.sparkenv.session import session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONFIG = Config(spark_master="local[2]", spark_partitions=2)


def plain_session() -> SparkSession:
    """A session for decoding on Spark, as the decode step makes it."""
    return session(CONFIG, "test", tasks=(job.__name__,))
