"""Oracle: codec.text of tuples read from pages == what PostgreSQL prints for col::text.

Independent of WAL: tuples come from pageinspect's raw pages, the dictionary from a small
test-only capture. Runs on PostgreSQL 15 and 18 (fixture ``pg``).
"""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

from cdclake.local.postgres import LocalPostgres
from tests.oracle.features import server_supports
from tests.oracle.tuples.harness import decode_table
from tests.oracle.tuples.types_catalog import NEEDS, SETUP, TYPES, VERSIONED

pytestmark = pytest.mark.oracle


def _create_filled(conn: Any, table: str, types: list[tuple[str, list[str]]]) -> None:
    """Column c<i> per type; row r takes the r-th literal of each column (else NULL)."""
    cols = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(f"c{i}"), sql.SQL(t))
        for i, (t, _) in enumerate(types))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table), cols))
    nrows = max(len(v) for _, v in types)
    for r in range(nrows):
        values = sql.SQL(", ").join(
            sql.SQL(f"({v[r]})::{t}") if r < len(v) else sql.SQL("NULL")
            for t, v in types)
        conn.execute(sql.SQL("INSERT INTO {} VALUES ({})").format(sql.Identifier(table),
                                                                  values))


def test_every_type_and_edge_value_prints_as_postgresql(pg: LocalPostgres, conn: Any) -> None:
    for stmt in SETUP:
        conn.execute(stmt)
    types = list(TYPES) + [(t, v) for version, t, v in VERSIONED if pg.version >= version]
    _create_filled(conn, "edge", types)
    result = decode_table(conn, "edge")
    assert result.mismatches == []
    assert result.compared == len(types) * max(len(v) for _, v in types)


def test_types_needing_build_features(pg: LocalPostgres, conn: Any) -> None:
    available = [(t, v) for t, v, probe in NEEDS if server_supports(conn, probe)]
    if not available:
        pytest.skip(f"PostgreSQL {pg.version} here is built without libxml (xml type unusable)")
    _create_filled(conn, "feat", available)
    result = decode_table(conn, "feat")
    assert result.mismatches == []
    assert result.compared > 0


def test_rows_spanning_pages_and_one_column_per_row(conn: Any) -> None:
    """Many rows over several pages, each row with a single non-null column: the null bitmap
    and alignment walk see every type at every position's neighbour."""
    for stmt in SETUP:
        conn.execute(stmt)
    cols = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(f"c{i}"), sql.SQL(t))
        for i, (t, _) in enumerate(TYPES))
    conn.execute(sql.SQL("CREATE TABLE sparse ({})").format(cols))
    for i, (t, values) in enumerate(TYPES):
        for v in values:
            conn.execute(sql.SQL("INSERT INTO sparse ({}) VALUES ({})").format(
                sql.Identifier(f"c{i}"), sql.SQL(f"({v})::{t}")))
    assert conn.execute("SELECT pg_relation_size('sparse') > 8192").fetchone()[0]
    result = decode_table(conn, "sparse")
    assert result.mismatches == []
