"""Heap2 resource manager records (access/heapam_xlog.h): multi-insert and new-cid.

A MULTI_INSERT's fields and tuples are read by :func:`multi_fields` and :func:`multi_tuples`,
once for every reader: ``parse`` makes them a :class:`MultiInsert`, and the decoder queues
its rows from them as they are (:mod:`cdclake.decoding.heapdecode`). This file is compiled as
itself (Cython's pure-Python mode, ``_heap2.pxd``), the fields read with the reader's
primitives (:mod:`cdclake.wal.primitives`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake import native
from cdclake.errors import WalCorruptError
from cdclake.wal.record import BlockRef, RelFileLocator, WalTuple, XLogRecord
from cdclake.wal.rmgr.heap import XLOG_HEAP_INIT_PAGE

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.wal._primitives import (
        bytes_of,
        contiguous,
        need,
        new_tuple,
        span,
        u8,
        u16,
    )
else:
    from cdclake.wal.primitives import bytes_of, contiguous, need, new_tuple, span, u8, u16

Bytes = bytes | memoryview

XLOG_HEAP2_REWRITE = 0x00
XLOG_HEAP2_PRUNE = 0x10  # 17+: PRUNE_ON_ACCESS
XLOG_HEAP2_VACUUM = 0x20  # 17+: PRUNE_VACUUM_SCAN
XLOG_HEAP2_FREEZE_PAGE = 0x30  # 17+: PRUNE_VACUUM_CLEANUP
XLOG_HEAP2_VISIBLE = 0x40
XLOG_HEAP2_MULTI_INSERT = 0x50
XLOG_HEAP2_LOCK_UPDATED = 0x60
XLOG_HEAP2_NEW_CID = 0x70
XLOG_HEAP2_OPMASK = 0x70

#: xl_heap_multi_insert: flags, pad, ntuples (offsets follow unless INIT_PAGE); each
#: xl_multi_insert_tuple: datalen, t_infomask2, t_infomask, t_hoff, then the tuple's bytes
SIZE_OF_MULTI = 4
SIZE_OF_MULTI_TUPLE = 7
_NEWCID = struct.Struct("<IIII12sHHH")  # top_xid, cmin, cmax, combocid, locator, ctid


@dataclass(slots=True)
class MultiInsert:
    rlocator: RelFileLocator
    blkno: int
    flags: int
    ntuples: int
    offsets: tuple[int, ...]
    tuples: list[WalTuple]


@dataclass(slots=True)
class NewCid:
    top_xid: int
    cmin: int
    cmax: int
    combocid: int
    rlocator: RelFileLocator
    ctid: tuple[int, int]


def _malformed(rec: XLogRecord, exc: Exception) -> WalCorruptError:
    return WalCorruptError(f"malformed Heap2 record: {exc}", segment=rec.segment, lsn=rec.lsn)


def multi_fields(rec: XLogRecord, info: int, md: Bytes, data: Bytes | None
                 ) -> tuple[int, int, int]:
    """A MULTI_INSERT's flags, its ntuples, and how many tuples its block ``data`` logs
    (ntuples, or 0 without data), its layout checked: the offsets in the main data ``md``
    unless the page is new (INIT_PAGE), every tuple's header and bytes inside ``data``."""
    try:
        md = contiguous(md)
        b = bytes_of(md)
        n = len(md)
        need(SIZE_OF_MULTI, n)
        flags = u8(b, 0, n)
        ntuples = u16(b, 2, n)
        if not info & XLOG_HEAP_INIT_PAGE:
            need(SIZE_OF_MULTI + 2 * ntuples, n)
        if data is None or not len(data):
            return flags, ntuples, 0
        data = contiguous(data)
        d = bytes_of(data)
        k = len(data)
        p = 0
        for _i in range(ntuples):
            p = (p + 1) & ~1  # each xl_multi_insert_tuple is SHORTALIGNed
            need(p + SIZE_OF_MULTI_TUPLE, k)
            p += SIZE_OF_MULTI_TUPLE + u16(d, p, k)
        if p > k:
            raise IndexError("multi-insert tuples run past the block data")
        return flags, ntuples, ntuples
    except IndexError as exc:
        raise _malformed(rec, exc) from None


def multi_tuples(data: Bytes, count: int) -> list[WalTuple]:
    """The first ``count`` tuples of a MULTI_INSERT's block ``data``, whose layout
    :func:`multi_fields` has checked."""
    data = contiguous(data)
    d = bytes_of(data)
    k = len(data)
    tuples = []
    p = 0
    for _i in range(count):
        p = (p + 1) & ~1
        dlen = u16(d, p, k)
        at = p + SIZE_OF_MULTI_TUPLE
        tuples.append(new_tuple(u16(d, p + 2, k), u16(d, p + 4, k), u8(d, p + 6, k),
                                span(d, at, at + dlen)))
        p = at + dlen
    return tuples


def first_block(rec: XLogRecord) -> BlockRef:
    """The record's block reference (the heap page it fills): one without is malformed."""
    if not rec.blocks:
        raise _malformed(rec, IndexError("no block reference"))
    return rec.blocks[0]


def parse(rec: XLogRecord, version: int = 15) -> object | None:
    op = rec.info & XLOG_HEAP2_OPMASK
    md = rec.main_data
    if op == XLOG_HEAP2_MULTI_INSERT:
        b = first_block(rec)
        flags, n, count = multi_fields(rec, rec.info, md, b.data)
        offsets: tuple[int, ...] = ()
        if not rec.info & XLOG_HEAP_INIT_PAGE:
            offsets = struct.unpack_from(f"<{n}H", md, SIZE_OF_MULTI)
        tuples = multi_tuples(b.data, count) if count and b.data is not None else []
        return MultiInsert(b.rlocator, b.blkno, flags, n, offsets, tuples)
    try:
        if op == XLOG_HEAP2_NEW_CID:
            top, cmin, cmax, combo, loc, bhi, blo, off = _NEWCID.unpack_from(md, 0)
            return NewCid(top, cmin, cmax, combo, RelFileLocator(*struct.unpack("<III", loc)),
                          ((bhi << 16) | blo, off))
    except (struct.error, IndexError) as exc:
        raise _malformed(rec, exc) from None
    return None


if not cython.compiled:  # Python's readers (waldump) read them as C too
    multi_fields = native.twin(multi_fields, "cdclake.wal.rmgr._heap2")
    multi_tuples = native.twin(multi_tuples, "cdclake.wal.rmgr._heap2")
