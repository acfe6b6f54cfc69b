"""Oracle: inline-compressed and out-of-line (TOASTed) values, read from the heap's and the
TOAST relation's pages, decode to what the server prints.

Every storage path is checked to have actually been taken: inline pglz, inline lz4, external
uncompressed, external pglz, external lz4 (lz4 needs a server built with it). Values whose
last chunk takes every length class are also decoded from the WAL, beside a test_decoding
slot (issue 33: a chunk whose length word starts with a zero byte stopped decoding).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from cdclake.local.postgres import LocalPostgres
from cdclake.tuples import heap
from cdclake.tuples.varlena import is_external, parse_toast_pointer
from tests.oracle.decoding.harness import (
    archive_all,
    as_lines,
    diff,
    oracle,
    ours,
    prepare,
    run_steps,
)
from tests.oracle.features import server_supports, skip_unless_built_with
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


# -- every length class of a value's last chunk (issue 33), from the WAL beside a slot -------

#: an md5 chain of 51,200 hex characters, incompressible enough that pglz gives up on it: the
#: first characters of it make a text value, of its bytes (decoded from hex) a bytea value
CHAIN = "(SELECT string_agg(md5('chunk' || g), '') FROM generate_series(1, 1600) g)"

#: how values are stored -> (column, type, storage, compression of its stored values):
#: EXTERNAL storage never compresses, and an EXTENDED column stores the chain as it is
#: (pglz, the default method, gives up on it); led by a run of one byte, it is compressed
STORED_AS: dict[str, list[tuple[str, str, str, str | None]]] = {
    "uncompressed": [(f"{t}_{s.lower()}", t, s, None) for t in ("text", "bytea")
                     for s in ("EXTERNAL", "EXTENDED")],
    "pglz": [(f"{t}_pglz", t, "EXTENDED", "pglz") for t in ("text", "bytea")],
    "lz4": [(f"{t}_lz4", t, "EXTENDED", "lz4") for t in ("text", "bytea")],
}


def toast_max_chunk_size(block_size: int) -> int:
    """TOAST_MAX_CHUNK_SIZE (access/heaptoast.h): what is left of EXTERN_TUPLE_MAX_SIZE, a
    quarter of a page (MaximumBytesPerTuple(4): the page header and 4 line pointers taken
    off, MAXALIGNed down), after a chunk row's header (MAXALIGN(23)), chunk_id, chunk_seq and
    chunk_data's 4-byte header."""
    per_tuple = (block_size - ((24 + 4 * 4 + 7) & ~7)) // 4 & ~7
    return per_tuple - 24 - 4 - 4 - 4


def last_chunk_classes(chunk: int) -> list[tuple[str, int]]:
    """(class, stored size) of a value whose last chunk is of each length class. Two full
    chunks come first: a compressed value of one chunk and a little more still fits inline.
    A chunk_data's 4-byte length word (VARSIZE << 2) starts with a zero byte when
    VARSIZE is a multiple of 64: the issue's 444 + 4 bytes is one of them."""
    zero_first = [n for n in range(1, chunk + 1) if ((n + 4) << 2) & 0xFF == 0]
    assert 444 in zero_first
    short_max = 0x7F - 1  # VARATT_SHORT_MAX less the 1-byte header: 126 data bytes
    return [
        ("1 byte", 2 * chunk + 1),
        (f"{short_max} bytes, the most a packable varlena keeps a 1-byte header for",
         2 * chunk + short_max),
        (f"{short_max + 1} bytes, the least it gives a 4-byte header", 2 * chunk + short_max + 1),
        (f"{zero_first[0]} bytes, the least whose length word starts with a zero byte",
         2 * chunk + zero_first[0]),
        ("444 bytes, as the issue's value", 2 * chunk + 444),
        (f"{zero_first[-1]} bytes, the most whose length word starts with a zero byte",
         2 * chunk + zero_first[-1]),
        (f"{chunk - 1} bytes, a full chunk less 1", 3 * chunk - 1),
        (f"{chunk} bytes, a full chunk", 3 * chunk),
        ("1 byte after full chunks", 3 * chunk + 1),
        ("the issue's value: 11 full chunks and 444 bytes", 11 * chunk + 444),
    ]


def _value(typ: str, run: int | str, tail: int | str) -> str:
    """SQL for a run of ``run`` bytes of one value ('x', or zero bytes), then the first
    ``tail`` bytes of the chain (``c.chain``, :data:`CHAIN`)."""
    if typ == "text":
        return f"repeat('x', {run}) || left(c.chain, {tail})"
    return f"decode(repeat('00', {run}) || left(c.chain, 2 * {tail}), 'hex')"


def _fit(conn: Any, typ: str, method: str, stored: int) -> tuple[int, int]:
    """(run, tail) of a value the method compresses to exactly ``stored`` bytes (va_tcinfo
    and the stream: what its TOAST pointer's extsize and ``pg_column_size`` say). A
    compressed stream grows by about one byte a byte of the chain, skipping a size where a
    control byte comes in (pglz); a window of tails around the estimate is compressed in a
    temporary table (no WAL), and another run length moves the sizes skipped."""
    probe = f"probe_{typ}_{method}"
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {probe} "
                 f"(tail int, v {typ} COMPRESSION {method})")
    run, tail = stored, stored * 9 // 10
    for _ in range(12):
        conn.execute(f"TRUNCATE {probe}")
        conn.execute(f"INSERT INTO {probe} SELECT t, {_value(typ, run, 't')} "
                     f"FROM generate_series(%s::int, %s::int) t, {CHAIN} c(chain)",
                     (tail - 64, tail + 64))
        sizes = dict(conn.execute(f"SELECT tail, pg_column_size(v) FROM {probe} "
                                  "WHERE pg_column_compression(v) IS NOT NULL").fetchall())
        hits = sorted(t for t, size in sizes.items() if size == stored)
        if hits:
            return run, hits[0]
        lo, hi = min(sizes), max(sizes)
        if sizes[hi] < stored:
            tail = hi + (stored - sizes[hi]) * 9 // 10
        elif sizes[lo] > stored:
            tail = lo - (sizes[lo] - stored) * 9 // 10
        else:
            run += 37  # the size was skipped: another run moves the sizes skipped
    raise AssertionError(f"no {typ} value found that {method} stores in {stored} bytes")


@pytest.mark.parametrize("stored_as", list(STORED_AS))
def test_every_last_chunk_length_decodes_as_the_slot_does(
        pg: LocalPostgres, conn: Any, database: str, stored_as: str, tmp_path: Path) -> None:
    """Values whose last TOAST chunk takes every length class (the server's own sizes say
    each class was hit), text and bytea, stored as ``stored_as``: inserted, left unchanged by
    an UPDATE, copied by one (new chunks in an UPDATE), deleted (by key, then with the whole
    old row under REPLICA IDENTITY FULL). ``cdclake decode`` prints what a test_decoding slot
    prints, and the values read from the pages are what the server prints."""
    if stored_as == "lz4":
        skip_unless_built_with(pg, frozenset({"lz4"}))
    chunk = toast_max_chunk_size(int(conn.execute("SHOW block_size").fetchone()[0]))
    assert chunk == conn.execute("SELECT max_toast_chunk_size FROM pg_control_init()"
                                 ).fetchone()[0]
    columns = STORED_AS[stored_as]
    classes = last_chunk_classes(chunk)
    conn.execute("RESET default_toast_compression")
    inserts = []
    for i, (name, stored) in enumerate(classes, 1):
        values = [_value(typ, *(_fit(conn, typ, method, stored) if method else (0, stored)))
                  for _col, typ, _storage, method in columns]
        inserts.append(("a", f"INSERT INTO lastchunk SELECT {i}, "
                             f"{sql.Literal(name).as_string(conn)}, NULL, {', '.join(values)} "
                             f"FROM {CHAIN} c(chain)"))
    names = ", ".join(c[0] for c in columns)
    setup = [f"CREATE TABLE lastchunk (id int PRIMARY KEY, class text, note text, "
             f"{', '.join(f'{c} {t}' for c, t, _s, _m in columns)})"]
    setup += [f"ALTER TABLE lastchunk ALTER {c} SET STORAGE {s}"
              + (f", ALTER {c} SET COMPRESSION {m}" if m else "") for c, _t, s, m in columns]
    issue = len(classes)
    cap = prepare(pg, database, setup)
    try:
        run_steps(pg, database, [("a", "BEGIN"), *inserts, ("a", "COMMIT")])
        _assert_classes_hit(conn, columns, classes, chunk)
        result = decode_table(conn, "lastchunk")
        assert result.mismatches == []
        assert result.external == len(columns) * len(classes)
        run_steps(pg, database, [
            ("a", "UPDATE lastchunk SET note = 'the values unchanged'"),
            ("a", f"UPDATE lastchunk SET ({names}) = (SELECT {names} FROM lastchunk "
                  f"WHERE id = {issue}) WHERE id = 1"),
            ("a", "DELETE FROM lastchunk WHERE id IN (2, 3)"),
            ("a", "ALTER TABLE lastchunk REPLICA IDENTITY FULL"),
            ("a", f"DELETE FROM lastchunk WHERE id = {issue}"),
        ])
        cap.end_lsn = archive_all(pg, database)
        expected = as_lines(oracle(pg, cap))
    finally:
        pg.sql("SELECT pg_drop_replication_slot(%s)", database, (cap.slot,))
    assert sum("unchanged-toast-datum" in line for line in expected) == len(classes)
    actual, _ = ours(pg, cap, spill_dir=tmp_path / "spill")
    assert actual == expected, diff(expected, actual)


def _assert_classes_hit(conn: Any, columns: list[tuple[str, str, str, str | None]],
                        classes: list[tuple[str, int]], chunk: int) -> None:
    """The server's sizes say every value is stored as meant, its last chunk of its class:
    each value's stored size and compression (pg_column_size, pg_column_compression), and
    each value in the TOAST relation as chunks of the expected number, the last one of the
    expected length with a 4-byte header (chunk_data's plain storage: never a 1-byte one)."""
    for col, _typ, _storage, method in columns:
        got = conn.execute(sql.SQL("SELECT class, pg_column_size({0}), pg_column_compression({0})"
                                   " FROM lastchunk ORDER BY id").format(sql.Identifier(col))
                           ).fetchall()
        assert got == [(name, stored, method) for name, stored in classes], col
    toast = conn.execute("SELECT reltoastrelid::regclass::text FROM pg_class "
                         "WHERE oid = 'lastchunk'::regclass").fetchone()[0]
    # sizes straight from the scan: a sort (or an aggregate's) would store the datums again,
    # with the 1-byte headers a sort tuple gives short values
    values: dict[int, list[tuple[int, int, int]]] = {}
    for value_id, seq, length, size in conn.execute(
            f"SELECT chunk_id, chunk_seq, length(chunk_data), pg_column_size(chunk_data) "
            f"FROM {toast}"):
        values.setdefault(value_id, []).append((seq, length, size))
    got_chunks = sorted((len(c), max(c)[1], max(c)[2]) for c in values.values())
    expected = []
    for _name, stored in classes:
        last = stored - (stored - 1) // chunk * chunk
        expected += [((stored - 1) // chunk + 1, last, last + 4)] * len(columns)
    assert got_chunks == sorted(expected)
