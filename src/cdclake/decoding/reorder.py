"""The ReorderBuffer: changes collected per transaction until its commit decides their fate.

As in PostgreSQL's reorderbuffer.c, ``by_txn`` maps an xid to its TXN (first LSN, changes in
LSN order, size, spill state). Every queued change is counted against ``work_mem``; past it
the heaviest (sub)transaction is serialized to spill files and its memory released, so memory
stays bounded by work_mem however large a transaction grows. At commit the top-level
transaction and the subtransactions its commit record names are merged back into one
LSN-ordered stream, reading spilled changes back lazily (commit processing:
:mod:`cdclake.decoding.reassembly`).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable
from pathlib import Path

from cdclake import native
from cdclake.decoding.changes import Change
from cdclake.decoding.spill import (
    append_entries,
    encode_runs,
    private_dir,
    remove_files,
    spill_file_name,
)
from cdclake.decoding.txn import TXN, local_path

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.decoding._changes import change_size
else:
    from cdclake.decoding.changes import change_size

_SPILL_RE = re.compile(r"^xid-\d+-lsn-[0-9A-F]+-[0-9A-F]+\.spill$")


def xid_precedes(a: int, b: int) -> bool:
    """TransactionIdPrecedes: modulo-2^32 comparison of normal xids."""
    if a < 3 or b < 3:  # permanent xids compare plainly
        return a < b
    return ((a - b) & 0xFFFFFFFF) >= 0x80000000


class ReorderBuffer:
    """by_txn plus memory accounting and spill-to-disk."""

    def __init__(self, work_mem: int, spill_dir: Path, segment_size: int) -> None:
        self.by_txn: dict[int, TXN] = {}
        self.work_mem = work_mem
        self.spill_dir = spill_dir
        self.segment_size = segment_size
        self.size = 0  #: bytes of changes held in memory, all transactions
        self.peak_size = 0
        #: the (sub)transactions spilled at least once
        self.spilled_xids: set[int] = set()
        self.spilled_changes = 0
        self.spilled_bytes = 0

    @property
    def spilled_txns(self) -> int:
        return len(self.spilled_xids)

    # -- transactions --------------------------------------------------------------------------

    def txn(self, xid: int, lsn: int) -> TXN:
        """``xid``'s entry, made where it is new (its first LSN ``lsn``): :func:`txn`."""
        return txn(self, xid, lsn)

    def assign_child(self, top_xid: int, sub_xid: int, lsn: int) -> None:
        """A subtransaction's first record names its top-level xid (wal_level=logical)."""
        if top_xid == sub_xid:
            return
        top = self.txn(top_xid, lsn)
        sub = self.txn(sub_xid, lsn)
        if sub.top != top_xid:
            sub.top = top_xid
            top.subxids.append(sub_xid)

    def queue(self, xid: int, change: Change) -> None:
        """Add ``change`` to ``xid``'s changes and count it: :func:`queue`."""
        queue(self, xid, change)

    # -- memory ----------------------------------------------------------------------------

    def evict(self) -> None:
        """Serialize the heaviest transactions until memory is back under work_mem."""
        if self.size > self.peak_size:
            self.peak_size = self.size
        while self.size > self.work_mem:
            largest = max(self.by_txn.values(), key=lambda t: t.size)
            if largest.size == 0:
                return
            self.spill(largest)

    def spill(self, t: TXN) -> None:
        """Write ``t``'s in-memory changes to its spill files and release their memory."""
        private_dir(self.spill_dir)
        seg = self.segment_size
        for segno, count, data in encode_runs(t.changes, seg):
            path = t.spill_files.get(segno)
            if path is None:
                path = t.spill_files[segno] = self.spill_dir / spill_file_name(t.xid, segno * seg)
            assert isinstance(path, Path)  # carried changes have negative keys
            append_entries(path, data)
            self.spilled_bytes += len(data)
            self.spilled_changes += count
        if t.nspilled == 0:
            self.spilled_xids.add(t.xid)
        t.nspilled += len(t.changes)
        self.size -= t.size
        t.size = 0
        t.changes = []

    # -- end of a transaction -------------------------------------------------------------

    def members(self, xid: int, subxids: Iterable[int]) -> list[TXN]:
        """The top-level TXN (if any) and the named subtransactions that have buffered state:
        :func:`members`."""
        return members(self, xid, subxids)

    @staticmethod
    def merged_changes(txns: list[TXN]) -> Iterable[Change]:
        """One LSN-ordered stream over a transaction and its subtransactions:
        :func:`merged_changes`."""
        return merged_changes(txns)

    def discard(self, xid: int, subxids: Iterable[int] = ()) -> None:
        """Forget a transaction and its subtransactions (after commit, or at abort):
        :func:`discard`."""
        discard(self, xid, subxids)

    def discard_all(self) -> None:
        """Drop everything still buffered (end of a run that does not carry state on)."""
        for xid in list(self.by_txn):
            self.discard(xid)

    def abort_old(self, oldest_running_xid: int) -> list[int]:
        """Drop top-level transactions older than anything still running (crash leftovers)."""
        dropped = [x for x, t in self.by_txn.items()
                   if not t.top and not t.prepared and xid_precedes(x, oldest_running_xid)]
        for x in dropped:
            self.discard(x)
        return dropped


# The calls per change are functions of the module, not methods, so that ``_reorder.pxd`` can
# give them C types where this file is compiled (as ``cdclake.decoding._reorder``, Cython's
# pure-Python mode): the compiled decoder cimports them.


def top_of(rb: ReorderBuffer, xid: int) -> int:
    """``xid``'s top-level transaction. A subtransaction is known by then: its first record
    named its top-level xid (``Decoder.process``)."""
    by_txn = rb.by_txn
    t = by_txn.get(xid)
    return t.top if t is not None and t.top else xid


def txn(rb: ReorderBuffer, xid: int, lsn: int) -> TXN:
    """``rb.txn``: ``xid``'s entry in ``rb.by_txn``, made where it is new."""
    by_txn = rb.by_txn
    t = by_txn.get(xid)
    if t is None:
        t = by_txn[xid] = TXN(xid, lsn)
    return t


def queue(rb: ReorderBuffer, xid: int, change: Change) -> None:
    """``rb.queue``: ``change`` appended to its transaction's changes and counted against
    ``work_mem``; past it, the heaviest transactions spill (:meth:`ReorderBuffer.evict`)."""
    t = txn(rb, xid, change.lsn)
    changes = t.changes
    changes.append(change)
    n = change_size(change)
    t.size += n
    rb.size += n
    if rb.size > rb.work_mem:
        rb.evict()


def members(rb: ReorderBuffer, xid: int, subxids: Iterable[int]) -> list[TXN]:
    """``rb.members``: the top-level TXN (if any) and the named subtransactions that have
    buffered state."""
    by_txn = rb.by_txn
    top = by_txn.get(xid)
    out = [] if top is None else [top]
    for s in subxids:
        t = by_txn.get(s)
        if t is not None and t is not top:
            out.append(t)
    return out


def merged_changes(txns: list[TXN]) -> Iterable[Change]:
    """One LSN-ordered stream over a transaction and its subtransactions: of a transaction
    whose changes are all in memory, its list of them."""
    if len(txns) == 1 and not txns[0].spill_files:
        return txns[0].changes
    streams = [m.stream() for m in txns if m.changes or m.spill_files]
    if len(streams) == 1:
        return streams[0]
    return heapq.merge(*streams, key=_lsn_of)


def _lsn_of(change: Change) -> int:
    return change.lsn


def discard(rb: ReorderBuffer, xid: int, subxids: Iterable[int] = ()) -> None:
    """``rb.discard``: forget a transaction and its subtransactions (after commit, or at
    abort). The peak is sampled where memory goes down (and before eviction), not per
    change."""
    by_txn = rb.by_txn
    t = by_txn.get(xid)
    if t is not None and not t.subxids and not t.spill_files and not subxids:
        del by_txn[xid]  # the common case: one transaction, all in memory
        if rb.size > rb.peak_size:
            rb.peak_size = rb.size
        rb.size -= t.size
        return
    seen: set[int] = set()
    todo = [xid, *subxids]
    while todo:
        x = todo.pop()
        if x in seen:
            continue
        seen.add(x)
        t = by_txn.pop(x, None)
        if t is None:
            continue
        todo.extend(t.subxids)
        if rb.size > rb.peak_size:
            rb.peak_size = rb.size
        rb.size -= t.size
        remove_files([local_path(f) for f in t.spill_files.values()])


def clean_spill_dir(spill_dir: Path) -> int:
    """Remove spill files a previous, interrupted run left behind (PostgreSQL does the same)."""
    if not spill_dir.is_dir():
        return 0
    stale = [p for p in spill_dir.iterdir() if _SPILL_RE.match(p.name)]
    remove_files(stale)
    return len(stale)


ReorderBuffer.txn = native.twin(  # type: ignore[method-assign]
    ReorderBuffer.txn, "cdclake.decoding._reorder")
ReorderBuffer.queue = native.twin(  # type: ignore[method-assign]
    ReorderBuffer.queue, "cdclake.decoding._reorder")
ReorderBuffer.members = native.twin(  # type: ignore[method-assign]
    ReorderBuffer.members, "cdclake.decoding._reorder")
ReorderBuffer.discard = native.twin(  # type: ignore[method-assign]
    ReorderBuffer.discard, "cdclake.decoding._reorder")
