"""Spark SQL reads the mirrors cdclake wrote, through the catalog pyiceberg wrote.

A real PostgreSQL 15 stream in two batches (the second updates and deletes rows the first
committed, so the mirrors have rewritten files or delete files), decoded from the archived WAL
and merged into Iceberg mirrors in the default SQLite catalog. Every mirror is then read with
Iceberg's own Spark runtime (:mod:`cdclake.sparkenv`), with DuckDB's iceberg extension and
from the source itself: the three must hold the same rows (as multisets, typed values compared
as Python values). ``cdclake sql`` runs as a process as a user runs it.

The Spark session is started after a plain one (no Iceberg on its class path), as in a
process that decoded before: the JVM must be replaced, not reused.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyarrow import fs as pafs

from cdclake.catalog.dictionary import Dictionary
from cdclake.catalog.install import install
from cdclake.config import Config
from cdclake.decoding.plugins.arrow import ArrowChanges
from cdclake.decoding.session import DecodeOptions, decode
from cdclake.lake.batch import read_batch
from cdclake.lake.catalog import open_catalog
from cdclake.lake.merge import merge_batch
from cdclake.lake.tables import mirror_identifier
from cdclake.local.postgres import LocalPostgres
from cdclake.lsn import parse_lsn
from cdclake.wal.source import DirectorySource
from tests.oracle.decoding.harness import archive_all
from tests.support import duck
from tests.support.commands import CDCLAKE

pytestmark = pytest.mark.e2e


#: source table -> the columns compared (typed: ints, numerics, text, bool, dates, timestamps)
TABLES = {
    "public.items": ["id", "name", "price", "qty", "active", "added", "seen", "score"],
    "other.notes": ["id", "body"],
    "public.plain": ["a", "b"],
}
SETUP = [
    "CREATE SCHEMA other",
    """CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), qty bigint,
         active boolean, added date, seen timestamp, score double precision)""",
    "CREATE TABLE other.notes (id bigint PRIMARY KEY, body text)",
    # no key: identity FULL, duplicate rows (a multiset)
    "CREATE TABLE plain (a int, b text)",
    "ALTER TABLE plain REPLICA IDENTITY FULL",
]
BATCH1 = [
    """INSERT INTO items SELECT g, 'item ' || g, (g * 1.25)::numeric(10,2), g::bigint * 1000000007,
         g % 3 = 0, date '2024-01-01' + g, timestamp '2024-01-01 00:00:00.123456' + g * interval
         '1 hour 1 second', g / 7.0 FROM generate_series(1, 300) g""",
    "INSERT INTO items VALUES (301, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "INSERT INTO other.notes SELECT g, repeat('note ', g % 5 + 1) || g "
    "FROM generate_series(1, 40) g",
    "INSERT INTO plain VALUES (1, 'x'), (1, 'x'), (2, 'y'), (3, NULL)",
]
BATCH2 = [
    "UPDATE items SET price = price + 0.01, name = 'changed ' || id, active = NOT active "
    "WHERE id % 10 = 0",
    "DELETE FROM items WHERE id BETWEEN 100 AND 129",
    "INSERT INTO items VALUES (1000, 'late', 9.99, -1, true, '1999-12-31', "
    "'1999-12-31 23:59:59.999999', -0.5)",
    "DELETE FROM other.notes WHERE id > 10",
    "UPDATE other.notes SET body = 'rewritten' WHERE id = 1",
    "DELETE FROM plain WHERE a = 2",
    "UPDATE plain SET b = 'z' WHERE a = 3",
]


@dataclass
class Lake:
    pg: LocalPostgres
    database: str
    config: Config
    home: Path


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """The source on PG15, its stream decoded in two batches and merged into the mirrors."""
    pg = LocalPostgres.create(15, wal_segsize_mb=1).start()
    try:
        db = pg.create_database("shop")
        read_from = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", db)[0][0])
        pg.sql("CHECKPOINT")  # logs the running transactions the decoder starts from
        key = install(pg.dsn(db)).key
        start = parse_lsn(pg.sql("SELECT pg_current_wal_lsn()::text", db)[0][0])
        db_oid = pg.sql("SELECT oid FROM pg_database WHERE datname = current_database()",
                        db)[0][0]
        for stmt in SETUP + BATCH1:
            pg.sql(stmt, db)
        end1 = archive_all(pg, db)
        for stmt in BATCH2:
            pg.sql(stmt, db)
        end2 = archive_all(pg, db)

        tmp = tmp_path_factory.mktemp("sparksql")
        home = tmp / "home"
        config = Config(home=home, stream="sparksql", spark_master="local[2]")
        catalog = open_catalog(config)
        root = tmp / "changes"
        for name, (lo, hi) in {"b1": (start, end1), "b2": (end1, end2)}.items():
            options = DecodeOptions(db_oid=db_oid, start_lsn=lo, read_from=read_from,
                                    end_lsn=hi, spill_dir=tmp / "spill", ddl_key=key)
            _decode(pg, options, root, name)
            report = merge_batch(catalog, config, read_batch(root, name))
            assert all(t.not_found == 0 for t in report.tables), report
        yield Lake(pg, db, config, home)
    finally:
        pg.destroy()


def _decode(pg: LocalPostgres, options: DecodeOptions, root: Path, name: str) -> None:
    """One batch of the archived WAL as the Arrow change stream under ``root/name``."""
    plugins: list[ArrowChanges] = []

    def make(d: Dictionary, _version: int) -> ArrowChanges:
        plugins.append(ArrowChanges(pafs.LocalFileSystem(), str(root / name), name, d.types))
        return plugins[0]

    decode(DirectorySource(pg.archive_dir), Dictionary(), options, make)
    plugins[0].close(options.start_lsn, options.end_lsn)


@pytest.fixture(scope="module")
def spark(lake: Lake) -> Iterator[Any]:
    """A plain session first (a JVM without Iceberg: the worker's JVM, which an earlier file
    may have started, is ended first), then the mirrors' session."""
    from pyspark.sql import SparkSession

    from cdclake.sparkenv.session import end
    from cdclake.sparkenv.session import session as spark_session

    end()
    plain = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    plain.getOrCreate()
    session = spark_session(lake.config, "test")
    yield session
    session.stop()


def _ident(config: Config, table: str) -> tuple[str, str]:
    return mirror_identifier(config, *table.split("."))


def source_rows(lake: Lake, table: str, columns: list[str]) -> Counter[tuple[Any, ...]]:
    schema, name = table.split(".")
    cols = ", ".join(f'"{c}"' for c in columns)
    return Counter(lake.pg.sql(f'SELECT {cols} FROM "{schema}"."{name}"', lake.database))


def spark_rows(spark: Any, lake: Lake, table: str,
               columns: list[str]) -> Counter[tuple[Any, ...]]:
    ns, name = _ident(lake.config, table)
    df = spark.table(f"{lake.config.catalog_name}.{ns}.{name}").select(*columns)
    return Counter(tuple(r) for r in df.collect())


def duck_rows(lake: Lake, table: str, columns: list[str]) -> Counter[tuple[Any, ...]]:
    t = open_catalog(lake.config).load_table(_ident(lake.config, table))
    return Counter(tuple(r[c] for c in columns) for r in duck.rows(t, columns))


def _diff(a: Counter[tuple[Any, ...]], b: Counter[tuple[Any, ...]]) -> str:
    return f"only left {list((a - b).elements())[:5]}, only right {list((b - a).elements())[:5]}"


def test_mirrors_were_rewritten(lake: Lake) -> None:
    """The second batch's updates and deletes changed committed files: a snapshot that
    deleted data files or added delete files exists in every mirror."""
    catalog = open_catalog(lake.config)
    for table in TABLES:
        t = catalog.load_table(_ident(lake.config, table))
        summaries = [s.summary.additional_properties for s in t.snapshots() if s.summary]
        assert any(int(s.get("deleted-data-files") or 0) or int(s.get("added-delete-files") or 0)
                   for s in summaries), f"{table}: no snapshot removed rows: {summaries}"


@pytest.mark.parametrize("table", list(TABLES))
def test_spark_reads_what_duckdb_and_the_source_hold(spark: Any, lake: Lake, table: str) -> None:
    columns = TABLES[table]
    want = source_rows(lake, table, columns)
    got = spark_rows(spark, lake, table, columns)
    seen_by_duck = duck_rows(lake, table, columns)
    assert sum(want.values()) > 0
    assert got == want, f"{table}: Spark differs from the source: {_diff(got, want)}"
    assert got == seen_by_duck, f"{table}: Spark differs from DuckDB: {_diff(got, seen_by_duck)}"


def test_default_catalog_and_namespace(spark: Any, lake: Lake) -> None:
    """``<table>`` alone resolves in the mirrors' namespace; the catalog lists every mirror."""
    names = {r.tableName for r in spark.sql("SHOW TABLES").collect()}
    assert names >= {_ident(lake.config, t)[1] for t in TABLES}
    n = spark.sql("SELECT count(*) FROM public__items").collect()[0][0]
    assert n == sum(source_rows(lake, "public.items", ["id"]).values())


def _cli(lake: Lake, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update({"CDCLAKE_HOME": str(lake.home), "CDCLAKE_STREAM": lake.config.stream,
                "CDCLAKE_SPARK_MASTER": "local[1]"})
    return subprocess.run([CDCLAKE, "sql", *args], env=env, capture_output=True, text=True,
                          timeout=180)


def test_cdclake_sql_prints_the_result(lake: Lake) -> None:
    ns, name = _ident(lake.config, "public.items")
    out = _cli(lake, f"SELECT count(*) AS n FROM {ns}.{name}")
    assert out.returncode == 0, out.stderr[-4000:]
    want = sum(source_rows(lake, "public.items", ["id"]).values())
    assert out.stdout.split() == ["+---+", "|n", "|", "+---+", f"|{want}|", "+---+"], out.stdout
    assert "Traceback" not in out.stderr


def test_cdclake_sql_errors_are_one_line(lake: Lake) -> None:
    out = _cli(lake, "SELECT * FROM cdc.no_such_table")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2, out.stderr[-4000:]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("cdclake sql: error: query failed: "), lines[0]
    assert "no_such_table" in lines[0]
