"""What the heap rmgrs' records do to a decoder (PostgreSQL's heap_decode and heap2_decode): an
INSERT, UPDATE, DELETE or COPY's MULTI_INSERT of a user table queues its rows as changes, a
speculative insert and its confirmation or abort queue theirs, a TOAST chunk is buffered for
reassembly, a TRUNCATE queues the relations it empties, and a pg_class row goes to the
catalog tracker.

The cheapest gates run first, in PostgreSQL's order: gate 1 (another database) from the block
reference alone, before the record is parsed; whose transaction it is (:mod:`queueing`'s
``foreign``); gate 2 (a replication origin); gates 3-4 (a relation not wanted, where already
decidable). A row another decoder emits is not parsed (``elsewhere``). Fields and tuples are
read with the heap rmgrs' own readers (``wal/rmgr/heap.py``, ``heap2.py``), which raise a
WalCorruptError where a record is malformed.

Written once for both decoders: :func:`decode_heap` and :func:`decode_heap2` are the
:class:`~cdclake.decoding.decode.Decoder`'s handlers (``_heap``, ``_heap2``), compiled as
themselves (Cython's pure-Python mode, ``_heapdecode.pxd``): there a record the reader built is
read at its slots, the gates and the buffer are asked as C, and a change is built without
running ``Change.__init__`` (a Python frame per change: ``spill.new_change``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from cdclake.decoding.changes import (
    DELETE,
    INSERT,
    SPEC_ABORT,
    SPEC_CONFIRM,
    SPEC_INSERT,
    TOAST_CHUNK,
    TRUNCATE,
    UPDATE,
    ToastChunk,
    Truncate,
)
from cdclake.decoding.filter import Filter
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.walclass import PgClassTracker
from cdclake.tuples.varlena import toast_chunk
from cdclake.wal.record import RelFileLocator, XLogRecord
from cdclake.wal.rmgr import heap, heap2
from cdclake.wal.rmgr.heap import (
    SIZE_OF_DELETE,
    SIZE_OF_UPDATE,
    XLH_DELETE_CONTAINS_OLD,
    XLH_DELETE_IS_SUPER,
    XLH_INSERT_CONTAINS_NEW_TUPLE,
    XLH_INSERT_IS_SPECULATIVE,
    XLH_INSERT_LAST_IN_MULTI,
    XLH_INSERT_ON_TOAST_RELATION,
    XLH_TRUNCATE_CASCADE,
    XLH_TRUNCATE_RESTART_SEQS,
    XLH_UPDATE_CONTAINS_NEW_TUPLE,
    XLH_UPDATE_CONTAINS_OLD,
    XLOG_HEAP_CONFIRM,
    XLOG_HEAP_DELETE,
    XLOG_HEAP_HOT_UPDATE,
    XLOG_HEAP_INSERT,
    XLOG_HEAP_OPMASK,
    XLOG_HEAP_TRUNCATE,
    XLOG_HEAP_UPDATE,
)
from cdclake.wal.rmgr.heap2 import XLOG_HEAP2_MULTI_INSERT, XLOG_HEAP2_OPMASK

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.catalog._versions import is_pg_class
    from cython.cimports.cdclake.decoding._filter import drop_locator, origin_ok
    from cython.cimports.cdclake.decoding._queueing import (
        buffer_change,
        elsewhere,
        foreign,
        queue_change,
    )
    from cython.cimports.cdclake.decoding._spill import new_change
    from cython.cimports.cdclake.wal._slots import field_of, offset
    from cython.cimports.cdclake.wal.rmgr._heap import (
        delete_fields,
        insert_fields,
        tuple_at,
        update_fields,
    )
    from cython.cimports.cdclake.wal.rmgr._heap2 import multi_fields, multi_tuples
else:
    from cdclake.catalog.versions import is_pg_class
    from cdclake.decoding.filter import drop_locator, origin_ok
    from cdclake.decoding.queueing import buffer_change, elsewhere, foreign, queue_change
    from cdclake.decoding.spill import new_change
    from cdclake.wal.primitives import field_of
    from cdclake.wal.rmgr.heap import delete_fields, insert_fields, tuple_at, update_fields
    from cdclake.wal.rmgr.heap2 import multi_fields, multi_tuples


class Counts(Protocol):
    """The statistics the heap records count in (``DecodeStats``)."""

    changes: int
    cut_before_start: int


class Decoder(Protocol):
    """What the heap records read of a decoder (:class:`~cdclake.decoding.decode.Decoder`)."""

    db_oid: int
    version: int
    skip_before: int
    rb: ReorderBuffer
    filter: Filter
    tracker: Any
    owns: Callable[[int], bool] | None
    share: Callable[[int, int], bool] | None

    @property
    def stats(self) -> Counts: ...


if cython.compiled:  # where XLogRecord holds its fields (wal/_slots.pxd)
    R_LSN = offset(XLogRecord, "lsn")
    R_XID = offset(XLogRecord, "xid")
    R_ORIGIN = offset(XLogRecord, "origin")
    R_INFO = offset(XLogRecord, "info")
    R_MAIN_DATA = offset(XLogRecord, "main_data")
    R_BLOCKS = offset(XLogRecord, "blocks")
else:  # read by name
    R_LSN = R_XID = R_ORIGIN = R_INFO = R_MAIN_DATA = R_BLOCKS = 0


def _origin_ok(filt: Filter, origin: int) -> bool:
    """Gate 2; for the Filter itself, the function its method is (as C where compiled)."""
    if type(filt) is Filter:
        return origin_ok(filt, origin)
    return filt.origin_ok(origin)


def _drop(filt: Filter, loc: RelFileLocator, lsn: int) -> bool:
    """Gates 3-4 where already decidable; for the Filter itself, the function its method is."""
    if type(filt) is Filter:
        return drop_locator(filt, loc, lsn)
    return filt.drop_locator(loc, lsn)


def _is_pg_class(tracker: Any, loc: RelFileLocator) -> bool:
    """``tracker.is_pg_class(loc)``, asked of every INSERT, UPDATE and DELETE; for the
    PgClassTracker, the function its method calls."""
    if type(tracker) is PgClassTracker:
        return is_pg_class(tracker.dictionary.pg_class_loc, loc)
    return tracker.is_pg_class(loc)  # type: ignore[no-any-return]


def decode_heap(decoder: Decoder, rec: XLogRecord) -> None:
    """A record of the heap rmgr (see the module's docstring)."""
    op = field_of(rec, XLogRecord, R_INFO, "info") & XLOG_HEAP_OPMASK
    if op == XLOG_HEAP_TRUNCATE:
        _truncate(decoder, rec)
        return
    if op not in (XLOG_HEAP_INSERT, XLOG_HEAP_UPDATE, XLOG_HEAP_HOT_UPDATE, XLOG_HEAP_DELETE,
                  XLOG_HEAP_CONFIRM):
        return
    blocks = field_of(rec, XLogRecord, R_BLOCKS, "blocks")
    blk = blocks[0] if blocks else heap.first_block(rec, op)
    loc = blk.rlocator
    if loc.db != decoder.db_oid:  # gate 1, before parsing
        return
    tracker = decoder.tracker
    if tracker is not None and _is_pg_class(tracker, loc):
        _pg_class(decoder, rec, op)
        return
    xid = field_of(rec, XLogRecord, R_XID, "xid")
    if foreign(decoder, xid):
        return
    lsn = field_of(rec, XLogRecord, R_LSN, "lsn")
    origin = field_of(rec, XLogRecord, R_ORIGIN, "origin")
    filt = decoder.filter
    md = field_of(rec, XLogRecord, R_MAIN_DATA, "main_data")
    if op == XLOG_HEAP_INSERT:
        data = blk.data
        _offnum, flags = insert_fields(rec, md, data)
        if not flags & XLH_INSERT_CONTAINS_NEW_TUPLE or not _origin_ok(filt, origin):
            return
        if flags & XLH_INSERT_ON_TOAST_RELATION:
            _toast_chunk(decoder, rec, xid, lsn, origin, loc, tuple_at(data, 0))
            return
        if _drop(filt, loc, lsn):  # gates 3-4 where already decidable
            return
        speculative = flags & XLH_INSERT_IS_SPECULATIVE
        share = decoder.share
        if not speculative and share is not None and elsewhere(decoder, xid, lsn, origin, loc):
            return
        new = tuple_at(data, 0) if data is not None and len(data) else None
        queue_change(decoder, xid, lsn,
                     new_change(SPEC_INSERT if speculative else INSERT, lsn, 0, loc, None, new,
                                True, origin),
                     -1 if speculative and share is not None else 1)
    elif op in (XLOG_HEAP_UPDATE, XLOG_HEAP_HOT_UPDATE):
        if (not _origin_ok(filt, origin) or _drop(filt, loc, lsn)
                or (decoder.share is not None and elsewhere(decoder, xid, lsn, origin, loc))):
            return
        data = blk.data
        (_old_xmax, _old_off, _old_bits, flags, _new_xmax, _new_off, _prefix, _suffix,
         at) = update_fields(rec, op, md, data)
        new = (tuple_at(data, at) if at >= 0 and flags & XLH_UPDATE_CONTAINS_NEW_TUPLE
               else None)
        old = tuple_at(md, SIZE_OF_UPDATE) if flags & XLH_UPDATE_CONTAINS_OLD else None
        queue_change(decoder, xid, lsn, new_change(UPDATE, lsn, 0, loc, old, new, True, origin),
                     1)
    elif op == XLOG_HEAP_DELETE:
        if not _origin_ok(filt, origin):
            return
        _xmax, _offnum, _bits, flags = delete_fields(rec, md)
        if flags & XLH_DELETE_IS_SUPER:  # a speculative insert's abort
            queue_change(decoder, xid, lsn,
                         new_change(SPEC_ABORT, lsn, 0, loc, None, None, True, origin))
            return
        if _drop(filt, loc, lsn) or (decoder.share is not None
                                     and elsewhere(decoder, xid, lsn, origin, loc)):
            return
        old = tuple_at(md, SIZE_OF_DELETE) if flags & XLH_DELETE_CONTAINS_OLD else None
        queue_change(decoder, xid, lsn, new_change(DELETE, lsn, 0, loc, old, None, True, origin),
                     1)
    elif _origin_ok(filt, origin):  # a speculative insert's confirmation
        queue_change(decoder, xid, lsn,
                     new_change(SPEC_CONFIRM, lsn, 0, loc, None, None, True, origin))


def _toast_chunk(decoder: Decoder, rec: XLogRecord, xid: int, lsn: int, origin: int,
                 loc: RelFileLocator, tup: object) -> None:
    """A TOAST chunk inserted: buffered for reassembly (every decoder of a parallel decode
    buffers it); its transaction now has chunks pending."""
    value_id, seq, data = toast_chunk(tup)  # type: ignore[arg-type]
    queue_change(decoder, xid, lsn,
                 new_change(TOAST_CHUNK, lsn, 0, loc, None, None, False, origin,
                            ToastChunk(value_id, seq, data)))
    if lsn >= decoder.skip_before:
        decoder.rb.by_txn[xid].toast_pending = True


def _truncate(decoder: Decoder, rec: XLogRecord) -> None:
    """A TRUNCATE: the relations it empties, by oid (decided at commit)."""
    t = heap.parse(rec)
    assert isinstance(t, heap.HeapTruncate)
    xid = field_of(rec, XLogRecord, R_XID, "xid")
    origin = field_of(rec, XLogRecord, R_ORIGIN, "origin")
    if (t.db_id != decoder.db_oid or not _origin_ok(decoder.filter, origin)
            or foreign(decoder, xid)):
        return
    lsn = field_of(rec, XLogRecord, R_LSN, "lsn")
    queue_change(decoder, xid, lsn,
                 new_change(TRUNCATE, lsn, 0, None, None, None, False, origin,
                            Truncate(t.relids, bool(t.flags & XLH_TRUNCATE_CASCADE),
                                     bool(t.flags & XLH_TRUNCATE_RESTART_SEQS))))


def _pg_class(decoder: Decoder, rec: XLogRecord, op: int) -> None:
    """A pg_class row inserted, updated or deleted, in any decoder's transaction: what it
    tells the dictionary is applied if the transaction commits (``walclass``)."""
    if op == XLOG_HEAP_CONFIRM:
        return
    parsed = heap.parse(rec)
    if op == XLOG_HEAP_INSERT:
        event = decoder.tracker.pg_class_insert(rec, parsed)
    else:
        event = decoder.tracker.pg_class_change(rec, parsed)
    if event is not None:
        decoder.rb.txn(rec.xid, rec.lsn).ddl.append((rec.lsn, event))


def decode_heap2(decoder: Decoder, rec: XLogRecord) -> None:
    """A record of the heap2 rmgr: of those, decoding reads COPY's MULTI_INSERT, whose rows
    are queued as INSERTs (the last one's ``clear_toast`` says whether it ends the
    multi-insert)."""
    info = field_of(rec, XLogRecord, R_INFO, "info")
    if info & XLOG_HEAP2_OPMASK != XLOG_HEAP2_MULTI_INSERT:
        return
    blocks = field_of(rec, XLogRecord, R_BLOCKS, "blocks")
    blk = blocks[0] if blocks else heap2.first_block(rec)
    loc = blk.rlocator
    xid = field_of(rec, XLogRecord, R_XID, "xid")
    if loc.db != decoder.db_oid or foreign(decoder, xid):
        return
    data = blk.data
    md = field_of(rec, XLogRecord, R_MAIN_DATA, "main_data")
    flags, _ntuples, count = multi_fields(rec, info, md, data)
    if not flags & XLH_INSERT_CONTAINS_NEW_TUPLE:
        return
    lsn = field_of(rec, XLogRecord, R_LSN, "lsn")
    origin = field_of(rec, XLogRecord, R_ORIGIN, "origin")
    share = decoder.share
    if lsn < decoder.skip_before:
        if share is None or not elsewhere(decoder, xid, lsn, origin, loc):
            decoder.stats.cut_before_start += count
        return
    filt = decoder.filter
    if not _origin_ok(filt, origin) or _drop(filt, loc, lsn):
        return
    last_in_multi = (flags & XLH_INSERT_LAST_IN_MULTI) != 0
    if share is not None and elsewhere(decoder, xid, lsn, origin, loc, count, last_in_multi):
        return
    if count == 0:
        return
    rb = decoder.rb
    tuples = multi_tuples(data, count)
    for i in range(count):
        buffer_change(rb, xid, new_change(INSERT, lsn, i, loc, None, tuples[i],
                                          last_in_multi and i == count - 1, origin))
    decoder.stats.changes += count
