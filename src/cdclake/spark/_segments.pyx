# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``_scan`` of :mod:`cdclake.spark.segments` (see :mod:`cdclake.native`).

The scan reads every record of a batch for a few facts, where a Python record costs more
than the facts: most records are heap changes, of which it needs the transaction, the size,
the first block's relation and two flag bits of the main data. The compiled reader's
:func:`~cdclake.wal._reader.sift` checks every record as it reads it and hands its bytes to
:class:`_Facts`, which takes those facts from the bytes and builds only the transaction and
message records, which Python takes as the reference does (:func:`take`: memberships, the
full dictionary). The facts equal the reference's: its tests run both.
A record whose headers do not parse is built too, so the reader raises what is wrong with it.
"""

import sys

from cdclake.wal._reader cimport Sieve

from cdclake.catalog.model import FIRST_NORMAL_OBJECT_ID
from cdclake.wal import _reader
from cdclake.wal.record import RM_HEAP2_ID, RM_HEAP_ID, RM_LOGICALMSG_ID, RM_XACT_ID
from cdclake.wal.rmgr import heap, heap2

cdef unsigned int HEAP = RM_HEAP_ID
cdef unsigned int HEAP2 = RM_HEAP2_ID
cdef unsigned int XACT = RM_XACT_ID
cdef unsigned int LOGICALMSG = RM_LOGICALMSG_ID
cdef unsigned int FIRST_NORMAL = FIRST_NORMAL_OBJECT_ID
cdef unsigned int OPMASK = heap.XLOG_HEAP_OPMASK
cdef unsigned int INSERT = heap.XLOG_HEAP_INSERT
cdef unsigned int DELETE = heap.XLOG_HEAP_DELETE
cdef unsigned int UPDATE = heap.XLOG_HEAP_UPDATE
cdef unsigned int HOT_UPDATE = heap.XLOG_HEAP_HOT_UPDATE
cdef unsigned int CONFIRM = heap.XLOG_HEAP_CONFIRM
cdef unsigned int TRUNCATE = heap.XLOG_HEAP_TRUNCATE
cdef unsigned int HEAP2_OPMASK = heap2.XLOG_HEAP2_OPMASK
cdef unsigned int MULTI_INSERT = heap2.XLOG_HEAP2_MULTI_INSERT
cdef unsigned int INSERT_NOT_PLAIN = (heap.XLH_INSERT_IS_SPECULATIVE
                                      | heap.XLH_INSERT_ON_TOAST_RELATION)
cdef unsigned int DELETE_IS_SUPER = heap.XLH_DELETE_IS_SUPER

# DecodeXLogRecord's block ids and flags (as in cdclake.wal._reader)
cdef int RECORD_HEADER = 24
cdef int XLR_MAX_BLOCK_ID = 32
cdef int DATA_SHORT = 255
cdef int DATA_LONG = 254
cdef int ORIGIN = 253
cdef int TOPLEVEL_XID = 252
cdef int HAS_IMAGE = 0x10
cdef int SAME_REL = 0x80
cdef int IMAGE_HAS_HOLE = 0x01
cdef int IMAGE_COMPRESSED = 0x04 | 0x08 | 0x10

# routing classes (cdclake.decoding.rmgrs)
cdef enum:
    IGNORE = 0
    ALL = 1
    TXN = 2
    CATALOG = 3


cdef inline unsigned int _u16(const unsigned char *b) nogil:
    return b[0] | (b[1] << 8)


cdef inline unsigned int _u32(const unsigned char *b) nogil:
    return b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24)


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

    cdef int raw(self, unsigned long long lsn, unsigned long long prev, unsigned int xid,
                 unsigned int rmid, unsigned int info, Py_ssize_t tot_len,
                 const unsigned char *d, Py_ssize_t n) except -1:
        if not self.seen:
            self.seen = True
            self.first_lsn, self.first_prev = lsn, prev
        self.last = lsn
        if rmid == XACT or rmid == LOGICALMSG:
            return 1  # memberships, the dictionary: Python's
        cdef Py_ssize_t p = RECORD_HEADER, datatotal = 0, main_len = 0
        cdef unsigned int toplevel = 0, first_db = 0, first_rel = 0
        cdef int block_id, flags, nblocks = 0
        cdef unsigned int bimg_info
        while tot_len - p > datatotal:
            if p >= n:
                return 1
            block_id = d[p]
            p += 1
            if block_id == DATA_SHORT:
                if p + 1 > n:
                    return 1
                main_len = d[p]
                p += 1
                datatotal += main_len
                break
            if block_id == DATA_LONG:
                if p + 4 > n:
                    return 1
                main_len = _u32(d + p)
                p += 4
                datatotal += main_len
                break
            if block_id == ORIGIN:
                p += 2
                continue
            if block_id == TOPLEVEL_XID:
                if p + 4 > n:
                    return 1
                toplevel = _u32(d + p)
                p += 4
                continue
            if block_id > XLR_MAX_BLOCK_ID:
                return 1
            if p + 3 > n:
                return 1
            flags = d[p]
            datatotal += _u16(d + p + 1)
            p += 3
            if flags & HAS_IMAGE:
                if p + 5 > n:
                    return 1
                datatotal += _u16(d + p)
                bimg_info = d[p + 4]
                p += 5
                if bimg_info & IMAGE_HAS_HOLE and bimg_info & IMAGE_COMPRESSED:
                    p += 2
            if not flags & SAME_REL:
                if p + 12 > n:
                    return 1
                if nblocks == 0:
                    first_db = _u32(d + p + 4)
                    first_rel = _u32(d + p + 8)
                p += 12
            elif nblocks == 0:
                return 1
            p += 4
            nblocks += 1
        if tot_len - p != datatotal or tot_len > n:
            return 1
        if toplevel and toplevel != xid:
            self.parent_of[xid] = toplevel
        cdef const unsigned char *main = d + tot_len - main_len
        cdef unsigned int op = info & OPMASK
        cdef int kind = IGNORE
        cdef bint by_block = False
        if rmid == HEAP:
            if op == INSERT or op == UPDATE or op == HOT_UPDATE or op == DELETE or op == CONFIRM:
                by_block = True
            elif op == TRUNCATE:
                kind = TXN if xid else ALL
        elif rmid == HEAP2 and info & HEAP2_OPMASK == MULTI_INSERT:
            by_block = True
        if by_block and nblocks and first_db == self.db:
            kind = ALL if not xid else CATALOG if first_rel < FIRST_NORMAL else TXN
        if kind == TXN:
            if xid != self.run_xid:
                self.flush()
                self.run_xid = xid
            self.run_bytes += tot_len
            if rmid == HEAP and not (
                    op == TRUNCATE or op == UPDATE or op == HOT_UPDATE
                    or (op == INSERT and main_len > 2 and not main[2] & INSERT_NOT_PLAIN)
                    or (op == DELETE and main_len > 7 and not main[7] & DELETE_IS_SUPER)):
                self.unsplit.add(xid)
        elif kind == CATALOG and (rmid == HEAP2 or op == INSERT):
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
        for rec in _reader.sift(reader, sieve):
            take(rec, out, facts, db_oid, key, reader.version)
    finally:
        sieve.flush()
        out.first_lsn, out.first_prev = sieve.first_lsn, sieve.first_prev
        out.last_lsn = sieve.last_lsn
