"""A segment's routing facts, as the scan (:func:`cdclake.spark.segments.scan_segment`)
gathers them.

Most records of a segment are heap changes, of which the scan needs the transaction, the
size, the first block's relation and two flag bits of the main data: the collector is the
reader's :class:`~cdclake.wal.reader.Sieve`, told those by the walk, and has only the
transaction and message records built (their memberships and the full dictionary are read
from the record, :meth:`FactCollector.add`). Compiled as itself (Cython's pure-Python mode,
``_facts.pxd``), where the walk tells it as C and the rmgr table's ``heap_route``, ``plain``
and ``truncates`` are asked as C; the scan makes its collector with :func:`collector`, bound
to its compiled twin.
"""

from __future__ import annotations

from cdclake import native
from cdclake.decoding.rmgrs import CATALOG, TXN, memberships
from cdclake.wal.primitives import Bytes
from cdclake.wal.record import (
    RM_HEAP2_ID,
    RM_HEAP_ID,
    RM_LOGICALMSG_ID,
    RM_XACT_ID,
    XLogRecord,
)
from cdclake.wal.rmgr.heap import XLOG_HEAP_INSERT, XLOG_HEAP_OPMASK

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.decoding._rmgrs import heap_route, plain, truncates
    from cython.cimports.cdclake.wal._reader import Sieve, Walk
else:
    from cdclake.decoding.rmgrs import heap_route, plain, truncates
    from cdclake.wal.reader import Sieve, Walk


class FactCollector(Sieve):
    """A segment's facts for database ``db_oid``, gathered as the walk goes by: the
    subtransaction memberships, the bytes of each transaction's changes (summed while a
    transaction's records follow each other, added when another's come: :meth:`flush`), the
    transactions whose changes cannot be split; and the first and last record read."""

    def __init__(self, db_oid: int = 0) -> None:
        self.db = db_oid
        self.parent_of: dict[int, int] = {}  # subxact -> parent
        self.changes: dict[int, int] = {}  # xid -> bytes of its changes
        self.unsplit: set[int] = set()
        self.first_lsn: int | None = None
        self.first_prev = 0
        self.last_lsn: int | None = None
        self.last = 0
        self.run_xid = 0
        self.run_bytes = 0

    def wants(self, walk: Walk) -> bool:
        """The scan's sieve: the facts of a heap record from what the walk tells; a
        transaction or message record is built, for :meth:`add`."""
        if self.first_lsn is None:
            self.first_lsn, self.first_prev = walk.lsn, walk.prev
        self.last = walk.lsn
        rmid = walk.rmid
        xid = walk.xid
        if rmid in (RM_XACT_ID, RM_LOGICALMSG_ID):
            return True  # memberships, the dictionary: the record's
        if walk.toplevel and walk.toplevel != xid:
            self.parent_of[xid] = walk.toplevel
        if rmid in (RM_HEAP_ID, RM_HEAP2_ID):
            self.count(heap_route(rmid, walk.info, xid, walk.nblocks, walk.first_db,
                                  walk.first_rel, self.db),
                       xid, rmid, walk.info, walk.tot_len, walk.src, walk.main, walk.main_len)
        return False

    def add(self, kind: int, rec: XLogRecord, version: int) -> None:
        """The facts of a record the scan has built (routed ``kind``)."""
        for sub, parent in memberships(rec, version):
            self.parent_of[sub] = parent
        main = rec.main_data
        self.count(kind, rec.xid, rec.rmid, rec.info, rec.tot_len, main, 0, len(main))

    def count(self, kind: int, xid: int, rmid: int, info: int, tot_len: int, src: Bytes,
              main: int, main_len: int) -> None:
        """What tells a large transaction whose changes can be split: their bytes, and
        whether it has records every partition must see (a change with its main data the
        ``main_len`` bytes at ``main`` in ``src``)."""
        if kind == TXN:
            if xid != self.run_xid:
                self.flush()
                self.run_xid = xid
            self.run_bytes += tot_len
            if not plain(rmid, info, src, main, main_len) and not truncates(rmid, info):
                self.unsplit.add(xid)
        elif kind == CATALOG and (rmid == RM_HEAP2_ID
                                  or info & XLOG_HEAP_OPMASK == XLOG_HEAP_INSERT):
            self.unsplit.add(xid)  # a new catalog row: a new relation or column, a rewrite

    def flush(self) -> None:
        """Add the bytes summed since the last transaction change to its; the last record
        read as ``last_lsn``."""
        if self.run_bytes:
            self.changes[self.run_xid] = self.changes.get(self.run_xid, 0) + self.run_bytes
        self.run_bytes = 0
        if self.first_lsn is not None:
            self.last_lsn = self.last


def collector(db_oid: int) -> FactCollector:
    """A :class:`FactCollector`: where this file is compiled, the compiled class's (the one
    the compiled walk tells as C)."""
    return FactCollector(db_oid)


collector = native.twin(collector, "cdclake.spark._facts")
