"""Which transactions each reorder-buffer partition decodes; every partition reads the batch.

Transactions are independent, so a change can be buffered wherever its top-level transaction
is, as long as every partition sees the records that decide a transaction's fate or shape the
dictionary. Every partition reads all of the batch's WAL and feeds every record to its
decoder, as the workers of ``cdclake decode --jobs`` do: the decoder dispatches through the
rmgr table of :mod:`cdclake.decoding.rmgrs`, follows every catalog event, commit and abort,
and leaves the changes of the transactions it does not own unparsed (``Decoder.owns``, asked
in the compiled decoder before a tuple is read). No record crosses a process: a shuffle
would pickle every record, and routing them in Python cost more than the decoder's own test.
Each partition emits only the transactions it owns
(:class:`cdclake.decoding.context.OwnedReplay`).

A change of a subtransaction belongs to its top-level transaction. The decoder learns that
from the subtransaction's first record (it names its top-level xid), or from the open
transactions the previous batch carried; the driver also collects every membership fact of
the batch before the partitions read it — first-record top-level xids, XLOG_XACT_ASSIGNMENT
records, the subtransaction lists of commit, abort and prepare records — and :func:`owns`
and :func:`share` look a transaction up there first, so a subtransaction whose first record
the stream never read is still its top-level transaction's.

A large transaction is split: the changes of one that has at least
:data:`~cdclake.spark.segments.LARGE_BYTES` of them in a segment go by stripes of WAL, as in
``cdclake decode --jobs`` (:mod:`cdclake.decoding.stripes`): a change at LSN ``l`` of top-level
transaction ``x`` to partition ``(x + (l >> STRIPE_BITS)) % partitions`` (``stripe_owner``), so
a bulk load is decoded on every core. Each partition owns the split transaction and emits its
part at the commit; the writer merges the parts by the full stream key. A part needs nothing
from the others when the transaction's changes are INSERT, UPDATE, DELETE and COPY rows
(:func:`~cdclake.decoding.rmgrs.plain_change`) or TRUNCATEs, which every partition queues and
one emits (``Decoder.share``, as the workers of ``cdclake decode --jobs``); its catalog rows
and messages reach every partition anyway. A transaction with TOAST chunks, speculative
inserts or new catalog rows (a new relation or column; a table's rewrite, whose rows one
decoder must emit) is not split. The others go whole to their owner.

A split transaction still open at the batch's end is carried in parts
(:mod:`cdclake.decoding.carry`): each partition saves what it holds, and in the next batch the
transaction stays split and each partition takes its part back (:func:`keeps`) — a bulk load
longer than a batch is decoded on every core in every batch. If the next batch finds TOAST
chunks or new catalog rows in it, or the job has another number of partitions, it goes whole
to its owner, which reunites the parts. A transaction carried whole (too small to split where
it began) is split from the batch where it is large: its changes before that batch are its
owner's part, which alone holds the records every part holds after (``RouteMap.split``
says from which LSN the stripes deal out its changes) — unless a batch found TOAST chunks or
new catalog rows in it: such a transaction is never split (``OpenTxn.unsplit``; a row's TOAST
chunks may lie in the batch before the row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from cdclake.decoding.carry import OpenTxn
from cdclake.decoding.stripes import stripe_owner
from cdclake.spark.segments import SegmentFacts


def owner(xid: int, partitions: int) -> int:
    """The partition that buffers and emits top-level transaction ``xid``."""
    return xid % partitions


#: the split transactions: top-level xid -> the LSN from which its changes go by stripes
#: (before it, its owner holds them: carried whole from earlier batches)
Split = Mapping[int, int]


def owns(index: int, partitions: int, split: Split,
         top_of: Mapping[int, int] | None = None) -> Callable[[int], bool]:
    """Which top-level transactions partition ``index`` emits: its own, and a part of every
    split one. ``top_of`` (subxid -> top-level xid, the batch's membership facts) names the
    transaction of a subtransaction the decoder does not know as one."""
    top_of = top_of or {}

    def f(xid: int) -> bool:
        top = top_of.get(xid, xid)
        return owner(top, partitions) == index or top in split
    return f


def keeps(index: int, partitions: int, split: Split) -> Callable[[OpenTxn], bool]:
    """Whose carried changes partition ``index`` restores: its part of a transaction that
    stays split as it was, and every part of a transaction it owns otherwise."""
    def f(o: OpenTxn) -> bool:
        if o.part is not None and o.toplevel in split and o.parts == partitions:
            return o.part == index
        return owner(o.toplevel, partitions) == index
    return f


def share(index: int, partitions: int, split: Split,
          top_of: Mapping[int, int] | None = None) -> Callable[[int, int], bool] | None:
    """Which changes partition ``index`` emits, by top-level xid and LSN
    (``Decoder.share``): of a split transaction, those of its stripes (and, before the LSN
    it is split from, all if it is the owner's); all of the others'. None when no
    transaction is split."""
    if not split:
        return None
    top_of = top_of or {}

    def f(xid: int, lsn: int) -> bool:
        top = top_of.get(xid, xid)
        since = split.get(top)
        if since is None:
            return True
        if lsn < since:
            return owner(top, partitions) == index
        return stripe_owner(top, lsn, partitions) == index
    return f


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
    """Which partition decodes what (:func:`owns`, :func:`share`, :func:`keeps`); sent to
    the partitions."""

    partitions: int
    top_of: dict[int, int]  #: subtransaction xid -> its top-level xid
    split: Split = field(default_factory=dict)  #: the split transactions (:data:`Split`)
    #: top-level xids never to split: what this batch shows of them, or an earlier one did
    unsplit: frozenset[int] = frozenset()

    @classmethod
    def merge(cls, partitions: int, facts: Iterable[SegmentFacts], carried: Mapping[int, int],
              open_txns: Iterable[OpenTxn] = (), start_lsn: int = 0) -> RouteMap:
        """The batch's facts plus ``carried``: memberships of the transactions left open
        (``open_txns``, whose parts say which were split), for a batch reading from
        ``start_lsn``."""
        facts = list(facts)
        parent_of = dict(carried)
        for f in facts:
            parent_of.update(f.parent_of)
        top_of = resolve(parent_of)
        split: dict[int, int] = {}
        opened = {o.toplevel: o for o in open_txns}
        unsplit = {top_of.get(x, x) for f in facts for x in f.unsplit} | {
            t for t, o in opened.items() if o.unsplit}
        if partitions > 1:
            parted = {t for t, o in opened.items() if o.part is not None and o.parts == partitions}
            for top in ({top_of.get(x, x) for f in facts for x in f.large} | parted) - unsplit:
                o = opened.get(top)
                # carried in parts: split as before; carried whole: from this batch on
                split[top] = 0 if o is None else o.since if top in parted else start_lsn
        return cls(partitions, top_of, split, frozenset(unsplit))

    def carried(self, txns: Iterable[OpenTxn]) -> list[OpenTxn]:
        """The transactions a batch leaves open, marked if they may never be split (a TOAST
        chunk carried whole must stay with the row that follows it in a later batch)."""
        return [dataclasses.replace(o, unsplit=True)
                if o.toplevel in self.unsplit and not o.unsplit else o for o in txns]
