"""The ingest DAG against real services: PostgreSQL 15, moto_server over HTTP, local Spark, the
SQLite Iceberg catalog and an Airflow home of its own (SQLite metadata DB).

Airflow reads ``AIRFLOW_HOME`` once, when first imported, so :func:`airflow_home` sets it up
(and migrates the metadata DB) before anything imports airflow; the tests import it lazily.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdclake.archive.command import store_env
from cdclake.catalog.install import install
from cdclake.config import Config
from cdclake.local.postgres import LocalPostgres
from cdclake.local.s3 import LocalS3

REPO = Path(__file__).resolve().parents[3]
DAGS = REPO / "dags"


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh AIRFLOW_HOME with a migrated SQLite DB and the repository's dags folder."""
    if "airflow" in sys.modules:
        pytest.fail("airflow was imported before its home was set up")
    home = tmp_path_factory.mktemp("airflow")
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    })
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True,
                   capture_output=True, env=os.environ.copy())
    return home


@dataclass
class Source:
    """The source cluster and database, set up for cdclake before any table has rows."""

    pg: LocalPostgres
    database: str

    def sql(self, query: str) -> list[tuple[object, ...]]:
        return self.pg.sql(query, self.database)


@pytest.fixture(scope="module")
def source() -> Iterator[Source]:
    """PG15 archiving into a directory (the DAG's ship task uploads it), with cdclake's
    dictionary installed after the tables exist and before they get rows. (Its own temp
    directory: pytest's is private to root and the server runs as postgres.)"""
    pg = LocalPostgres.create(15, wal_segsize_mb=1).start()
    try:
        db = pg.create_database("shop")
        src = Source(pg, db)
        for ddl in SCHEMA:
            src.sql(ddl)
        install(pg.dsn(db))
        yield src
    finally:
        pg.destroy()


@pytest.fixture(scope="module", autouse=True)
def stop_spark() -> Iterator[None]:
    """The DAG's decode task runs in this process (dag.test): stop its Spark session after
    the module, not at interpreter exit when logging is already torn down."""
    yield
    pyspark_sql = sys.modules.get("pyspark.sql")
    if pyspark_sql is not None:
        session = (pyspark_sql.SparkSession.getActiveSession()
                   or pyspark_sql.SparkSession._instantiatedSession)
        if session is not None:
            session.stop()


@pytest.fixture(scope="module")
def config(source: Source, local_s3: LocalS3, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """The module's stream, under a prefix of its own in the session's bucket."""
    home = tmp_path_factory.mktemp("home")
    return local_s3.config(Config(home=home, archive_dir=source.pg.archive_dir,
                                  source_dsn=source.pg.dsn(source.database)),
                           prefix=f"shop/{home.name}")


@pytest.fixture
def cdclake_env(config: Config, monkeypatch: pytest.MonkeyPatch) -> Config:
    """What the DAG's tasks read with Config.load(): the same settings, as CDCLAKE_* vars."""
    env = {**store_env(config), "CDCLAKE_HOME": str(config.home),
           "CDCLAKE_ARCHIVE_DIR": str(config.archive_dir),
           "CDCLAKE_SOURCE_DSN": config.source_dsn}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CDCLAKE_CONFIG", raising=False)
    monkeypatch.delenv("CDCLAKE_TABLES", raising=False)
    assert Config.load() == config
    return config


SCHEMA = [
    """CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL,
       balance numeric(12,2), note text, opened timestamptz)""",
    # out-of-line, uncompressed: an UPDATE that does not touch note logs it as unchanged TOAST
    "ALTER TABLE accounts ALTER COLUMN note SET STORAGE EXTERNAL",
    "CREATE TABLE events (id bigint PRIMARY KEY, kind text, amount double precision)",
    "CREATE TABLE tags (tag text, weight int)",
    "ALTER TABLE tags REPLICA IDENTITY FULL",
]
