"""Read Iceberg tables with DuckDB: an Iceberg reader cdclake did not write.

The connection is the one ``cdclake sql --engine duckdb`` opens
(:func:`cdclake.lake.query.duckdb_connection`): the ``iceberg`` extension loaded from the
``duckdb-ext-iceberg`` and ``duckdb-ext-avro`` wheels, offline. A missing wheel is a broken
test environment, so it fails loudly rather than skipping.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.table import Table

from cdclake.lake.query import duckdb_connection

#: the process's in-memory database, with the iceberg extension loaded
_database: duckdb.DuckDBPyConnection | None = None


def connect() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the iceberg extension loaded from the wheels, offline: a
    cursor of one in-memory database per process, so the extension is loaded once (0.25 s of
    CPU per load). The readers only scan tables (``iceberg_scan``): nothing a test leaves in
    the database is seen by another."""
    global _database
    if _database is None:
        _database = duckdb_connection()
    return _database.cursor()


def read_table(table: Table, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """The table's current snapshot as DuckDB's iceberg_scan reads it (local warehouses)."""
    own = con is None
    con = con or connect()
    try:
        location = table.metadata_location.removeprefix("file://")
        return con.execute("SELECT * FROM iceberg_scan(?)", [location]).fetch_arrow_table()
    finally:
        if own:
            con.close()


def rows(table: Table, columns: list[str] | None = None,
         con: duckdb.DuckDBPyConnection | None = None) -> list[dict[str, Any]]:
    """Rows as dicts (optionally only ``columns``), in a stable order for comparisons."""
    data = read_table(table, con)
    if columns is not None:
        data = data.select(columns)
    return sorted(data.to_pylist(), key=natural)


def natural(row: dict[str, Any]) -> tuple[tuple[bool, Any], ...]:
    """Sort key: column by column, nulls last (values of one column share a type)."""
    return tuple((True, 0) if v is None else (False, v) for v in row.values())
