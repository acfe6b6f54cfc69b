"""One local Spark session (2 partitions, as the pipeline's default) for the module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdclake.config import Config
from cdclake.spark import job
from cdclake.sparkenv.session import session as spark_session


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session(Config(spark_master="local[2]", spark_partitions=2), "test",
                            tasks=(job.__name__,))
    yield session
    session.stop()
