"""Test-only: deform every tuple of a table read from its pages and compare with the server.

For each row (matched by ctid) and live column, ``codec.text`` of the datum must equal what
the type's output function prints (``format('%s', col)``) in a session with the output
settings the codecs reproduce.
TOASTed values are read back from the TOAST relation's own pages (toast_chunk + reassemble).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from cdclake.catalog.model import Column, TypeInfo
from cdclake.tuples import heap
from cdclake.tuples.codecs import Codec, codec_for
from cdclake.tuples.desc import MissingValue
from cdclake.tuples.varlena import (
    is_external,
    parse_toast_pointer,
    payload,
    reassemble,
    toast_chunk,
)
from tests.oracle.tuples.pagetuples import (
    capture_columns,
    capture_types,
    parse_ctid,
    read_relation,
)


@dataclass
class Decoded:
    """One table's rows as the server printed them and as decoded from its pages."""

    columns: list[Column]
    codecs: dict[int, Codec]
    types: dict[int, TypeInfo]
    #: per row (by ctid): attnum -> (expected text, our payload or MissingValue or None)
    rows: dict[tuple[int, int], dict[int, tuple[str | None, object]]] = field(
        default_factory=dict)
    mismatches: list[str] = field(default_factory=list)
    compared: int = 0
    external: int = 0  #: values that came from the TOAST relation
    compressed_inline: int = 0


def read_toast(conn: Any, table: str) -> dict[int, list[bytes]]:
    """valueid -> chunks in chunk_seq order, from the TOAST relation's pages."""
    toast = conn.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = "
                         "%s::regclass AND reltoastrelid <> 0", (table,)).fetchone()
    if toast is None:
        return {}
    chunks: dict[int, dict[int, bytes]] = {}
    for tup in read_relation(conn, toast[0]).values():
        valueid, seq, data = toast_chunk(tup)
        chunks.setdefault(valueid, {})[seq] = data
    out = {}
    for valueid, by_seq in chunks.items():
        assert sorted(by_seq) == list(range(len(by_seq))), f"chunk gap in value {valueid}"
        out[valueid] = [by_seq[i] for i in range(len(by_seq))]
    return out


def decode_table(conn: Any, table: str, types: dict[int, TypeInfo] | None = None) -> Decoded:
    """Compare every live column of every row of ``table`` (a regclass text)."""
    types = types if types is not None else capture_types(conn)
    cols = capture_columns(conn, table)
    live = [c for c in cols if not c.dropped]
    codecs = {c.attnum: codec_for(c.type_oid, c.typmod, types, column=c.name, relation=table)
              for c in live}
    tuples = read_relation(conn, table)
    toast = read_toast(conn, table)
    # format('%s') calls the type's output function, as test_decoding and pgoutput do;
    # ::text would take a cast function where one exists (bool -> 'true', bpchar trimmed,
    # inet with /32, xml without declaration handling); num_nulls asks whether the value is
    # NULL (IS NULL is true of a composite whose attributes are all NULL, too)
    select = sql.SQL("SELECT ctid::text, {} FROM {}").format(
        sql.SQL(", ").join(
            sql.SQL("CASE WHEN num_nulls({0}) = 1 THEN NULL ELSE format('%s', {0}) END").format(
                sql.Identifier(c.name)) for c in live),
        sql.SQL(table))
    rows = conn.execute(select).fetchall()
    out = Decoded(cols, codecs, types)
    for row in rows:
        ctid = parse_ctid(row[0])
        tup = tuples.get(ctid)
        if tup is None:
            out.mismatches.append(f"{table} {row[0]}: no tuple on the page")
            continue
        datums = heap.deform(tup, cols)
        got_row: dict[int, tuple[str | None, object]] = {}
        for c, expected in zip(live, row[1:], strict=True):
            datum = datums[c.attnum - 1]
            codec = codecs[c.attnum]
            p: object
            if datum is None:
                p, got = None, None
            elif isinstance(datum, MissingValue):
                p, got = datum, datum.text
            else:
                assert isinstance(datum, bytes)
                if codec.typisvarlena and is_external(datum):
                    ptr = parse_toast_pointer(datum)
                    p = reassemble(ptr, toast[ptr.valueid])
                    out.external += 1
                elif codec.typisvarlena:
                    if datum[0] & 3 == 2:
                        out.compressed_inline += 1
                    p = payload(datum)
                else:
                    p = datum
                got = codec.text(p)  # type: ignore[arg-type]
            out.compared += 1
            got_row[c.attnum] = (expected, p)
            if got != expected:
                out.mismatches.append(
                    f"{table}.{c.name} ({types[c.type_oid].name}) at {row[0]}: "
                    f"decoded {got!r}, server prints {expected!r}")
        out.rows[ctid] = got_row
    if not rows:
        out.mismatches.append(f"{table} has no rows: nothing was compared")
    return out
