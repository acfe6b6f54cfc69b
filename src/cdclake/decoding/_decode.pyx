# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of ``Decoder._heap`` (:mod:`cdclake.decoding.decode`, see
:mod:`cdclake.native`): the heap INSERT, UPDATE, HOT_UPDATE and DELETE records of user tables,
read from the record's bytes and queued as a Change, without the parsed-record dataclasses of
:mod:`cdclake.wal.rmgr.heap` and without running ``Change.__init__`` or ``WalTuple.__init__``
(a Python frame each).

Everything else goes to the Python reference (``Decoder._python_heap``) unchanged: TRUNCATE,
CONFIRM, pg_class inserts (catalog events), TOAST chunks, and any record too short for its
layout, whose WalCorruptError the reference raises. The gates run in the reference's order,
with the same filter calls, so both queue the same changes, which the decoding suites check
by running every test with both.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize

from cdclake.wal._payload cimport Bytes, payload, readable

from cdclake.decoding.changes import DELETE, INSERT, SPEC_ABORT, SPEC_INSERT, UPDATE, Change
from cdclake.wal.record import WalTuple
from cdclake.wal.rmgr import heap


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
cdef int HEADER = 5  # xl_heap_header: t_infomask2, t_infomask, t_hoff
cdef int INSERT_SIZE = 3  # xl_heap_insert: offnum, flags
cdef int DELETE_SIZE = 8  # xl_heap_delete: xmax, offnum, infobits_set, flags
cdef int UPDATE_SIZE = 14  # xl_heap_update: old_xmax, old_offnum, old_infobits, flags, ...


cdef object _tuple(Bytes b, Py_ssize_t off):
    """wal_tuple: xl_heap_header at ``off``, then the tuple's bytes from t_bits on."""
    t = WalTuple.__new__(WalTuple)
    t.infomask2 = b.p[off] | (b.p[off + 1] << 8)
    t.infomask = b.p[off + 2] | (b.p[off + 3] << 8)
    t.t_hoff = b.p[off + 4]
    t.data = PyBytes_FromStringAndSize(<const char *> b.p + off + HEADER, b.n - off - HEADER)
    return t


cdef object _change(int action, rec, loc, old, new):
    c = Change.__new__(Change)
    c.action = action
    c.lsn = rec.lsn
    c.seq = 0
    c.locator = loc
    c.old = old
    c.new = new
    c.clear_toast = True
    c.origin = rec.origin
    c.payload = None
    return c


def _heap(self, rec):
    """See ``Decoder._heap``."""
    cdef int op = rec.info & OPMASK
    cdef int flags
    cdef Bytes md, bd
    cdef Py_ssize_t p
    if op != OP_INSERT and op != OP_UPDATE and op != OP_HOT_UPDATE and op != OP_DELETE:
        return self._python_heap(rec)
    blocks = rec.blocks
    main = rec.main_data
    if not blocks or not readable(main):
        return self._python_heap(rec)
    blk = blocks[0]
    loc = blk.rlocator
    if loc.db != self.db_oid:  # gate 1, before parsing
        return
    xid = rec.xid
    if op == OP_INSERT:
        tracker = self.tracker
        if tracker is not None and tracker.is_pg_class(loc.spc, loc.rel):
            return self._python_heap(rec)
    if _foreign(self, xid):
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
        if not flags & INSERT_CONTAINS_NEW_TUPLE or not filt.origin_ok(rec.origin):
            return
        if flags & INSERT_ON_TOAST_RELATION:
            return self._python_heap(rec)
        if filt.drop_locator(loc, rec.lsn):  # gates 3-4 where already decidable
            return
        new = _tuple(payload(data), 0) if data else None
        _queue(self, rec, _change(SPEC_INSERT if flags & INSERT_IS_SPECULATIVE else INSERT,
                                  rec, loc, None, new))
    elif op == OP_DELETE:
        if md.n < DELETE_SIZE:
            return self._python_heap(rec)
        flags = md.p[7]
        if flags & DELETE_CONTAINS_OLD and md.n < DELETE_SIZE + HEADER:
            return self._python_heap(rec)
        if not filt.origin_ok(rec.origin):
            return
        if flags & DELETE_IS_SUPER:
            return self._python_heap(rec)
        if filt.drop_locator(loc, rec.lsn):
            return
        old = _tuple(md, DELETE_SIZE) if flags & DELETE_CONTAINS_OLD else None
        _queue(self, rec, _change(DELETE, rec, loc, old, None))
    else:
        if not filt.origin_ok(rec.origin) or filt.drop_locator(loc, rec.lsn):
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
        _queue(self, rec, _change(UPDATE, rec, loc, old, new))


cdef bint _foreign(self, xid) except -1:
    """See ``Decoder._foreign``."""
    owns = self.owns
    if owns is None:
        return False
    t = self.rb.by_txn.get(xid)
    return not owns(t.top if t is not None and t.top else xid)


cdef _queue(self, rec, change):
    """See ``Decoder._queue``."""
    stats = self.stats
    if rec.lsn < self.skip_before:
        stats.cut_before_start += 1
        return
    self.rb.queue(rec.xid, change)
    stats.changes += 1
