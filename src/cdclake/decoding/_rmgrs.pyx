# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``decodable`` of :mod:`cdclake.decoding.rmgrs` (see :mod:`cdclake.native`),
and the routing class of a heap record from its bytes, which the Spark job's scan takes too.

Most records of a WAL are nothing a decoder reads — index records, vacuum's, full-page
images, other databases' changes: nearly two thirds of a pgbench load's. The compiled
reader's :func:`~cdclake.wal._reader.sift` checks every record and asks :class:`_Decodable`
about its bytes; the others are read past without a Python object built for them.
"""

from cdclake.wal._reader cimport Shape, Sieve, shape

from cdclake.catalog.model import FIRST_NORMAL_OBJECT_ID
from cdclake.decoding import rmgrs
from cdclake.wal import _reader
from cdclake.wal.record import RM_HEAP2_ID, RM_HEAP_ID, XLogRecord
from cdclake.wal.rmgr import heap, heap2

cdef unsigned int HEAP = RM_HEAP_ID
cdef unsigned int HEAP2 = RM_HEAP2_ID
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

assert (IGNORE, ALL, TXN, CATALOG) == (rmgrs.IGNORE, rmgrs.ALL, rmgrs.TXN, rmgrs.CATALOG)


cdef int heap_class(unsigned int rmid, unsigned int info, unsigned int xid, Shape *s,
                    unsigned int db) nogil:
    """``route_class`` of a heap or heap2 record (``_route_heap``, ``_route_heap2``)."""
    cdef unsigned int op = info & OPMASK
    if rmid == HEAP:
        if op == TRUNCATE:
            return TXN if xid else ALL
        if not (op == INSERT or op == UPDATE or op == HOT_UPDATE or op == DELETE
                or op == CONFIRM):
            return IGNORE
    elif info & HEAP2_OPMASK != MULTI_INSERT:
        return IGNORE
    if not s.nblocks or s.first_db != db:
        return IGNORE
    return ALL if not xid else CATALOG if s.first_rel < FIRST_NORMAL else TXN


cdef bint shared_out(unsigned int rmid, unsigned int info, const unsigned char *main,
                     Py_ssize_t main_len) nogil:
    """``plain_change(rec) or is_truncate(rec)`` of a TXN record whose main data is the
    ``main_len`` bytes at ``main``: a change one decoder takes alone, or a TRUNCATE, which
    every decoder sharing its transaction queues and one emits."""
    if rmid == HEAP2:
        return True
    cdef unsigned int op = info & OPMASK
    if op == INSERT:
        return main_len > 2 and not main[2] & INSERT_NOT_PLAIN
    if op == DELETE:
        return main_len > 7 and not main[7] & DELETE_IS_SUPER
    return op == UPDATE or op == HOT_UPDATE or op == TRUNCATE


#: by rmgr id and the high nibble of xl_info, whether a decoder reads a record (heap and
#: heap2: maybe, by the relation): the rmgr table's routing, asked once per kind
cdef unsigned char _READ[256 * 16]


def _fill_read():
    for rmid in range(256):
        for nibble in range(16):
            rec = XLogRecord(0, 0, 0, 1, rmid, nibble << 4, 0)
            _READ[rmid * 16 + nibble] = (rmid == HEAP or rmid == HEAP2
                                         or rmgrs.route_class(rec, 0) != rmgrs.IGNORE)


_fill_read()


cdef class _Decodable(Sieve):
    """See ``decodable``: the records routed to a decoder, those naming their top-level
    transaction, and the first."""

    cdef unsigned int db
    cdef bint seen

    def __init__(self, unsigned int db_oid):
        self.db = db_oid

    cdef int raw(self, unsigned long long lsn, unsigned long long prev, unsigned int xid,
                 unsigned int rmid, unsigned int info, Py_ssize_t tot_len,
                 const unsigned char *d, Py_ssize_t n) except -1:
        if not self.seen:
            self.seen = True
            return 1
        cdef Shape s
        if shape(d, n, tot_len, &s) < 0 or s.toplevel:
            return 1
        if not _READ[rmid * 16 + (info >> 4)]:
            return 0
        if rmid != HEAP and rmid != HEAP2:
            return 1
        return heap_class(rmid, info, xid, &s, self.db) != IGNORE


def decodable(reader, db_oid):
    """See ``cdclake.decoding.rmgrs.decodable``."""
    return _reader.sift(reader, _Decodable(db_oid))
