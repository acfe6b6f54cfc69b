"""Test-only: heap tuples straight from pages (pageinspect) and a minimal dictionary capture.

The oracle for the tuple layer must not depend on WAL decoding, so tuples come from
``get_raw_page`` sliced by their line pointers: a WalTuple is the on-disk tuple's
infomask2/infomask/t_hoff and its bytes from offset 23 on. The pg_type/pg_attribute capture
here is deliberately small and lives in tests (the real capture belongs to cdclake.catalog).
"""

from __future__ import annotations

import struct
from typing import Any

from cdclake.catalog.model import Column, TypeInfo
from cdclake.tuples.arrays import parse_literal
from cdclake.wal.record import WalTuple

BLCKSZ = 8192
LP_NORMAL = 1

#: the comparing session: the output settings the codecs reproduce
SESSION_SETTINGS = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO, MDY'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 1",
    "SET bytea_output = 'hex'",
    "SET lc_monetary = 'C'",
)


def set_session(conn: Any) -> None:
    for s in SESSION_SETTINGS:
        conn.execute(s)


def capture_types(conn: Any) -> dict[int, TypeInfo]:
    """Every pg_type row with what the codecs need (enum labels, range subtypes, the
    attributes of composites defined outside the system catalogs)."""
    labels: dict[int, dict[int, str]] = {}
    for typid, oid, label in conn.execute("SELECT enumtypid, oid, enumlabel FROM pg_enum"):
        labels.setdefault(typid, {})[oid] = label
    rows = conn.execute(
        """SELECT t.oid, format_type(t.oid, NULL), t.typoutput::regproc::text, t.typlen,
                  t.typbyval, t.typalign, t.typtype, t.typcategory, t.typelem, t.typdelim,
                  t.typbasetype, coalesce(r.rngsubtype, 0), n.nspname, t.typrelid
           FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
           LEFT JOIN pg_range r ON r.rngtypid = t.oid""").fetchall()
    out = {}
    for (oid, name, output, typlen, byval, align, typtype, cat, elem, delim, base, sub,
         nsp, relid) in rows:
        output = output.rsplit(".", 1)[-1]
        attributes = (tuple(capture_columns(conn, str(relid)))
                      if typtype == "c" and nsp not in ("pg_catalog", "information_schema")
                      else ())
        out[oid] = TypeInfo(oid=oid, name=name, output=output, typlen=typlen, typbyval=byval,
                            typalign=align, typtype=typtype, typcategory=cat, element=elem,
                            delimiter=delim, base=base, range_subtype=sub,
                            enum_labels=labels.get(oid, {}), namespace=nsp,
                            attributes=attributes)
    return out


def capture_columns(conn: Any, table: str) -> list[Column]:
    """pg_attribute rows (attnum > 0, dropped included) of ``table``; missing values as the
    type's text output (the one element of attmissingval's array output)."""
    rows = conn.execute(
        """SELECT a.attnum, a.attname, quote_ident(a.attname), a.atttypid, a.atttypmod,
                  a.attlen, a.attalign, a.attbyval, a.attisdropped, a.attnotnull,
                  a.atthasmissing, a.attmissingval::text, t.typdelim
           FROM pg_attribute a LEFT JOIN pg_type t ON t.oid = a.atttypid
           WHERE a.attrelid = %s::regclass AND a.attnum > 0 ORDER BY a.attnum""",
        (table,)).fetchall()
    cols = []
    for (attnum, name, quoted, typid, typmod, attlen, align, byval, dropped, notnull,
         hasmissing, missing, delim) in rows:
        missing_text = None
        if hasmissing and missing is not None:
            (missing_text,) = parse_literal(missing, delim or ",")
        cols.append(Column(attnum=attnum, name=name, quoted=quoted, type_oid=typid,
                           typmod=typmod, attlen=attlen, attalign=align, attbyval=byval,
                           dropped=dropped, not_null=notnull, missing_text=missing_text,
                           has_missing=bool(hasmissing)))
    return cols


def page_tuples(page: bytes, blkno: int) -> dict[tuple[int, int], WalTuple]:
    """(block, offset) -> WalTuple for every normal line pointer of a heap page."""
    pd_lower = struct.unpack_from("<H", page, 12)[0]
    out = {}
    for i, off in enumerate(range(24, pd_lower, 4)):
        word = struct.unpack_from("<I", page, off)[0]
        lp_off, lp_flags, lp_len = word & 0x7FFF, (word >> 15) & 3, word >> 17
        if lp_flags != LP_NORMAL:
            continue
        tup = page[lp_off:lp_off + lp_len]
        infomask2, infomask, t_hoff = struct.unpack_from("<HHB", tup, 18)
        out[(blkno, i + 1)] = WalTuple(infomask2, infomask, t_hoff, bytes(tup[23:]))
    return out


def read_relation(conn: Any, relation: str) -> dict[tuple[int, int], WalTuple]:
    """All normal tuples of a heap relation, by ctid."""
    nblocks = conn.execute("SELECT pg_relation_size(%s::regclass) / %s",
                           (relation, BLCKSZ)).fetchone()[0]
    out: dict[tuple[int, int], WalTuple] = {}
    for blk in range(nblocks):
        page = conn.execute("SELECT get_raw_page(%s, 'main', %s)", (relation, blk)).fetchone()[0]
        out.update(page_tuples(bytes(page), blk))
    return out


def parse_ctid(text: str) -> tuple[int, int]:
    blk, off = text.strip("()").split(",")
    return int(blk), int(off)
