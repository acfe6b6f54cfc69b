"""``cdclake sql``: one query on the mirrors, its result printed as a table.

Two engines read the mirrors. Spark SQL (the default) runs on cdclake's one session
(:func:`cdclake.sparkenv.session.session`), whose default catalog is the mirrors', so
``<namespace>.<schema>__<table>`` names a mirror; it starts a JVM (half a minute on a small
machine). DuckDB (``--engine duckdb``) answers in about a second: each mirror of a local
warehouse is a view ``<namespace>.<schema>__<table>`` over its current metadata file
(``iceberg_scan``), with DuckDB's ``iceberg`` extension loaded from the ``duckdb-ext-iceberg``
and ``duckdb-ext-avro`` wheels — never downloaded (the ``duckdb`` extra installs all three).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from cdclake.config import Config, positive_int
from cdclake.errors import ConfigError, LakeError
from cdclake.lake.catalog import open_catalog
from cdclake.lake.tables import KIND, MIRROR
from cdclake.lake.watermark import STREAM
from cdclake.sparkenv.session import session
from cdclake.sparkenv.tasks import error_line

ENGINES = ("spark", "duckdb")


def add_sql_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="SQL; mirrors are <namespace>.<schema>__<table> (Spark: the "
                                 "catalog is the session's default)")
    p.add_argument("--max-rows", type=positive_int, default=100,
                   help="rows printed at most (default 100)")
    p.add_argument("--engine", choices=ENGINES, default="spark",
                   help="spark (Spark SQL, the default) or duckdb (a local warehouse, read "
                        "in a second)")


def run_sql(args: argparse.Namespace, config: Config) -> int:
    """Run one query on the mirrors and print its result."""
    catalog = open_catalog(config, create=False)  # no catalog yet, or a bad one: said first
    if args.engine == "duckdb":
        return _run_duckdb(args, config, catalog)
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    spark = session(config, "sql")
    try:
        spark.sql(args.query).show(n=args.max_rows, truncate=False)
    except (PySparkException, Py4JError) as exc:
        raise LakeError(f"query failed: {error_line(exc)}") from None
    finally:
        spark.stop()
    return 0


def _run_duckdb(args: argparse.Namespace, config: Config, catalog: Any) -> int:
    con = duckdb_connection()
    import duckdb

    try:
        con.execute(f"CREATE SCHEMA {_ident(config.namespace)}")
        for ident in catalog.list_tables(config.namespace) \
                if catalog.namespace_exists(config.namespace) else ():
            table = catalog.load_table(ident)
            props = table.properties
            if props.get(STREAM) != config.stream or props.get(KIND, MIRROR) != MIRROR:
                continue
            location = table.metadata_location.removeprefix("file://")
            if not location.startswith("/"):
                raise ConfigError(f"--engine duckdb reads mirrors of a local warehouse; "
                                  f"{'.'.join(ident)} is at {location}: use --engine spark")
            con.execute(f"CREATE VIEW {_ident(config.namespace)}.{_ident(ident[-1])} AS "
                        f"SELECT * FROM iceberg_scan('{_literal(location)}')")
        result = con.sql(args.query)
        if result is None:  # a statement without rows
            return 0
        result.limit(args.max_rows).show(max_rows=args.max_rows, max_width=10_000)
        more = result.limit(args.max_rows + 1).aggregate("count(*)").fetchone()
        if more and more[0] > args.max_rows:
            print(f"only showing the first {args.max_rows} rows")
    except duckdb.Error as exc:
        raise LakeError(f"query failed: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    return 0


def duckdb_connection() -> Any:
    """An in-memory DuckDB with the ``iceberg`` extension loaded from the wheels' files,
    offline; ConfigError naming the packages when they are not installed."""
    spec = importlib.util.find_spec("duckdb_ext")
    if importlib.util.find_spec("duckdb") is None or spec is None \
            or not spec.submodule_search_locations:
        raise ConfigError("--engine duckdb needs DuckDB 1.x and the wheels of its iceberg "
                          "extension: pip install 'cdclake[duckdb]' (duckdb<2, "
                          "duckdb-ext-iceberg, duckdb-ext-avro)")
    import duckdb

    found = [Path(p) / "extensions" for p in spec.submodule_search_locations
             if list((Path(p) / "extensions").glob(
                 f"v{duckdb.__version__}/*/iceberg.duckdb_extension"))]
    if not found:
        raise ConfigError(f"no iceberg extension for DuckDB {duckdb.__version__} in "
                          f"{list(spec.submodule_search_locations)}: install the "
                          "duckdb-ext-iceberg and duckdb-ext-avro wheels of that version")
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET extension_directory = ?", [str(found[0])])
    con.execute("LOAD iceberg")
    return con


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return text.replace("'", "''")
