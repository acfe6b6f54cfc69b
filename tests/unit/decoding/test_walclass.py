"""Following pg_class rows in the WAL (decoding/walclass.py) on the committed fixture: VACUUM
FULL and CLUSTER give a table new relfilenodes that no event trigger reports; the tracker
reads them from the pg_class rows (also from full-page images) and a database-wide VACUUM FULL
moves pg_class itself (a relmap update)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from cdclake.catalog.dictionary import ClassRow, Dictionary
from cdclake.catalog.model import Column, RelationVersion
from cdclake.catalog.signing import new_key, sign
from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.reassembly import Replayer
from cdclake.decoding.walclass import PG_CLASS_OID, PgClassRow, PgClassTracker, PgClassUpdate
from cdclake.errors import UnknownRelationError
from cdclake.wal.reader import XLogReader
from cdclake.wal.record import RM_HEAP_ID, BlockRef, RelFileLocator, XLogRecord
from cdclake.wal.rmgr import heap
from cdclake.wal.rmgr.relmap import RelmapUpdate
from cdclake.wal.source import DirectorySource
from tests.unit.decoding.fixture import DecodingFixture, relation_named


def test_rewrites_move_the_table_to_its_new_relfilenodes(decfix: DecodingFixture,
                                                         tmp_path: Path) -> None:
    _lines, _result, d = decfix.decode(tmp_path / "spill")
    nodes = [v.relfilenode for v in relation_named(d, "public.vf")]
    # created, VACUUM FULL, CLUSTER, database-wide VACUUM FULL: four files, in that order
    assert len(set(nodes)) == 4 and nodes == sorted(nodes)


def test_the_database_wide_vacuum_full_moves_pg_class(decfix: DecodingFixture,
                                                      tmp_path: Path) -> None:
    at_install = Dictionary()
    decfix.decode(tmp_path / "a", dictionary=at_install, end_lsn=decfix.start_lsn)
    _lines, _result, d = decfix.decode(tmp_path / "b")
    before, after = at_install.pg_class_loc, d.pg_class_loc
    assert before is not None and after is not None and before != after


def test_without_the_tracker_the_rewritten_table_is_unknown(decfix: DecodingFixture,
                                                            tmp_path: Path) -> None:
    with pytest.raises(UnknownRelationError, match="relfilenode"):
        decfix.decode(tmp_path / "spill", tracker=None)


def test_pg_class_rows_read_from_the_records(decfix: DecodingFixture, tmp_path: Path) -> None:
    """The tracker's row for each pg_class insert of a transient heap ``pg_temp_<oid>`` names
    the relfilenode the table moves to when the rewrite commits."""
    _lines, _result, full = decfix.decode(tmp_path / "a")
    vf = relation_named(full, "public.vf")
    d = Dictionary()
    decfix.decode(tmp_path / "b", dictionary=d, end_lsn=decfix.start_lsn)  # as at the install
    tracker = PgClassTracker(d)
    rows: list[PgClassRow] = []
    for rec in XLogReader(DirectorySource([decfix.dir]), start_lsn=decfix.start_lsn):
        if rec.rmid == RM_HEAP_ID and rec.info & heap.XLOG_HEAP_OPMASK == heap.XLOG_HEAP_INSERT:
            loc = rec.blocks[0].rlocator
            if loc.db == decfix.db_oid and tracker.is_pg_class(loc):
                row = tracker.pg_class_insert(rec, heap.parse(rec))
                if row is not None and row.relname == f"pg_temp_{vf[0].oid}":
                    rows.append(row)
    # VACUUM FULL, CLUSTER and the database-wide VACUUM FULL of vf, each a new relfilenode
    assert [r.relfilenode for r in rows] == [v.relfilenode for v in vf][1:]
    assert len(rows) == 3 and all(r.relkind == "r" for r in rows)


# -- pg_class UPDATEs and DELETEs: TRUNCATE without its trigger --------------------------------

SPC, DB, TABLE, TOAST, OLD, OLD_TOAST = 1663, 5, 16400, 16403, 0x00112233, 16403
#: the table's and its TOAST table's pg_class rows, as the install's message says
ROW, TOAST_ROW = (0, 7), (0, 3)
TXN = TxnInfo(xid=900, first_lsn=0x200, final_lsn=0xA00, end_lsn=0xA40, commit_time=0)
KEY = new_key()


def _int4(attnum: int, name: str) -> Column:
    return Column(attnum=attnum, name=name, quoted=name, type_oid=23, typmod=-1, attlen=4,
                  attalign="i", attbyval=True)


def _table(*columns: str) -> dict[str, Any]:
    """The table as a message describes it, with where its pg_class rows are."""
    v = RelationVersion(oid=TABLE, db_oid=DB, tablespace=SPC, relfilenode=OLD, schema="public",
                        name="t", qualified="public.t", relkind="r", persistence="p",
                        replident="d", columns=tuple(_int4(i + 1, c) for i, c in
                                                     enumerate(columns)),
                        key_attnums=(1,), toast_oid=TOAST, toast_relfilenode=OLD_TOAST)
    return {**v.to_json(), "ctid": f"({ROW[0]},{ROW[1]})",
            "toast_ctid": f"({TOAST_ROW[0]},{TOAST_ROW[1]})"}


def _installed() -> Dictionary:
    d = Dictionary()
    d.apply_message(0x100, json.dumps({"kind": "relations", "relations": [_table("id")]}))
    return d


def _bytes(value: int, *logged: int) -> tuple[int | None, ...]:
    """relfilenode ``value``'s bytes at the positions ``logged``, None at the others."""
    b = value.to_bytes(4, "little")
    return tuple(b[i] if i in logged else None for i in range(4))


def test_an_update_logging_the_changed_bytes_gives_the_table_its_new_relfilenode() -> None:
    """TRUNCATE's UPDATE of the table's row, compressed: the row is known by its place, the
    relfilenode's unlogged bytes are the old one's."""
    d = _installed()
    new = 0x00115533  # first and last byte equal to the old one's: not logged
    PgClassUpdate(ROW, (0, 8), filenode=_bytes(new, 1, 2)).apply(d, 0x300, TXN)
    v = d.relation_for_locator(SPC, new, 0x300)
    assert v is not None and v.oid == TABLE and v.valid_from == 0x300
    assert d.relation_for_oid(TABLE, 0x2FF).relfilenode == OLD  # type: ignore[union-attr]
    assert d.class_row((0, 8)) == ClassRow(TABLE, False, SPC, new) and d.class_row(ROW) is None


def test_the_toast_tables_new_relfilenode_is_toast_from_then_on() -> None:
    d = _installed()
    PgClassUpdate(TOAST_ROW, (0, 9), filenode=_bytes(16500, 0, 1)).apply(d, 0x300, TXN)
    assert d.is_catalog(SPC, 16500, 0x300) and not d.is_catalog(SPC, 16500, 0x2FF)
    assert d.relation_for_oid(TABLE, 0x300).relfilenode == OLD  # type: ignore[union-attr]


def test_rows_of_relations_not_followed_change_nothing() -> None:
    d = _installed()
    before = d.to_json()
    PgClassUpdate((0, 1), (0, 2), filenode=_bytes(16600, 0, 1)).apply(d, 0x300, TXN)  # an index
    PgClassUpdate((0, 4), (0, 5), row=PgClassRow(16700, "other", 16701, SPC, "r", "p")).apply(
        d, 0x300, TXN)  # a table no message described
    assert d.to_json() == before


def test_a_whole_row_says_whose_it_is_and_a_delete_forgets_it() -> None:
    d = _installed()
    row = PgClassRow(TABLE, "t", 16800, SPC, "r", "p")  # on another page: logged whole
    PgClassUpdate(ROW, (4, 1), row=row).apply(d, 0x300, TXN)
    assert d.relation_for_locator(SPC, 16800, 0x300).oid == TABLE  # type: ignore[union-attr]
    after = Dictionary.from_json(json.loads(json.dumps(d.to_json())))  # the next batch's
    assert after.class_row((4, 1)) == ClassRow(TABLE, False, SPC, 16800)
    PgClassUpdate((4, 1), None).apply(after, 0x400, TXN)  # DROP TABLE
    assert after.class_row((4, 1)) is None


def test_pg_class_moved_forgets_where_its_rows_were() -> None:
    d = _installed()
    PgClassTracker(d).relmap_update(RelmapUpdate(DB, SPC, {PG_CLASS_OID: 17000}), 0x300)
    assert d.class_row(ROW) is None and d.class_row(TOAST_ROW) is None


def test_an_update_applies_where_it_is_among_the_transactions_messages() -> None:
    """TRUNCATE t; INSERT; ALTER TABLE t ADD COLUMN in one transaction, the trigger dropped:
    the insert between them has the table's columns of before the ALTER (a slot decodes it
    so), the new storage the ALTER's message gives only from the message on."""
    d = _installed()
    new = 0x00115533
    altered = {**_table("id", "n"), "relfilenode": new, "ctid": "(0,9)"}
    message = sign(KEY, TXN.xid,
                   json.dumps({"kind": "relations", "relations": [altered]}).encode())
    Replayer(d, None, ddl_key=KEY).apply_catalog(  # type: ignore[arg-type]
        [(0x300, PgClassUpdate(ROW, (0, 8), filenode=_bytes(new, 1, 2))), (0x500, message)],
        TXN)
    between, after = (d.relation_for_locator(SPC, new, lsn) for lsn in (0x400, 0x500))
    assert between is not None and [c.name for c in between.columns] == ["id"]
    assert after is not None and [c.name for c in after.columns] == ["id", "n"]
    assert d.class_row((0, 9)) == ClassRow(TABLE, False, SPC, new)


def _pg_class() -> RelationVersion:
    """pg_class's columns up to those the tracker reads, as PostgreSQL lays them out."""
    name = Column(attnum=2, name="relname", quoted="relname", type_oid=19, typmod=-1, attlen=64,
                  attalign="c", attbyval=False)
    char = [Column(attnum=i, name=n, quoted=n, type_oid=18, typmod=-1, attlen=1, attalign="c",
                   attbyval=True) for i, n in ((10, "relkind"), (11, "relpersistence"))]
    cols = (_int4(1, "oid"), name, *(_int4(i, n) for i, n in enumerate(
        ("relnamespace", "reltype", "reloftype", "relowner", "relam", "relfilenode",
         "reltablespace"), start=3)), *char)
    return RelationVersion(oid=PG_CLASS_OID, db_oid=DB, tablespace=SPC, relfilenode=1259,
                           schema="pg_catalog", name="pg_class",
                           qualified="pg_catalog.pg_class", relkind="r", persistence="p",
                           replident="n", columns=cols)


def test_the_tracker_reads_the_logged_bytes_of_relfilenode() -> None:
    """heap_update's prefix/suffix compression: the 89 bytes before, and the bytes after the
    last that changed, are the old row's; relfilenode starts at byte 88."""
    d = _installed()
    d.apply_message(0x100, json.dumps({"kind": "dictionary", "db_oid": DB,
                                       "default_tablespace": SPC, "relations": [_table("id")],
                                       "pg_class": _pg_class().to_json()}))
    new = 0x00115533
    logged = new.to_bytes(4, "little")[1:3]  # after an 89-byte prefix, up to a 1-byte suffix
    main = struct.pack("<IHBBIH", 900, ROW[1], 0,
                       heap.XLH_UPDATE_PREFIX_FROM_OLD | heap.XLH_UPDATE_SUFFIX_FROM_OLD, 0, 8)
    data = struct.pack("<HH", 89, 10) + struct.pack("<HHB", 11, 0x0802, 24) + b"\0" + logged
    rec = XLogRecord(0x300, 0x340, 0, 900, RM_HEAP_ID, heap.XLOG_HEAP_UPDATE, 64,
                     [BlockRef(0, RelFileLocator(SPC, DB, 1259), 0, ROW[0], 0, data=data)],
                     main)
    event = PgClassTracker(d).pg_class_change(rec, heap.parse(rec))  # type: ignore[arg-type]
    assert event == PgClassUpdate(ROW, (0, 8), filenode=_bytes(new, 1, 2))
    event.apply(d, 0x300, TXN)
    assert d.relation_for_locator(SPC, new, 0x300) is not None
