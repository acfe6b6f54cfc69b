# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``decodable`` of :mod:`cdclake.decoding.rmgrs` (see :mod:`cdclake.native`),
and the routing class of a heap record from its bytes, which the Spark job's scan takes too.

Most records of a WAL are nothing a decoder reads — index records, vacuum's, full-page
images, other databases' changes: nearly two thirds of a pgbench load's. The compiled
reader's :class:`~cdclake.wal.reader.Walk` checks every record and asks :class:`_Decodable`
(a :class:`~cdclake.wal.reader.Sieve`) about its bytes, which it reads with :func:`shape`;
the others are read past without a Python object built for them.
"""

from cdclake.wal._payload cimport Bytes, payload
from cdclake.wal._reader cimport Sieve, Walk

from cdclake.catalog.model import FIRST_NORMAL_OBJECT_ID
from cdclake.decoding import rmgrs
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
cdef int RECORD_HEADER = 24
cdef int XLR_MAX_BLOCK_ID = 32
cdef int XLR_BLOCK_ID_DATA_SHORT = 255
cdef int XLR_BLOCK_ID_DATA_LONG = 254
cdef int XLR_BLOCK_ID_ORIGIN = 253
cdef int XLR_BLOCK_ID_TOPLEVEL_XID = 252
cdef int BKPBLOCK_HAS_IMAGE = 0x10
cdef int BKPBLOCK_SAME_REL = 0x80
cdef int BKPIMAGE_HAS_HOLE = 0x01
cdef int BKPIMAGE_COMPRESSED = 0x04 | 0x08 | 0x10

assert (IGNORE, ALL, TXN, CATALOG) == (rmgrs.IGNORE, rmgrs.ALL, rmgrs.TXN, rmgrs.CATALOG)


cdef inline unsigned int _le16(const unsigned char *b) nogil:
    return b[0] | (b[1] << 8)


cdef inline unsigned int _le32(const unsigned char *b) nogil:
    return b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24)


cdef int shape(const unsigned char *d, Py_ssize_t n, Py_ssize_t tot_len, Shape *s) nogil:
    """DecodeXLogRecord's walk over the ``n`` bytes at ``d`` of a record of ``tot_len`` bytes
    (checked by the reader) reading only what a sieve needs: 0, or -1 when its headers do
    not parse (a sieve then has the record built, and the reader says what is wrong)."""
    cdef Py_ssize_t p = RECORD_HEADER, datatotal = 0
    cdef int block_id, flags
    cdef unsigned int bimg_info
    s.toplevel = 0
    s.nblocks = 0
    s.main_len = 0
    while tot_len - p > datatotal:
        if p >= n:
            return -1
        block_id = d[p]
        p += 1
        if block_id == XLR_BLOCK_ID_DATA_SHORT:
            if p + 1 > n:
                return -1
            s.main_len = d[p]
            p += 1
            datatotal += s.main_len
            break
        if block_id == XLR_BLOCK_ID_DATA_LONG:
            if p + 4 > n:
                return -1
            s.main_len = _le32(d + p)
            p += 4
            datatotal += s.main_len
            break
        if block_id == XLR_BLOCK_ID_ORIGIN:
            p += 2
            continue
        if block_id == XLR_BLOCK_ID_TOPLEVEL_XID:
            if p + 4 > n:
                return -1
            s.toplevel = _le32(d + p)
            p += 4
            continue
        if block_id > XLR_MAX_BLOCK_ID:
            return -1
        if p + 3 > n:
            return -1
        flags = d[p]
        datatotal += _le16(d + p + 1)
        p += 3
        if flags & BKPBLOCK_HAS_IMAGE:
            if p + 5 > n:
                return -1
            datatotal += _le16(d + p)
            bimg_info = d[p + 4]
            p += 5
            if bimg_info & BKPIMAGE_HAS_HOLE and bimg_info & BKPIMAGE_COMPRESSED:
                p += 2
        if not flags & BKPBLOCK_SAME_REL:
            if p + 12 > n:
                return -1
            if s.nblocks == 0:
                s.first_db = _le32(d + p + 4)
                s.first_rel = _le32(d + p + 8)
            p += 12
        elif s.nblocks == 0:
            return -1
        p += 4
        s.nblocks += 1
    if tot_len - p != datatotal or tot_len > n:
        return -1
    return 0


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

    cpdef bint wants(self, unsigned long long lsn, unsigned long long prev, unsigned int xid,
                     unsigned int rmid, unsigned int info, Py_ssize_t tot_len, object src,
                     Py_ssize_t off) except -1:
        if not self.seen:
            self.seen = True
            return 1
        cdef Bytes b = payload(src)
        cdef Shape s
        if shape(b.p + off, min(tot_len, b.n - off), tot_len, &s) < 0 or s.toplevel:
            return 1
        if not _READ[rmid * 16 + (info >> 4)]:
            return 0
        if rmid != HEAP and rmid != HEAP2:
            return 1
        return heap_class(rmid, info, xid, &s, self.db) != IGNORE


def decodable(reader, db_oid):
    """See ``cdclake.decoding.rmgrs.decodable``."""
    return Walk(reader, _Decodable(db_oid))
