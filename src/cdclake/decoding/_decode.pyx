# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twins of ``Decoder._heap`` and ``Decoder._heap2`` (:mod:`cdclake.decoding.decode`,
see :mod:`cdclake.native`): the heap INSERT, UPDATE, HOT_UPDATE and DELETE records of user
tables, and COPY's MULTI_INSERT, read from the record's bytes and queued as Changes, without
the parsed-record dataclasses of :mod:`cdclake.wal.rmgr` and without running
``Change.__init__`` or ``WalTuple.__init__`` (a Python frame each). A change goes into the
reorder buffer inline (``_buffer``: ``ReorderBuffer.queue``'s bookkeeping, the same sizes and
eviction).

Everything else goes to the Python reference (``Decoder._python_heap``, ``_python_heap2``)
unchanged: TRUNCATE, CONFIRM, pg_class inserts (catalog events), TOAST chunks, and any record
too short for its layout, whose WalCorruptError the reference raises. The gates run in the
reference's order, with the same filter calls, so both queue the same changes, which the
decoding suites check by running every test with both (and ``test_decode_twins.py`` record
by record).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize

from cdclake.wal._payload cimport Bytes, payload, readable

from cdclake.decoding.changes import (
    CHANGE_OVERHEAD as _CHANGE_OVERHEAD,
    DELETE,
    INSERT,
    SPEC_ABORT,
    SPEC_INSERT,
    UPDATE,
    Change,
)
from cdclake.decoding.reorder import TXN, ReorderBuffer
from cdclake.wal.record import WalTuple
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
cdef Py_ssize_t CHANGE_OVERHEAD = _CHANGE_OVERHEAD
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


cdef object _change(int action, rec, loc, old, new, int seq=0, bint clear_toast=True):
    c = Change.__new__(Change)
    c.action = action
    c.lsn = rec.lsn
    c.seq = seq
    c.locator = loc
    c.old = old
    c.new = new
    c.clear_toast = clear_toast
    c.origin = rec.origin
    c.payload = None
    return c


cdef _buffer(rb, xid, change):
    """``rb.queue(xid, change)``, inline for the ReorderBuffer itself: the same transaction
    entry, the same size (``Change.size``: the overhead plus the tuples' bytes) and the same
    eviction past work_mem."""
    cdef Py_ssize_t n
    if type(rb) is not ReorderBuffer:
        rb.queue(xid, change)
        return
    n = CHANGE_OVERHEAD
    if change.old is not None:
        n += len(change.old.data)
    if change.new is not None:
        n += len(change.new.data)
    by_txn = rb.by_txn
    t = by_txn.get(xid)
    if t is None:
        t = by_txn[xid] = TXN(xid, change.lsn)
    t.changes.append(change)
    t.size += n
    rb.size += n
    if rb.size > rb.work_mem:
        rb._evict()


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
        if (not flags & INSERT_IS_SPECULATIVE and self.share is not None
                and self._elsewhere(rec, loc)):
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
        if filt.drop_locator(loc, rec.lsn) or (self.share is not None
                                                and self._elsewhere(rec, loc)):
            return
        old = _tuple(md, DELETE_SIZE) if flags & DELETE_CONTAINS_OLD else None
        _queue(self, rec, _change(DELETE, rec, loc, old, None))
    else:
        if (not filt.origin_ok(rec.origin) or filt.drop_locator(loc, rec.lsn)
                or (self.share is not None and self._elsewhere(rec, loc))):
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
    cdef bint mine = self.share is None or self._mine(rec)
    if rec.lsn < self.skip_before:
        stats.cut_before_start += mine
        return
    _buffer(self.rb, rec.xid, change)
    stats.changes += mine


def _heap2(self, rec):
    """See ``Decoder._heap2``: a MULTI_INSERT's tuples queued as INSERT changes; a layout
    ``heap2.parse`` would reject goes to the reference, which raises its error."""
    cdef Bytes md, bd
    cdef int flags, i
    cdef Py_ssize_t ntuples, count, p, dlen
    if rec.info & HEAP2_OPMASK != OP_MULTI_INSERT:
        return
    blocks = rec.blocks
    main = rec.main_data
    if not blocks or not readable(main):
        return self._python_heap2(rec)
    blk = blocks[0]
    loc = blk.rlocator
    if loc.db != self.db_oid or _foreign(self, rec.xid):
        return
    md = payload(main)
    data = blk.data
    if md.n < MULTI_SIZE or (data is not None and not readable(data)):
        return self._python_heap2(rec)
    flags = md.p[0]
    ntuples = md.p[2] | (md.p[3] << 8)
    if not rec.info & INIT_PAGE and md.n < MULTI_SIZE + 2 * ntuples:
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
    if rec.lsn < self.skip_before:
        if share is None or not self._elsewhere(rec, loc):
            stats.cut_before_start += count
        return
    filt = self.filter
    if not filt.origin_ok(rec.origin) or filt.drop_locator(loc, rec.lsn):
        return
    if share is not None and self._elsewhere(rec, loc, count,
                                             bool(flags & INSERT_LAST_IN_MULTI)):
        return
    if count == 0:
        return
    rb = self.rb
    xid = rec.xid
    last_in_multi = flags & INSERT_LAST_IN_MULTI
    p = 0
    for i in range(count):
        p = (p + 1) & ~1
        dlen = bd.p[p] | (bd.p[p + 1] << 8)
        t = WalTuple.__new__(WalTuple)
        t.infomask2 = bd.p[p + 2] | (bd.p[p + 3] << 8)
        t.infomask = bd.p[p + 4] | (bd.p[p + 5] << 8)
        t.t_hoff = bd.p[p + 6]
        p += MULTI_TUPLE
        t.data = PyBytes_FromStringAndSize(<const char *> bd.p + p, dlen)
        p += dlen
        _buffer(rb, xid, _change(INSERT, rec, loc, None, t, i,
                                 last_in_multi and i == count - 1))
    stats.changes += count
