"""Routing records to reorder-buffer partitions: owners, broadcasts, subtransactions."""

from __future__ import annotations

from cdclake.spark.routing import (
    RouteMap,
    SegmentFacts,
    classify,
    owner,
    partition_of,
    route,
    shuffle_key,
)
from cdclake.spark.segments import (
    BROADCAST_KIND,
    CATALOG_KIND,
    ROUTED_KIND,
    ParsedSegment,
    freeze,
)
from cdclake.wal.record import (
    RM_BTREE_ID,
    RM_HEAP_ID,
    RM_STANDBY_ID,
    RM_XACT_ID,
    BlockRef,
    RelFileLocator,
    XLogRecord,
)
from cdclake.wal.rmgr import heap, standby

DB = 5


def _heap(lsn: int, xid: int, rel: int, *, db: int = DB, toplevel: int = 0,
          image: bytes | None = None, data: bytes | None = b"t") -> XLogRecord:
    rec = XLogRecord(lsn, lsn + 8, 0, xid, RM_HEAP_ID, heap.XLOG_HEAP_INSERT, 64,
                     [BlockRef(0, RelFileLocator(1663, db, rel), 0, 0, 0, data=data,
                               image=image)])
    rec.toplevel_xid = toplevel
    return rec


def test_classify_follows_what_the_decoder_reads() -> None:
    assert classify(XLogRecord(1, 2, 0, 7, RM_XACT_ID, 0, 30), DB) == BROADCAST_KIND
    running = XLogRecord(1, 2, 0, 0, RM_STANDBY_ID, standby.XLOG_RUNNING_XACTS, 30)
    assert classify(running, DB) == BROADCAST_KIND
    assert classify(XLogRecord(1, 2, 0, 0, RM_STANDBY_ID, 0, 30), DB) is None  # lock record
    assert classify(_heap(1, 7, 20000), DB) == ROUTED_KIND
    assert classify(_heap(1, 7, 20000, db=6), DB) is None  # gate 1
    assert classify(_heap(1, 7, 1259), DB) == CATALOG_KIND  # pg_class and other catalogs
    assert classify(_heap(1, 0, 20000), DB) == BROADCAST_KIND  # no xid: no owner
    assert classify(XLogRecord(1, 2, 0, 7, RM_BTREE_ID, 0, 30), DB) is None
    assert classify(XLogRecord(1, 2, 0, 7, RM_BTREE_ID, 0, 30), DB, keep=True) == BROADCAST_KIND


def test_subtransaction_records_follow_their_top_level_transaction() -> None:
    n = 3
    top, sub = 100, 101
    assert owner(top, n) != owner(sub, n)
    first = _heap(10, sub, 20000, toplevel=top)  # names its top-level xid
    later = _heap(20, sub, 20000)  # does not
    commit = XLogRecord(30, 38, 0, top, RM_XACT_ID, 0, 30)
    seg = ParsedSegment(0, 15, records=[(ROUTED_KIND, first), (ROUTED_KIND, later),
                                        (BROADCAST_KIND, commit)])
    rmap = RouteMap.merge(n, [SegmentFacts({sub: top}, frozenset())], {}, None)
    out = [(partition_of(key), rec.lsn) for key, rec in route(seg, rmap)]
    assert out[:2] == [(owner(top, n), 10), (owner(top, n), 20)]
    assert sorted(out[2:]) == [(p, 30) for p in range(n)]
    assert shuffle_key(0, 2**63) < shuffle_key(1, 5)  # partition first, then LSN


def test_carried_assignments_and_moved_pg_class() -> None:
    rec = _heap(10, 101, 30000)
    seg = ParsedSegment(0, 15, records=[(ROUTED_KIND, rec)])
    rmap = RouteMap.merge(2, [], {101: 200}, 30000)  # pg_class moved to 30000
    assert len(list(route(seg, rmap))) == 2  # broadcast: it may be a pg_class row
    rmap = RouteMap.merge(2, [], {101: 200}, None)
    assert [k for k, _ in route(seg, rmap)] == [shuffle_key(owner(200, 2), 10)]


def test_freeze_keeps_images_only_where_they_are_the_only_data() -> None:
    routed = freeze(_heap(1, 7, 20000, image=memoryview(b"page")), drop_images=True)
    assert routed.blocks[0].image is None and routed.blocks[0].data == b"t"
    image_only = freeze(_heap(1, 7, 20000, image=memoryview(b"page"), data=None),
                        drop_images=True)
    assert image_only.blocks[0].image == b"page"
