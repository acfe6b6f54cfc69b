"""The shuffle: which reorder-buffer partition a WAL record goes to.

Transactions are independent, so a change can be buffered wherever its top-level transaction
is, as long as every partition sees the records that decide a transaction's fate or shape the
dictionary. Which records those are is not decided here: the tasks classify every record with
the rmgr table of :mod:`cdclake.decoding.rmgrs` (the decoder dispatches through the same
table), which also turns each subtransaction assignment into a record every partition gets.
Each partition emits only the transactions it owns
(:class:`cdclake.decoding.context.OwnedReplay`); broadcasting more than needed is always safe.

A change of a subtransaction is routed by its top-level transaction. Only the
subtransaction's first record names it, so the driver collects every membership fact of the
batch before the shuffle — first-record top-level xids, XLOG_XACT_ASSIGNMENT records, the
subtransaction lists of commit, abort and prepare records — plus the memberships of the
transactions the previous batch left open, and routes every later record of a subtransaction
to the partition of its top-level transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from cdclake.decoding.rmgrs import TXN
from cdclake.spark.segments import SegmentFacts
from cdclake.wal.record import XLogRecord


def owner(xid: int, partitions: int) -> int:
    """The partition that buffers and emits top-level transaction ``xid``."""
    return xid % partitions


def resolve(parent_of: Mapping[int, int]) -> dict[int, int]:
    """subxid -> top-level xid, following parents that are subtransactions themselves."""
    top_of: dict[int, int] = {}
    for sub in parent_of:
        chain = [sub]
        top = parent_of[sub]
        while top in parent_of and top not in chain:  # `not in chain`: never loop on bad input
            if top in top_of:
                top = top_of[top]
                break
            chain.append(top)
            top = parent_of[top]
        for x in chain:
            top_of[x] = top
    return top_of


@dataclass(frozen=True)
class RouteMap:
    """Everything the shuffle's key function needs; broadcast to the tasks."""

    partitions: int
    top_of: dict[int, int]  #: subtransaction xid -> its top-level xid
    pg_class_filenodes: frozenset[int]

    @classmethod
    def merge(cls, partitions: int, facts: Iterable[SegmentFacts], carried: Mapping[int, int],
              pg_class_filenode: int | None) -> RouteMap:
        """The batch's facts plus ``carried``: memberships of the transactions left open."""
        parent_of = dict(carried)
        filenodes = {pg_class_filenode} if pg_class_filenode else set()
        for f in facts:
            parent_of.update(f.parent_of)
            filenodes |= f.pg_class_filenodes
        return cls(partitions, resolve(parent_of), frozenset(filenodes))

    def top(self, rec: XLogRecord) -> int:
        xid = rec.toplevel_xid or rec.xid
        return self.top_of.get(xid, xid)


def shuffle_key(partition: int, lsn: int) -> int:
    """One int that partitions by its high bits and sorts by LSN inside a partition."""
    return (partition << 64) | lsn


def partition_of(key: int) -> int:
    return key >> 64


def route(kind: int, rec: XLogRecord, rmap: RouteMap) -> Iterator[tuple[int, XLogRecord]]:
    """``(shuffle_key(partition, lsn), record)``: one for the owner, or one per partition."""
    n = rmap.partitions
    if kind == TXN and not (rec.blocks and
                            rec.blocks[0].rlocator.rel in rmap.pg_class_filenodes):
        yield shuffle_key(owner(rmap.top(rec), n), rec.lsn), rec
    else:  # every partition (a TXN record on pg_class's new relfilenode among them)
        for p in range(n):
            yield shuffle_key(p, rec.lsn), rec
