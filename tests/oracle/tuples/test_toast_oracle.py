"""Oracle: inline-compressed and out-of-line (TOASTed) values, read from the heap's and the
TOAST relation's pages, decode to what the server prints.

Every storage path is checked to have actually been taken: inline pglz, inline lz4, external
uncompressed, external pglz, external lz4 (lz4 needs a server built with it).
"""

from __future__ import annotations

from typing import Any

import pytest
from psycopg import sql

from cdclake.local.postgres import LocalPostgres
from cdclake.tuples import heap
from cdclake.tuples.varlena import is_external, parse_toast_pointer
from tests.oracle.features import server_supports
from tests.oracle.tuples.harness import decode_table
from tests.oracle.tuples.pagetuples import capture_columns, read_relation

pytestmark = pytest.mark.oracle

#: compressible (about 3:1) and large enough to leave the page even when compressed
BIG_COMPRESSIBLE = ("(SELECT string_agg(repeat(md5(g::text), 3), '') "
                    "FROM generate_series(1, {n}) g)")
#: little to gain from compression: stays uncompressed
BIG_RANDOM = "(SELECT string_agg(md5(g::text || 'salt'), '') FROM generate_series(1, {n}) g)"


def _storage_kind(raw: bytes) -> str:
    if is_external(raw):
        ptr = parse_toast_pointer(raw)
        return f"external-{ptr.compression}" if ptr.compression else "external"
    if raw[0] & 3 == 2:
        method = int.from_bytes(raw[4:8], "little") >> 30
        return {0: "inline-pglz", 1: "inline-lz4"}[method]
    return "inline"


def _kinds(conn: Any, table: str) -> dict[str, set[str]]:
    cols = capture_columns(conn, table)
    kinds: dict[str, set[str]] = {c.name: set() for c in cols}
    for tup in read_relation(conn, table).values():
        for c, d in zip(cols, heap.deform(tup, cols), strict=True):
            if isinstance(d, bytes) and c.attlen == -1:
                kinds[c.name].add(_storage_kind(d))
    return kinds


def _fill(conn: Any, table: str, methods: list[str]) -> dict[str, str]:
    """Columns exercising each storage path for each compression method; name -> kind."""
    expect: dict[str, str] = {}
    cols = ["id int"]
    for m in methods:
        cols += [f"inl_{m} text COMPRESSION {m}", f"ext_{m} text COMPRESSION {m}",
                 f"js_{m} jsonb COMPRESSION {m}", f"arr_{m} int4[] COMPRESSION {m}"]
        expect.update({f"inl_{m}": f"inline-{m}", f"ext_{m}": f"external-{m}",
                       f"js_{m}": f"external-{m}", f"arr_{m}": f"external-{m}"})
    cols += ["plain_ext text", "bytes_ext bytea"]
    expect.update({"plain_ext": "external", "bytes_ext": "external"})
    conn.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
    conn.execute(f"ALTER TABLE {table} ALTER COLUMN plain_ext SET STORAGE EXTERNAL, "
                 "ALTER COLUMN bytes_ext SET STORAGE EXTERNAL")
    values = ["1"]
    for _m in methods:
        values += [
            "repeat('abcdefgh', 400)",  # 3200 bytes -> compresses to a few dozen: inline
            BIG_COMPRESSIBLE.format(n=300),  # ~29 kB -> ~10 kB compressed: out of line
            "(SELECT jsonb_object_agg('key' || g, repeat('v', g % 50)) "
            "FROM generate_series(1, 800) g)",
            "(SELECT array_agg(g / 3) FROM generate_series(1, 20000) g)",
        ]
    values += [BIG_COMPRESSIBLE.format(n=100),
               "convert_to(" + BIG_RANDOM.format(n=200) + ", 'UTF8')"]
    conn.execute(f"INSERT INTO {table} VALUES ({', '.join(values)})")
    # a second row with NULLs between TOASTed values and a short inline one
    conn.execute(sql.SQL("INSERT INTO {} (id, plain_ext) VALUES (2, 'short')").format(
        sql.Identifier(table)))
    return expect


def test_toast_paths(pg: LocalPostgres, conn: Any) -> None:
    methods = ["pglz"]
    if server_supports(conn, "SET default_toast_compression = 'lz4'"):
        methods.append("lz4")
    conn.execute("RESET default_toast_compression")
    expect = _fill(conn, "toasty", methods)
    kinds = _kinds(conn, "toasty")
    for name, kind in expect.items():
        assert kind in kinds[name], (name, kinds[name])
    # the server agrees on the compression method of every compressed value
    for name, kind in expect.items():
        method = conn.execute(sql.SQL("SELECT pg_column_compression({}) FROM toasty WHERE id = 1"
                                      ).format(sql.Identifier(name))).fetchone()[0]
        assert method == (kind.split("-")[1] if "-" in kind else None), (name, method)
    result = decode_table(conn, "toasty")
    assert result.mismatches == []
    assert result.external >= 3 * len(methods) + 2
    assert result.compressed_inline >= len(methods)


def test_lz4_paths_need_a_server_with_lz4(pg: LocalPostgres, conn: Any) -> None:
    """Reports plainly when this server cannot exercise lz4 (the embedded PostgreSQL 18)."""
    if not server_supports(conn, "SET default_toast_compression = 'lz4'"):
        pytest.skip(f"PostgreSQL {pg.version} here is built without lz4; lz4 TOAST paths are "
                    "covered on the servers that have it")
    conn.execute("SET default_toast_compression = 'lz4'")
    conn.execute("CREATE TABLE viadefault (t text)")
    conn.execute("INSERT INTO viadefault VALUES (repeat('xyz', 5000)), ("
                 + BIG_COMPRESSIBLE.format(n=200) + ")")
    kinds = _kinds(conn, "viadefault")
    assert kinds["t"] == {"inline-lz4", "external-lz4"}
    assert decode_table(conn, "viadefault").mismatches == []


def test_compressed_fixtures_match_what_the_server_writes(pg: LocalPostgres, conn: Any) -> None:
    """The unit tests' committed datums are what this server writes for the same values."""
    import json

    from tests.oracle.tuples.compressed_fixtures import FIXTURE, capture

    committed = json.loads(FIXTURE.read_text())
    methods = ["pglz"] + (["lz4"] if server_supports(
        conn, "SET default_toast_compression = 'lz4'") else [])
    conn.execute("RESET default_toast_compression")
    for method in methods:
        assert capture(conn, method) == [f for f in committed if f["method"] == method]
