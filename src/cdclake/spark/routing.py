"""The shuffle: which reorder-buffer partition a WAL record goes to.

Transactions are independent, so a change can be buffered wherever its top-level transaction
is, as long as every partition sees the records that decide a transaction's fate or shape the
dictionary: commits, aborts, prepares, assignments, running-xacts, logical messages (the
``cdclake.ddl`` ones carry schema changes), relmap updates and heap records of catalogs (the
pg_class tracker). Those are broadcast; each partition emits only the transactions it owns
(:class:`cdclake.spark.partition.OwnedReplay`). Broadcasting more than needed is always safe —
a partition that does not own a transaction never emits it — so every doubtful case
broadcasts.

Subtransaction records name their top-level xid only on their first record (wal_level
logical); the driver collects those assignments from all segments first (and from the open
transactions of the previous batch) so every later record of the subtransaction is routed to
its top-level transaction's partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cdclake.catalog.model import FIRST_NORMAL_OBJECT_ID
from cdclake.catalog.walclass import PG_CLASS_OID
from cdclake.spark.segments import BROADCAST_KIND, CATALOG_KIND, ROUTED_KIND, ParsedSegment
from cdclake.wal.record import (
    RM_HEAP2_ID,
    RM_HEAP_ID,
    RM_LOGICALMSG_ID,
    RM_RELMAP_ID,
    RM_STANDBY_ID,
    RM_XACT_ID,
    XLogRecord,
)
from cdclake.wal.rmgr import heap, heap2, relmap, standby, xact

_HEAP_KEPT = frozenset({heap.XLOG_HEAP_INSERT, heap.XLOG_HEAP_UPDATE, heap.XLOG_HEAP_HOT_UPDATE,
                        heap.XLOG_HEAP_DELETE, heap.XLOG_HEAP_CONFIRM, heap.XLOG_HEAP_TRUNCATE})


def owner(xid: int, partitions: int) -> int:
    """The partition that buffers and emits top-level transaction ``xid``."""
    return xid % partitions


def classify(rec: XLogRecord, db_oid: int, *, keep: bool = False) -> int | None:
    """BROADCAST/CATALOG/ROUTED kind of a record, or None when decoding ignores it.

    Mirrors what :class:`cdclake.decoding.decode.Decoder` looks at; anything it would ignore
    (index, FSM, other databases' heap records, ...) is dropped before the shuffle.
    """
    rmid = rec.rmid
    if keep:
        return BROADCAST_KIND
    if rmid in (RM_XACT_ID, RM_LOGICALMSG_ID, RM_RELMAP_ID):
        return BROADCAST_KIND
    if rmid == RM_STANDBY_ID:
        return BROADCAST_KIND if rec.info & 0xF0 == standby.XLOG_RUNNING_XACTS else None
    if rmid == RM_HEAP_ID:
        op = rec.info & heap.XLOG_HEAP_OPMASK
        if op not in _HEAP_KEPT:
            return None
        if op == heap.XLOG_HEAP_TRUNCATE:  # no block: the database is in the main data
            return ROUTED_KIND if rec.xid else BROADCAST_KIND
    elif rmid == RM_HEAP2_ID:
        if rec.info & heap2.XLOG_HEAP2_OPMASK != heap2.XLOG_HEAP2_MULTI_INSERT:
            return None
    else:
        return None
    if not rec.blocks or rec.blocks[0].rlocator.db != db_oid:
        return None  # gate 1, as the decoder does it
    if rec.xid == 0:
        return BROADCAST_KIND
    if rec.blocks[0].rlocator.rel < FIRST_NORMAL_OBJECT_ID:
        return CATALOG_KIND
    return ROUTED_KIND


@dataclass(frozen=True)
class SegmentFacts:
    """What routing needs to know from one segment, collected before the shuffle."""

    top_of: dict[int, int]  #: subtransaction xid -> top-level xid
    pg_class_filenodes: frozenset[int]  #: relfilenodes pg_class moved to (VACUUM FULL)


def segment_facts(parsed: ParsedSegment, db_oid: int) -> SegmentFacts:
    top_of: dict[int, int] = {}
    filenodes: set[int] = set()
    for _kind, rec in parsed.records:
        if rec.toplevel_xid and rec.toplevel_xid != rec.xid:
            top_of[rec.xid] = rec.toplevel_xid
        if rec.rmid == RM_XACT_ID and rec.info & xact.XLOG_XACT_OPMASK == \
                xact.XLOG_XACT_ASSIGNMENT:
            a = xact.parse(rec, parsed.version)
            assert isinstance(a, xact.XactAssignment)
            for sub in a.subxacts:
                top_of[sub] = a.xtop
        elif rec.rmid == RM_RELMAP_ID:
            upd = relmap.parse(rec)
            if upd is not None and upd.db_id in (0, db_oid) and PG_CLASS_OID in upd.mappings:
                filenodes.add(upd.mappings[PG_CLASS_OID])
    return SegmentFacts(top_of, frozenset(filenodes))


@dataclass(frozen=True)
class RouteMap:
    """Everything the shuffle's key function needs; broadcast to the tasks."""

    partitions: int
    top_of: dict[int, int]
    pg_class_filenodes: frozenset[int]

    @classmethod
    def merge(cls, partitions: int, facts: Iterable[SegmentFacts], carried: dict[int, int],
              pg_class_filenode: int | None) -> RouteMap:
        top_of = dict(carried)
        filenodes = {pg_class_filenode} if pg_class_filenode else set()
        for f in facts:
            top_of.update(f.top_of)
            filenodes |= f.pg_class_filenodes
        return cls(partitions, top_of, frozenset(filenodes))

    def top(self, rec: XLogRecord) -> int:
        return rec.toplevel_xid or self.top_of.get(rec.xid, rec.xid)


def shuffle_key(partition: int, lsn: int) -> int:
    """One int that partitions by its high bits and sorts by LSN inside a partition."""
    return (partition << 64) | lsn


def partition_of(key: int) -> int:
    return key >> 64


def route(parsed: ParsedSegment, rmap: RouteMap) -> Iterator[tuple[int, XLogRecord]]:
    """``(shuffle_key(partition, lsn), record)``: one for the owner, or one per partition."""
    n = rmap.partitions
    for kind, rec in parsed.records:
        if kind == ROUTED_KIND and rec.blocks and \
                rec.blocks[0].rlocator.rel in rmap.pg_class_filenodes:
            kind = CATALOG_KIND
        if kind == ROUTED_KIND:
            yield shuffle_key(owner(rmap.top(rec), n), rec.lsn), rec
        else:
            for p in range(n):
                yield shuffle_key(p, rec.lsn), rec
