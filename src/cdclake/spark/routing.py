"""Which reorder-buffer partitions need a WAL record; each reads the batch and keeps those.

Transactions are independent, so a change can be buffered wherever its top-level transaction
is, as long as every partition sees the records that decide a transaction's fate or shape the
dictionary. Which records those are is not decided here: the tasks classify every record with
the rmgr table of :mod:`cdclake.decoding.rmgrs` (the decoder dispatches through the same
table), which also turns each subtransaction assignment into a record every partition gets.
Each partition emits only the transactions it owns
(:class:`cdclake.decoding.context.OwnedReplay`); broadcasting more than needed is always safe.

A change of a subtransaction is routed by its top-level transaction. Only the
subtransaction's first record names it, so the driver collects every membership fact of the
batch before the partitions read it — first-record top-level xids, XLOG_XACT_ASSIGNMENT records, the
subtransaction lists of commit, abort and prepare records — plus the memberships of the
transactions the previous batch left open, and routes every later record of a subtransaction
to the partition of its top-level transaction.

A large transaction is split: the changes of one that has at least
:data:`~cdclake.spark.segments.LARGE_BYTES` of them in a segment go by stripes of WAL, as in
``cdclake decode --jobs`` (:mod:`cdclake.decoding.stripes`): a change at LSN ``l`` of top-level
transaction ``x`` to partition ``(x + (l >> STRIPE_BITS)) % partitions`` (``stripe_owner``), so
a bulk load is decoded on every core. Each partition owns the split transaction and emits its
part at the commit; the writer merges the parts by the full stream key. A part needs nothing
from the others when the transaction's changes are INSERT, UPDATE, DELETE and COPY rows
(:func:`~cdclake.decoding.rmgrs.plain_change`) or TRUNCATEs, which every partition gets and one
emits (``Decoder.share``, as the workers of ``cdclake decode --jobs``); its catalog rows and
messages reach every partition anyway. A transaction with TOAST chunks, speculative inserts or
new catalog rows (a new relation or column; a table's rewrite, whose rows one decoder must
emit) is not split, nor one that does not end in the batch or began in an earlier one: a part
is never left open. The others go whole to their owner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from cdclake.archive.layout import Layout
from cdclake.archive.store import ObjectStore
from cdclake.decoding.rmgrs import TXN, plain_change
from cdclake.decoding.stripes import stripe_owner
from cdclake.spark.segments import SegmentFacts, SegmentTask, freeze, segment_records
from cdclake.wal.record import XLogRecord


def owner(xid: int, partitions: int) -> int:
    """The partition that buffers and emits top-level transaction ``xid``."""
    return xid % partitions


def owns(index: int, partitions: int, split: frozenset[int]) -> Callable[[int], bool]:
    """Which top-level transactions partition ``index`` emits: its own, and a part of every
    split one."""
    return lambda xid: owner(xid, partitions) == index or xid in split


def share(index: int, partitions: int,
          split: frozenset[int]) -> Callable[[int, int], bool] | None:
    """Which changes partition ``index`` emits, by top-level xid and LSN
    (``Decoder.share``): of a split transaction, those of its stripes; all of the others'.
    None when no transaction is split."""
    if not split:
        return None
    return lambda top, lsn: top not in split or stripe_owner(top, lsn, partitions) == index


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
    """Everything :func:`destination` needs; broadcast to the partitions."""

    partitions: int
    top_of: dict[int, int]  #: subtransaction xid -> its top-level xid
    pg_class_filenodes: frozenset[int]
    split: frozenset[int] = frozenset()  #: top-level xids whose changes go by stripes

    @classmethod
    def merge(cls, partitions: int, facts: Iterable[SegmentFacts], carried: Mapping[int, int],
              pg_class_filenode: int | None, open_xids: Iterable[int] = ()) -> RouteMap:
        """The batch's facts plus ``carried``: memberships of the transactions left open,
        whose top-level xids are ``open_xids``."""
        facts = list(facts)
        parent_of = dict(carried)
        filenodes = {pg_class_filenode} if pg_class_filenode else set()
        for f in facts:
            parent_of.update(f.parent_of)
            filenodes |= f.pg_class_filenodes
        top_of = resolve(parent_of)
        large = {top_of.get(x, x) for f in facts for x in f.large} - set(open_xids)
        if partitions > 1 and large:
            ended = {x for f in facts for x in f.ended if x in large}
            unsplit = {t for f in facts for t in (top_of.get(x, x) for x in f.unsplit)
                       if t in large}
            large = ended - unsplit
        else:
            large = set()
        return cls(partitions, top_of, frozenset(filenodes), frozenset(large))

    def top(self, rec: XLogRecord) -> int:
        xid = rec.toplevel_xid or rec.xid
        return self.top_of.get(xid, xid)


#: :func:`destination` of a record every partition reads
EVERY = -1


def destination(kind: int, rec: XLogRecord, rmap: RouteMap) -> int:
    """The partition that needs ``rec`` (of routing class ``kind``): its transaction's
    owner, its stripe's for a split transaction, or :data:`EVERY`."""
    if kind == TXN and not (rec.blocks and
                            rec.blocks[0].rlocator.rel in rmap.pg_class_filenodes):
        top = rmap.top(rec)
        if top not in rmap.split:
            return owner(top, rmap.partitions)
        if plain_change(rec):
            return stripe_owner(top, rec.lsn, rmap.partitions)
        # a TRUNCATE of a split transaction: every part's decoder queues it, one emits
    return EVERY  # a TXN record on pg_class's new relfilenode among them


def partition_records(index: int, tasks: Iterable[SegmentTask], store: ObjectStore,
                      layout: Layout, segment_size: int, db_oid: int,
                      rmap: RouteMap) -> Iterator[XLogRecord]:
    """The records partition ``index`` decodes, in LSN order: it reads the batch's segments
    (``tasks``, in order) itself and keeps what :func:`destination` gives it. Every partition
    reads all of the WAL; no record crosses a process (a shuffle would pickle every record,
    and unpickling cost more than parsing the WAL again)."""
    for t in tasks:
        for kind, rec in segment_records(t, store, layout, segment_size, db_oid):
            d = destination(kind, rec, rmap)
            if d in (index, EVERY):
                yield freeze(rec, drop_images=kind == TXN)
