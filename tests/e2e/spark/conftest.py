"""Fixtures for the Spark decode tests: one local SparkSession (2 partitions) per module, its
workers given the decode job's module as the decode's own session gives them.

The session's S3 endpoint (tests/e2e/conftest.py) and the archive tests' prefix per test serve
the one test over HTTP S3.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdclake.config import Config
from cdclake.spark import job
from cdclake.sparkenv.session import session as spark_session
from tests.e2e.archive.conftest import s3_config

__all__ = ["s3_config"]

PARTITIONS = 2


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session(Config(spark_master=f"local[{PARTITIONS}]",
                                   spark_partitions=PARTITIONS), "test",
                            tasks=(job.__name__,))
    yield session
    session.stop()
