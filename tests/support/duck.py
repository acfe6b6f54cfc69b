"""Read Iceberg tables with DuckDB: an Iceberg reader cdclake did not write.

The ``duckdb-ext-iceberg`` and ``duckdb-ext-avro`` wheels ship the extension files under
``site-packages/duckdb_ext/extensions/v<duckdb>/<platform>/``; pointing DuckDB's
``extension_directory`` there lets ``LOAD iceberg`` (which loads ``avro`` itself) work offline.
A missing wheel is a broken test environment, so it fails loudly rather than skipping.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg.table import Table


def extension_directory() -> Path:
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the duckdb-ext-iceberg and duckdb-ext-avro wheels are not installed "
                           "(pip install duckdb-ext-iceberg duckdb-ext-avro)")
    for location in spec.submodule_search_locations:
        ext = Path(location) / "extensions"
        if list(ext.glob(f"v{duckdb.__version__}/*/iceberg.duckdb_extension")):
            missing = [n for n in ("avro",)
                       if not list(ext.glob(f"v{duckdb.__version__}/*/{n}.duckdb_extension"))]
            if missing:
                raise RuntimeError(f"DuckDB extension(s) {missing} missing from {ext}: "
                                   "pip install duckdb-ext-avro")
            return ext
    raise RuntimeError(f"no iceberg extension for DuckDB {duckdb.__version__} in "
                       f"{spec.submodule_search_locations}")


#: the process's in-memory database, with the iceberg extension loaded
_database: duckdb.DuckDBPyConnection | None = None


def connect() -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the iceberg extension loaded from the wheels, offline: a
    cursor of one in-memory database per process, so the extension is loaded once (0.25 s of
    CPU per load). The readers only scan tables (``iceberg_scan``): nothing a test leaves in
    the database is seen by another."""
    global _database
    if _database is None:
        con = duckdb.connect()
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET extension_directory = ?", [str(extension_directory())])
        con.execute("LOAD iceberg")
        _database = con
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
