"""Following pg_class rows in the WAL (decoding/walclass.py) on the committed fixture: VACUUM
FULL and CLUSTER give a table new relfilenodes that no event trigger reports; the tracker
reads them from the pg_class rows (also from full-page images) and a database-wide VACUUM FULL
moves pg_class itself (a relmap update)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.walclass import PgClassRow, PgClassTracker
from cdclake.errors import UnknownRelationError
from cdclake.wal.reader import XLogReader
from cdclake.wal.record import RM_HEAP_ID
from cdclake.wal.rmgr import heap
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
    before, after = at_install.pg_class_locator(), d.pg_class_locator()
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
            if loc.db == decfix.db_oid and tracker.is_pg_class(loc.spc, loc.rel):
                row = tracker.pg_class_insert(rec, heap.parse(rec))
                if row is not None and row.relname == f"pg_temp_{vf[0].oid}":
                    rows.append(row)
    # VACUUM FULL, CLUSTER and the database-wide VACUUM FULL of vf, each a new relfilenode
    assert [r.relfilenode for r in rows] == [v.relfilenode for v in vf][1:]
    assert len(rows) == 3 and all(r.relkind == "r" for r in rows)
