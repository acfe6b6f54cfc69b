# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twins of ``Decoder._heap`` and ``Decoder._heap2`` (:mod:`cdclake.decoding.decode`,
see :mod:`cdclake.native`): the heap INSERT, UPDATE, HOT_UPDATE and DELETE records of user
tables, and COPY's MULTI_INSERT, read from the record's bytes and queued as Changes, without
the parsed-record dataclasses of :mod:`cdclake.wal.rmgr` and without running
``Change.__init__`` or ``WalTuple.__init__`` (a Python frame each). Whose a change is and how
it is queued are the Python decoder's own rules (:mod:`cdclake.decoding.queueing`), asked as
C; the per-record dispatch (:mod:`cdclake.decoding.rmgrs`' ``process``) and the transaction
rmgr's records (:mod:`cdclake.decoding.commit`) are those modules compiled as themselves.

Everything else goes to the Python reference (``Decoder._python_heap``, ``_python_heap2``)
unchanged: TRUNCATE, CONFIRM, pg_class inserts (catalog events), TOAST chunks, and any record
too short for its layout, whose WalCorruptError the reference raises. The gates run in the reference's order, with the
same filter calls, so both queue and emit the same changes, which the decoding suites check by
running every test with both (and ``test_decode_twins.py`` record by record).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize

from cdclake.catalog._versions cimport is_pg_class
from cdclake.wal._payload cimport Bytes, payload, readable
from cdclake.decoding._changes cimport ChangeSlots, change_slots
from cdclake.decoding._filter cimport drop_locator, origin_ok
from cdclake.decoding._queueing cimport buffer_change, elsewhere, foreign, queue_change
from cdclake.wal._slots cimport blank, get, offset, put

from cdclake.decoding.changes import (
    DELETE,
    INSERT,
    SPEC_ABORT,
    SPEC_INSERT,
    UPDATE,
    Change,
)
from cdclake.decoding.filter import Filter
from cdclake.decoding.walclass import PgClassTracker
from cdclake.wal.record import WalTuple, XLogRecord
from cdclake.wal.rmgr import heap, heap2


cdef int OPMASK = heap.XLOG_HEAP_OPMASK
cdef int OP_INSERT = heap.XLOG_HEAP_INSERT
cdef int OP_DELETE = heap.XLOG_HEAP_DELETE
cdef int OP_UPDATE = heap.XLOG_HEAP_UPDATE
cdef int OP_HOT_UPDATE = heap.XLOG_HEAP_HOT_UPDATE
cdef int INSERT_CONTAINS_NEW_TUPLE = heap.XLH_INSERT_CONTAINS_NEW_TUPLE
cdef int INSERT_ON_TOAST_RELATION = heap.XLH_INSERT_ON_TOAST_RELATION
cdef int INSERT_IS_SPECULATIVE = heap.XLH_INSERT_IS_SPECULATIVE
cdef int UPDATE_CONTAINS_OLD = heap.XLH_UPDATE_CONTAINS_OLD
cdef int UPDATE_CONTAINS_NEW_TUPLE = heap.XLH_UPDATE_CONTAINS_NEW_TUPLE
cdef int UPDATE_PREFIX_FROM_OLD = heap.XLH_UPDATE_PREFIX_FROM_OLD
cdef int UPDATE_SUFFIX_FROM_OLD = heap.XLH_UPDATE_SUFFIX_FROM_OLD
cdef int DELETE_IS_SUPER = heap.XLH_DELETE_IS_SUPER
cdef int DELETE_CONTAINS_OLD = heap.XLH_DELETE_CONTAINS_OLD
cdef int HEAP2_OPMASK = heap2.XLOG_HEAP2_OPMASK
cdef int OP_MULTI_INSERT = heap2.XLOG_HEAP2_MULTI_INSERT
cdef int INIT_PAGE = heap.XLOG_HEAP_INIT_PAGE
cdef int INSERT_LAST_IN_MULTI = heap.XLH_INSERT_LAST_IN_MULTI
cdef int HEADER = 5  # xl_heap_header: t_infomask2, t_infomask, t_hoff
cdef int MULTI_SIZE = 4  # xl_heap_multi_insert: flags, pad, ntuples (offsets follow)
cdef int MULTI_TUPLE = 7  # xl_multi_insert_tuple: datalen, t_infomask2, t_infomask, t_hoff
cdef int INSERT_SIZE = 3  # xl_heap_insert: offnum, flags
cdef int DELETE_SIZE = 8  # xl_heap_delete: xmax, offnum, infobits_set, flags
cdef int UPDATE_SIZE = 14  # xl_heap_update: old_xmax, old_offnum, old_infobits, flags, ...
cdef ChangeSlots CS = change_slots(Change, WalTuple)
cdef Py_ssize_t R_LSN = offset(XLogRecord, "lsn")
cdef Py_ssize_t R_XID = offset(XLogRecord, "xid")
cdef Py_ssize_t R_ORIGIN = offset(XLogRecord, "origin")
cdef Py_ssize_t R_INFO = offset(XLogRecord, "info")
cdef Py_ssize_t R_MAIN_DATA = offset(XLogRecord, "main_data")
cdef Py_ssize_t R_BLOCKS = offset(XLogRecord, "blocks")


cdef inline bint _origin_ok(filt, rec) except -1:
    """``filt.origin_ok(rec.origin)`` (gate 2, asked of every change); for the Filter the
    function its method calls, called as C."""
    if type(filt) is Filter:
        return origin_ok(filt, _r(rec, R_ORIGIN, "origin"))
    return filt.origin_ok(_r(rec, R_ORIGIN, "origin"))


cdef inline object _r(rec, Py_ssize_t at, str name):
    """``rec.<name>``: a record the reader built is read at its slot (``at``), anything else
    by name. A record's fields are read a dozen times on its way through the decoder."""
    if type(rec) is XLogRecord:
        return get(rec, at)
    return getattr(rec, name)


cdef object _tuple(Bytes b, Py_ssize_t off):
    """wal_tuple: xl_heap_header at ``off``, then the tuple's bytes from t_bits on."""
    t = blank(WalTuple)
    put(t, CS.t_infomask2, b.p[off] | (b.p[off + 1] << 8))
    put(t, CS.t_infomask, b.p[off + 2] | (b.p[off + 3] << 8))
    put(t, CS.t_hoff, b.p[off + 4])
    put(t, CS.t_data, PyBytes_FromStringAndSize(<const char *> b.p + off + HEADER,
                                             b.n - off - HEADER))
    return t


cdef object _change(int action, rec, loc, old, new, int seq=0, bint clear_toast=True):
    c = blank(Change)
    put(c, CS.action, action)
    put(c, CS.lsn, _r(rec, R_LSN, "lsn"))
    put(c, CS.seq, seq)
    put(c, CS.locator, loc)
    put(c, CS.old, old)
    put(c, CS.new, new)
    put(c, CS.clear_toast, clear_toast)
    put(c, CS.origin, _r(rec, R_ORIGIN, "origin"))
    put(c, CS.payload, None)
    return c


cdef inline bint _elsewhere(self, rec, loc, xid, lsn, Py_ssize_t count=1,
                            bint last_clears=True) except -1:
    """``elsewhere`` (:mod:`cdclake.decoding.queueing`) for the rows of ``rec``."""
    return elsewhere(self, xid, lsn, _r(rec, R_ORIGIN, "origin"), loc, count, last_clears)


cdef bint _drop(filt, loc, lsn) except -1:
    """``filt.drop_locator(loc, lsn)``, called as C for the Filter itself."""
    if type(filt) is Filter:
        return drop_locator(filt, loc, lsn)
    return filt.drop_locator(loc, lsn)


cdef bint _is_pg_class(tracker, loc) except -1:
    """``tracker.is_pg_class(loc)``; for the PgClassTracker (asked of every INSERT, UPDATE
    and DELETE) the function its method calls, called as C."""
    if type(tracker) is PgClassTracker:
        return is_pg_class(tracker.dictionary.pg_class_loc, loc)
    return tracker.is_pg_class(loc)


def _heap(self, rec):
    """See ``Decoder._heap``."""
    cdef int op = _r(rec, R_INFO, "info") & OPMASK
    cdef int flags
    cdef Bytes md, bd
    cdef Py_ssize_t p
    if op != OP_INSERT and op != OP_UPDATE and op != OP_HOT_UPDATE and op != OP_DELETE:
        return self._python_heap(rec)
    blocks = _r(rec, R_BLOCKS, "blocks")
    main = _r(rec, R_MAIN_DATA, "main_data")
    if not blocks or not readable(main):
        return self._python_heap(rec)
    blk = blocks[0]
    loc = blk.rlocator
    if loc.db != self.db_oid:  # gate 1, before parsing
        return
    xid = _r(rec, R_XID, "xid")
    lsn = _r(rec, R_LSN, "lsn")
    tracker = self.tracker
    if tracker is not None and _is_pg_class(tracker, loc):
        return self._python_heap(rec)
    if foreign(self, xid):
        return
    md = payload(main)
    filt = self.filter
    data = blk.data
    if data is not None and not readable(data):
        return self._python_heap(rec)
    if op == OP_INSERT:
        if md.n < INSERT_SIZE:
            return self._python_heap(rec)
        flags = md.p[2]
        if data is not None and len(data) and len(data) < HEADER:
            return self._python_heap(rec)
        if (not flags & INSERT_CONTAINS_NEW_TUPLE
                or not _origin_ok(filt, rec)):
            return
        if flags & INSERT_ON_TOAST_RELATION:
            return self._python_heap(rec)
        if _drop(filt, loc, lsn):  # gates 3-4 where already decidable
            return
        if (not flags & INSERT_IS_SPECULATIVE and self.share is not None
                and _elsewhere(self, rec, loc, xid, lsn)):
            return
        new = _tuple(payload(data), 0) if data else None
        queue_change(self, xid, lsn,
                     _change(SPEC_INSERT if flags & INSERT_IS_SPECULATIVE else INSERT, rec, loc,
                             None, new),
                     -1 if flags & INSERT_IS_SPECULATIVE and self.share is not None else 1)
    elif op == OP_DELETE:
        if md.n < DELETE_SIZE:
            return self._python_heap(rec)
        flags = md.p[7]
        if flags & DELETE_CONTAINS_OLD and md.n < DELETE_SIZE + HEADER:
            return self._python_heap(rec)
        if not _origin_ok(filt, rec):
            return
        if flags & DELETE_IS_SUPER:
            return self._python_heap(rec)
        if _drop(filt, loc, lsn) or (self.share is not None
                                     and _elsewhere(self, rec, loc, xid, lsn)):
            return
        old = _tuple(md, DELETE_SIZE) if flags & DELETE_CONTAINS_OLD else None
        queue_change(self, xid, lsn, _change(DELETE, rec, loc, old, None), 1)
    else:
        if (not _origin_ok(filt, rec)
                or _drop(filt, loc, lsn)
                or (self.share is not None and _elsewhere(self, rec, loc, xid, lsn))):
            return
        if md.n < UPDATE_SIZE:
            return self._python_heap(rec)
        flags = md.p[7]
        if flags & UPDATE_CONTAINS_OLD and md.n < UPDATE_SIZE + HEADER:
            return self._python_heap(rec)
        new = None
        if data:
            bd = payload(data)
            p = 0
            if flags & UPDATE_PREFIX_FROM_OLD:
                p += 2
            if flags & UPDATE_SUFFIX_FROM_OLD:
                p += 2
            if bd.n < p + HEADER:
                return self._python_heap(rec)
            if flags & UPDATE_CONTAINS_NEW_TUPLE:
                new = _tuple(bd, p)
        old = _tuple(md, UPDATE_SIZE) if flags & UPDATE_CONTAINS_OLD else None
        queue_change(self, xid, lsn, _change(UPDATE, rec, loc, old, new), 1)


def _heap2(self, rec):
    """See ``Decoder._heap2``: a MULTI_INSERT's tuples queued as INSERT changes; a layout
    ``heap2.parse`` would reject goes to the reference, which raises its error."""
    cdef Bytes md, bd
    cdef int flags, i
    cdef Py_ssize_t ntuples, count, p, dlen
    if _r(rec, R_INFO, "info") & HEAP2_OPMASK != OP_MULTI_INSERT:
        return
    blocks = _r(rec, R_BLOCKS, "blocks")
    main = _r(rec, R_MAIN_DATA, "main_data")
    if not blocks or not readable(main):
        return self._python_heap2(rec)
    blk = blocks[0]
    loc = blk.rlocator
    xid = _r(rec, R_XID, "xid")
    if loc.db != self.db_oid or foreign(self, xid):
        return
    md = payload(main)
    data = blk.data
    if md.n < MULTI_SIZE or (data is not None and not readable(data)):
        return self._python_heap2(rec)
    flags = md.p[0]
    ntuples = md.p[2] | (md.p[3] << 8)
    if not _r(rec, R_INFO, "info") & INIT_PAGE and md.n < MULTI_SIZE + 2 * ntuples:
        return self._python_heap2(rec)
    count = 0
    if data:  # every tuple header inside the block data, as heap2.parse checks
        bd = payload(data)
        p = 0
        for i in range(ntuples):
            p = (p + 1) & ~1
            if p + MULTI_TUPLE > bd.n:
                return self._python_heap2(rec)
            p += MULTI_TUPLE + (bd.p[p] | (bd.p[p + 1] << 8))
        if p > bd.n:
            return self._python_heap2(rec)
        count = ntuples
    if not flags & INSERT_CONTAINS_NEW_TUPLE:
        return
    stats = self.stats
    share = self.share
    lsn = _r(rec, R_LSN, "lsn")
    if lsn < self.skip_before:
        if share is None or not _elsewhere(self, rec, loc, xid, lsn):
            stats.cut_before_start += count
        return
    filt = self.filter
    if not _origin_ok(filt, rec) or _drop(filt, loc, lsn):
        return
    if share is not None and _elsewhere(self, rec, loc, xid, lsn, count,
                                        (flags & INSERT_LAST_IN_MULTI) != 0):
        return
    if count == 0:
        return
    rb = self.rb
    last_in_multi = flags & INSERT_LAST_IN_MULTI
    p = 0
    for i in range(count):
        p = (p + 1) & ~1
        dlen = bd.p[p] | (bd.p[p + 1] << 8)
        t = blank(WalTuple)
        put(t, CS.t_infomask2, bd.p[p + 2] | (bd.p[p + 3] << 8))
        put(t, CS.t_infomask, bd.p[p + 4] | (bd.p[p + 5] << 8))
        put(t, CS.t_hoff, bd.p[p + 6])
        p += MULTI_TUPLE
        put(t, CS.t_data, PyBytes_FromStringAndSize(<const char *> bd.p + p, dlen))
        p += dlen
        buffer_change(rb, xid, _change(INSERT, rec, loc, None, t, i,
                                       last_in_multi and i == count - 1))
    stats.changes += count
