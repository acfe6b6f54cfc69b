"""The Arrow plugin never stops on a value its column's type cannot hold: it writes NULL and the
value's exact text into ``_cdc_pg_text`` (new row, old identity, DELETE), and keeps the
contract's other rules (unchanged TOAST is named, not texted; missing values too)."""

from __future__ import annotations

import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from cdclake.catalog.model import (
    IDENTITY_DEFAULT,
    IDENTITY_FULL,
    Column,
    RelationVersion,
    TypeInfo,
)
from cdclake.decoding import stream
from cdclake.decoding.changes import DELETE, INSERT, UPDATE, Change, TxnInfo
from cdclake.decoding.plugins.arrow import ArrowChanges
from cdclake.wal.record import WalTuple
from tests.unit.tuples.test_codecs import TYPES as CODEC_TYPES
from tests.unit.tuples.test_codecs import _array, numeric_disk, typmod
from tests.unit.tuples.test_heap import build, varlena
from tests.unit.tuples.test_untypeable_values import TYPES

N10_2 = typmod(10, 2)


def col(attnum: int, name: str, type_oid: int, attlen: int, align: str, *, mod: int = -1,
        **kw: Any) -> Column:
    return Column(attnum=attnum, name=name, quoted=name, type_oid=type_oid, typmod=mod,
                  attlen=attlen, attalign=align, attbyval=attlen in (1, 2, 4, 8), **kw)


COLUMNS = (
    col(1, "id", 23, 4, "i"),
    col(2, "n", 1700, -1, "i", mod=N10_2),
    col(3, "a", 1007, -1, "i"),
    col(4, "t", 1083, 8, "d"),
    col(5, "d", 1082, 4, "i"),
    col(6, "big", 1009, -1, "i"),
    # added with DEFAULT 'NaN' after the tuples below were written: PostgreSQL reads the
    # missing value (attmissingval) for them
    col(7, "late", 1700, -1, "i", mod=N10_2, has_missing=True, missing_text="NaN"),
)


def relation(oid: int, replident: str) -> RelationVersion:
    return RelationVersion(
        oid=oid, db_oid=5, tablespace=1663, relfilenode=oid, schema="public", name=f"t{oid}",
        qualified=f"public.t{oid}", relkind="r", persistence="p", replident=replident,
        columns=COLUMNS, key_attnums=(1,) if replident == IDENTITY_DEFAULT else (),
        valid_from=0x100)


NAN = varlena(struct.pack("<H", 0xC000), short=False)
TWO_D = varlena(_array(23, [2, 2], [1, 1], [struct.pack("<i", i) for i in (1, 2, 3, 4)],
                       4, 4), short=False)
LB_0 = varlena(_array(23, [1], [0], [struct.pack("<i", 7)], 4, 4), short=False)
ONE_D = varlena(_array(23, [2], [1], [struct.pack("<i", 7), None], 4, 4), short=False)
MIDNIGHT_24 = struct.pack("<q", 86_400_000_000)
NOON = struct.pack("<q", 43_200_000_000)
INFINITY = struct.pack("<i", 2**31 - 1)
#: an on-disk TOAST pointer (vartag 18) whose chunks are not in the change: unchanged
TOAST_POINTER = b"\x01\x12" + struct.pack("<iIII", 5000, 5000 - 4, 99, 12345)


def tup(*datums: bytes | None) -> WalTuple:
    return build(list(COLUMNS[:len(datums)]), list(datums))


def n(value: str) -> bytes:
    return varlena(numeric_disk(Decimal(value)), short=False)


def decode(tmp_path: Path, changes: list[tuple[RelationVersion, int, Change]],
           types: dict[int, TypeInfo] = TYPES) -> dict[str, pa.Table]:
    plugin = ArrowChanges(pafs.LocalFileSystem(), str(tmp_path / "b"), "b", types)
    txn = TxnInfo(xid=700, first_lsn=0x1000, final_lsn=0x9000, end_lsn=0x9100, commit_time=0)
    for rel, action, change in changes:
        plugin.change(txn, rel, action, change, {})
    plugin.commit(txn)
    manifest = plugin.close(0x1000, 0x9100)
    out = {}
    for table in manifest["tables"]:
        (version,) = table["versions"]
        out[table["table"]] = pa.concat_tables(
            pq.read_table(tmp_path / "b" / p) for p in version["paths"])
    return out


def change(action: int, lsn: int, old: WalTuple | None, new: WalTuple | None) -> Change:
    return Change(action, lsn, 0, None, old, new, False, 0)


def test_untypeable_values_become_null_and_exact_text(tmp_path: Path) -> None:
    keyed = relation(16500, IDENTITY_DEFAULT)
    full = relation(16501, IDENTITY_FULL)
    untypeable_row = tup(struct.pack("<i", 1), NAN, TWO_D, MIDNIGHT_24, INFINITY, None)
    typed_row = tup(struct.pack("<i", 1), n("1.50"), ONE_D, NOON, INFINITY, None,
                    n("2.00"))
    tables = decode(tmp_path, [
        (keyed, INSERT, change(INSERT, 0x1100, None, untypeable_row)),
        # the big column is TOASTed and unchanged: named in _unchanged_toast, never texted
        (keyed, UPDATE, change(UPDATE, 0x1200, None, tup(
            struct.pack("<i", 1), n("1.00"), LB_0, NOON, INFINITY, TOAST_POINTER, n("3.00")))),
        (keyed, INSERT, change(INSERT, 0x1300, None, typed_row)),
        (full, INSERT, change(INSERT, 0x1400, None, untypeable_row)),
        # FULL: the old row is the identity; its untyped values are texted inside _old_key
        (full, UPDATE, change(UPDATE, 0x1500, untypeable_row, typed_row)),
        (full, DELETE, change(DELETE, 0x1600, typed_row, None)),
        (full, DELETE, change(DELETE, 0x1700, untypeable_row, None)),
    ])
    t = tables["public.t16500"]
    assert t.schema.field(stream.PG_TEXT).type == pa.map_(pa.string(), pa.string())
    assert t.column_names[-1] == stream.PG_TEXT
    rows = t.select(["id", "n", "a", "late", "big", stream.UNCHANGED_TOAST, stream.PG_TEXT]
                    ).to_pylist()
    assert rows[0] == {"id": 1, "n": None, "a": None, "late": None, "big": None,
                       stream.UNCHANGED_TOAST: None,
                       stream.PG_TEXT: [("2", "NaN"), ("3", "{{1,2},{3,4}}"), ("4", "24:00:00"),
                                        ("7", "NaN")]}
    assert rows[1] == {"id": 1, "n": Decimal("1.00"), "a": None, "late": Decimal("3.00"),
                       "big": None, stream.UNCHANGED_TOAST: ["big"],
                       stream.PG_TEXT: [("3", "[0:0]={7}")]}
    assert rows[2][stream.PG_TEXT] is None and rows[2]["a"] == [7, None]
    assert t.column("t").cast(pa.int64()).to_pylist() == [None, 43_200_000_000, 43_200_000_000]
    assert t.column("d").cast(pa.int32()).to_pylist() == [2**31 - 1] * 3

    f = tables["public.t16501"]
    old_key_type = f.schema.field(stream.OLD_KEY).type
    assert old_key_type.field(stream.PG_TEXT).type == stream.PG_TEXT_TYPE
    old_key = f.column(stream.OLD_KEY)

    def old(field: str) -> list[Any]:
        return pc.struct_field(old_key, field).to_pylist()

    texts = f.column(stream.PG_TEXT).to_pylist()
    old_texts = [("2", "NaN"), ("3", "{{1,2},{3,4}}"), ("4", "24:00:00"), ("7", "NaN")]
    assert f.column(stream.OP).to_pylist() == ["I", "U", "D", "D"]
    assert old(stream.PG_TEXT) == [None, old_texts, None, old_texts]
    assert old("n") == [None, None, Decimal("1.50"), None]
    assert old("id") == [None, 1, 1, 1]
    assert texts[0] == old_texts and texts[1] is None and texts[2] is None
    # a DELETE's tuple is its old identity: _cdc_pg_text completes it too
    assert texts[3] == old_texts


CUBE_COLUMNS = (col(1, "id", 23, 4, "i"), col(2, "c", 90030, -1, "d"),
                col(3, "cs", 90031, -1, "d"))
#: a cube's bytes (cube_out is not a function cdclake knows: no text for them)
CUBE = varlena(struct.pack("<Idd", 1, 1.0, 2.0), short=False)
CUBE_1D = varlena(_array(90030, [1], [1], [CUBE], -1, 8), short=False)
CUBE_2D = varlena(_array(90030, [1, 1], [1, 1], [CUBE], -1, 8), short=False)


def test_values_cdclake_cannot_print_are_entries_without_text(tmp_path: Path) -> None:
    """A value of a type cdclake cannot print is NULL with an ``_cdc_pg_text`` entry that has
    no text — one that has no typed value first (a 2-D array of them) too —, in the new row
    and in a FULL identity; the row's other values and other rows stay as they are."""
    rels = [RelationVersion(
        oid=oid, db_oid=5, tablespace=1663, relfilenode=oid, schema="public", name=f"t{oid}",
        qualified=f"public.t{oid}", relkind="r", persistence="p", replident=ident,
        columns=CUBE_COLUMNS, key_attnums=key, valid_from=0x100)
        for oid, ident, key in ((16600, IDENTITY_DEFAULT, (1,)), (16601, IDENTITY_FULL, ()))]

    def row(*datums: bytes | None) -> WalTuple:
        return build(list(CUBE_COLUMNS[:len(datums)]), list(datums))

    odd, plain = row(struct.pack("<i", 1), CUBE, CUBE_1D), row(struct.pack("<i", 2), None, None)
    tables = decode(tmp_path, [
        (rels[0], INSERT, change(INSERT, 0x1100, None, odd)),
        (rels[0], INSERT, change(INSERT, 0x1200, None, row(struct.pack("<i", 3), None,
                                                           CUBE_2D))),
        (rels[0], INSERT, change(INSERT, 0x1300, None, plain)),
        (rels[1], DELETE, change(DELETE, 0x1400, odd, None)),
    ], types={**TYPES, **CODEC_TYPES})
    t = tables["public.t16600"]
    assert t.schema.field("c").type == pa.string()
    assert t.schema.field("cs").type == pa.list_(pa.string())
    assert t.select(["id", "c", "cs", stream.PG_TEXT]).to_pylist() == [
        {"id": 1, "c": None, "cs": None, stream.PG_TEXT: [("2", None), ("3", None)]},
        {"id": 3, "c": None, "cs": None, stream.PG_TEXT: [("3", None)]},
        {"id": 2, "c": None, "cs": None, stream.PG_TEXT: None}]
    f = tables["public.t16601"]
    unprinted = [("2", None), ("3", None)]
    assert f.column(stream.PG_TEXT).to_pylist() == [unprinted]
    assert pc.struct_field(f.column(stream.OLD_KEY), stream.PG_TEXT).to_pylist() == [unprinted]
