"""Fixtures for the tuple-layer oracle: a fresh database with pageinspect, UTC session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdclake.local.postgres import LocalPostgres
from tests.oracle.tuples.pagetuples import set_session
from tests.support.twins import both_implementations  # noqa: F401 - autouse: both implementations


@pytest.fixture
def conn(pg: LocalPostgres, database: str) -> Iterator[Any]:
    """An autocommit connection to a fresh database, output settings as the codecs assume."""
    c = pg.connect(database)
    try:
        c.execute("CREATE EXTENSION pageinspect")
        set_session(c)
        yield c
    finally:
        c.close()

