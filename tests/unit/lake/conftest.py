"""Fixtures for the lake tests: a local SQLite catalog and warehouse in a temporary home."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from pyiceberg.catalog import Catalog

from cdclake.config import Config
from cdclake.lake.catalog import open_catalog
from tests.support.duck import connect
from tests.support.streamgen import Stream


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(home=tmp_path / "home", stream="test")


@pytest.fixture
def catalog(config: Config) -> Catalog:
    return open_catalog(config)


@pytest.fixture
def stream(tmp_path: Path) -> Stream:
    return Stream(tmp_path / "changes")


@pytest.fixture(scope="session")
def duck() -> Iterator[duckdb.DuckDBPyConnection]:
    """One DuckDB with the iceberg extension for the session (loading it takes a moment)."""
    con = connect()
    yield con
    con.close()
