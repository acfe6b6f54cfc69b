# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``_scan`` of :mod:`cdclake.spark.segments` (see :mod:`cdclake.native`).

The scan reads every record of a batch for a few facts, where a Python record costs more
than the facts: most records are heap changes, of which it needs the transaction, the size,
the first block's relation and two flag bits of the main data. The compiled reader's
:class:`~cdclake.wal.reader.Walk` checks every record as it reads it and tells :class:`_Facts`
(a :class:`~cdclake.wal.reader.Sieve`) its header fields, block count, first relation and
main data, from which it takes those facts (by the rmgr table's ``heap_route``, ``plain``
and ``truncates``, compiled), building only the transaction and message records, which
Python takes as the reference does (:func:`take`: memberships, the full dictionary). The
facts equal the reference's: its tests run both. A record whose block headers do not parse
stops the walk with the reader's error.
"""

import sys

from cdclake.decoding._rmgrs cimport heap_route, plain, truncates
from cdclake.wal._reader cimport Sieve, Walk

from cdclake.decoding import rmgrs
from cdclake.wal.record import RM_HEAP2_ID, RM_HEAP_ID, RM_LOGICALMSG_ID, RM_XACT_ID
from cdclake.wal.rmgr import heap

cdef unsigned int HEAP = RM_HEAP_ID
cdef unsigned int HEAP2 = RM_HEAP2_ID
cdef unsigned int XACT = RM_XACT_ID
cdef unsigned int LOGICALMSG = RM_LOGICALMSG_ID
cdef unsigned int OPMASK = heap.XLOG_HEAP_OPMASK
cdef unsigned int INSERT = heap.XLOG_HEAP_INSERT
cdef int TXN = rmgrs.TXN
cdef int CATALOG = rmgrs.CATALOG


cdef class _Facts(Sieve):
    """A :class:`~cdclake.spark.segments.FactCollector`'s facts from the records' bytes, and
    the first and last record read. A transaction's change bytes are summed in C while its
    records follow each other, and added to the collector's when another's come."""

    cdef unsigned int db
    cdef object parent_of, changes, unsplit
    cdef bint seen
    cdef public object first_lsn, first_prev, last_lsn
    cdef unsigned long long last
    cdef unsigned int run_xid
    cdef Py_ssize_t run_bytes

    def __init__(self, facts, unsigned int db_oid):
        self.db = db_oid
        self.parent_of = facts.parent_of
        self.changes = facts.changes
        self.unsplit = facts.unsplit
        self.first_lsn = None
        self.first_prev = 0
        self.last_lsn = None

    cpdef bint wants(self, Walk walk) except -1:
        cdef unsigned int xid = walk.xid, rmid = walk.rmid, info = walk.info
        if not self.seen:
            self.seen = True
            self.first_lsn, self.first_prev = walk.lsn, walk.prev
        self.last = walk.lsn
        if rmid == XACT or rmid == LOGICALMSG:
            return 1  # memberships, the dictionary: Python's
        if walk.toplevel and walk.toplevel != xid:
            self.parent_of[xid] = walk.toplevel
        if rmid != HEAP and rmid != HEAP2:
            return 0
        cdef int kind = heap_route(rmid, info, xid, walk.nblocks, walk.first_db, walk.first_rel,
                                   self.db)
        if kind == TXN:
            if xid != self.run_xid:
                self.flush()
                self.run_xid = xid
            self.run_bytes += walk.tot_len
            if not (plain(rmid, info, walk.src, walk.main, walk.main_len)
                    or truncates(rmid, info)):
                self.unsplit.add(xid)
        elif kind == CATALOG and (rmid == HEAP2 or info & OPMASK == INSERT):
            self.unsplit.add(xid)
        return 0

    cpdef flush(self):
        """Add the change bytes summed in C to the collector's."""
        if self.run_bytes:
            changes = self.changes
            changes[self.run_xid] = changes.get(self.run_xid, 0) + self.run_bytes
        self.run_bytes = 0
        if self.seen:
            self.last_lsn = self.last


def _scan(reader, out, facts, db_oid, key):
    """See ``cdclake.spark.segments._scan``."""
    take = sys.modules["cdclake.spark.segments"].take
    cdef _Facts sieve = _Facts(facts, db_oid)
    try:
        for rec in Walk(reader, sieve):
            take(rec, out, facts, db_oid, key, reader.version)
    finally:
        sieve.flush()
        out.first_lsn, out.first_prev = sieve.first_lsn, sieve.first_prev
        out.last_lsn = sieve.last_lsn
