"""Heap resource manager records (access/heapam_xlog.h): insert, delete, update, truncate...

An INSERT's, a DELETE's and an UPDATE's fields and tuples are read by the functions below
(``insert_fields``, ``delete_fields``, ``update_fields``, ``tuple_at``), once for every
reader: ``parse`` makes them a dataclass, and the decoder queues changes from them as they are
(:mod:`cdclake.decoding.heapdecode`). This file is compiled as itself (Cython's pure-Python
mode, ``_heap.pxd``): the fields are read through the record's bytes with the reader's
primitives (:mod:`cdclake.wal.primitives`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake import native
from cdclake.errors import WalCorruptError
from cdclake.wal.record import BlockRef, RelFileLocator, WalTuple, XLogRecord

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
        u32,
    )
else:
    from cdclake.wal.primitives import bytes_of, contiguous, need, new_tuple, span, u8, u16, u32

Bytes = bytes | memoryview

XLOG_HEAP_INSERT = 0x00
XLOG_HEAP_DELETE = 0x10
XLOG_HEAP_UPDATE = 0x20
XLOG_HEAP_TRUNCATE = 0x30
XLOG_HEAP_HOT_UPDATE = 0x40
XLOG_HEAP_CONFIRM = 0x50
XLOG_HEAP_LOCK = 0x60
XLOG_HEAP_INPLACE = 0x70
XLOG_HEAP_OPMASK = 0x70
XLOG_HEAP_INIT_PAGE = 0x80

XLH_INSERT_ALL_VISIBLE_CLEARED = 0x01
XLH_INSERT_LAST_IN_MULTI = 0x02
XLH_INSERT_IS_SPECULATIVE = 0x04
XLH_INSERT_CONTAINS_NEW_TUPLE = 0x08
XLH_INSERT_ON_TOAST_RELATION = 0x10
XLH_INSERT_ALL_FROZEN_SET = 0x20

XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED = 0x01
XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED = 0x02
XLH_UPDATE_CONTAINS_OLD_TUPLE = 0x04
XLH_UPDATE_CONTAINS_OLD_KEY = 0x08
XLH_UPDATE_CONTAINS_NEW_TUPLE = 0x10
XLH_UPDATE_PREFIX_FROM_OLD = 0x20
XLH_UPDATE_SUFFIX_FROM_OLD = 0x40
XLH_UPDATE_CONTAINS_OLD = XLH_UPDATE_CONTAINS_OLD_TUPLE | XLH_UPDATE_CONTAINS_OLD_KEY

XLH_DELETE_ALL_VISIBLE_CLEARED = 0x01
XLH_DELETE_CONTAINS_OLD_TUPLE = 0x02
XLH_DELETE_CONTAINS_OLD_KEY = 0x04
XLH_DELETE_IS_SUPER = 0x08
XLH_DELETE_IS_PARTITION_MOVE = 0x10
XLH_DELETE_CONTAINS_OLD = XLH_DELETE_CONTAINS_OLD_TUPLE | XLH_DELETE_CONTAINS_OLD_KEY

XLH_TRUNCATE_CASCADE = 0x01
XLH_TRUNCATE_RESTART_SEQS = 0x02

OPNAMES = {XLOG_HEAP_INSERT: "INSERT", XLOG_HEAP_DELETE: "DELETE", XLOG_HEAP_UPDATE: "UPDATE",
           XLOG_HEAP_TRUNCATE: "TRUNCATE", XLOG_HEAP_HOT_UPDATE: "HOT_UPDATE",
           XLOG_HEAP_CONFIRM: "HEAP_CONFIRM", XLOG_HEAP_LOCK: "LOCK",
           XLOG_HEAP_INPLACE: "INPLACE"}

#: sizes of the fixed parts: xl_heap_header (t_infomask2, t_infomask, t_hoff); xl_heap_insert
#: (offnum, flags); xl_heap_delete (xmax, offnum, infobits_set, flags); xl_heap_update
#: (old_xmax, old_offnum, old_infobits, flags, new_xmax, new_offnum)
SIZE_OF_HEADER = 5
SIZE_OF_INSERT = 3
SIZE_OF_DELETE = 8
SIZE_OF_UPDATE = 14
_TRUNC = struct.Struct("<IIB")  # dbId, nrelids, flags (relids at offset 12)


@dataclass(slots=True)
class HeapInsert:
    rlocator: RelFileLocator
    blkno: int
    offnum: int
    flags: int
    tuple: WalTuple | None


@dataclass(slots=True)
class HeapDelete:
    rlocator: RelFileLocator
    blkno: int
    xmax: int
    offnum: int
    infobits: int
    flags: int
    old_tuple: WalTuple | None


@dataclass(slots=True)
class HeapUpdate:
    hot: bool
    rlocator: RelFileLocator
    blkno: int
    old_xmax: int
    old_offnum: int
    old_infobits: int
    flags: int
    new_xmax: int
    new_offnum: int
    old_tuple: WalTuple | None
    new_tuple: WalTuple | None
    prefix_len: int
    suffix_len: int


@dataclass(slots=True)
class HeapTruncate:
    db_id: int
    flags: int
    relids: tuple[int, ...]


@dataclass(slots=True)
class HeapConfirm:
    rlocator: RelFileLocator
    blkno: int
    offnum: int


@dataclass(slots=True)
class HeapInplace:
    rlocator: RelFileLocator
    blkno: int
    offnum: int


def tuple_at(src: Bytes, at: int) -> WalTuple:
    """The tuple logged at ``at`` to the end of ``src`` (DecodeXLogTuple): its xl_heap_header,
    then its bytes from t_bits on; an IndexError where the header is cut off."""
    src = contiguous(src)
    b = bytes_of(src)
    n = len(src)
    return new_tuple(u16(b, at, n), u16(b, at + 2, n), u8(b, at + 4, n),
                     span(b, at + SIZE_OF_HEADER, n))


def _malformed(rec: XLogRecord, op: int, exc: Exception) -> WalCorruptError:
    return WalCorruptError(f"malformed heap {OPNAMES[op]} record: {exc}", segment=rec.segment,
                           lsn=rec.lsn)


def insert_fields(rec: XLogRecord, md: Bytes, data: Bytes | None) -> tuple[int, int]:
    """An INSERT's offnum and flags, its layout checked: the fixed part in the main data
    ``md``, a whole tuple header in the block ``data`` if any (a TOAST chunk's must be)."""
    try:
        md = contiguous(md)
        b = bytes_of(md)
        n = len(md)
        need(SIZE_OF_INSERT, n)
        flags = u8(b, 2, n)
        if data is not None and len(data):
            need(SIZE_OF_HEADER, len(data))
        elif flags & XLH_INSERT_ON_TOAST_RELATION and flags & XLH_INSERT_CONTAINS_NEW_TUPLE:
            raise IndexError("a TOAST chunk's tuple is not logged")
        return u16(b, 0, n), flags
    except IndexError as exc:
        raise _malformed(rec, XLOG_HEAP_INSERT, exc) from None


def delete_fields(rec: XLogRecord, md: Bytes) -> tuple[int, int, int, int]:
    """A DELETE's xmax, offnum, infobits and flags, its layout checked: the fixed part, then
    the old tuple's header where the flags say it is logged."""
    try:
        md = contiguous(md)
        b = bytes_of(md)
        n = len(md)
        need(SIZE_OF_DELETE, n)
        flags = u8(b, 7, n)
        if flags & XLH_DELETE_CONTAINS_OLD:
            need(SIZE_OF_DELETE + SIZE_OF_HEADER, n)
        return u32(b, 0, n), u16(b, 4, n), u8(b, 6, n), flags
    except IndexError as exc:
        raise _malformed(rec, XLOG_HEAP_DELETE, exc) from None


def update_fields(rec: XLogRecord, op: int, md: Bytes, data: Bytes | None
                  ) -> tuple[int, int, int, int, int, int, int, int, int]:
    """An UPDATE's or a HOT_UPDATE's old_xmax, old_offnum, old_infobits, flags, new_xmax,
    new_offnum, prefix and suffix lengths, and where the new tuple starts in the block
    ``data`` (-1: no data), its layout checked: the fixed part, the old tuple's header where the
    flags say it is logged, the new one's after the prefix and suffix lengths."""
    try:
        md = contiguous(md)
        b = bytes_of(md)
        n = len(md)
        need(SIZE_OF_UPDATE, n)
        flags = u8(b, 7, n)
        if flags & XLH_UPDATE_CONTAINS_OLD:
            need(SIZE_OF_UPDATE + SIZE_OF_HEADER, n)
        prefix = suffix = 0
        at = -1
        if data is not None and len(data):
            data = contiguous(data)
            d = bytes_of(data)
            k = len(data)
            at = 0
            if flags & XLH_UPDATE_PREFIX_FROM_OLD:
                prefix = u16(d, 0, k)
                at = 2
            if flags & XLH_UPDATE_SUFFIX_FROM_OLD:
                suffix = u16(d, at, k)
                at += 2
            need(at + SIZE_OF_HEADER, k)
        return (u32(b, 0, n), u16(b, 4, n), u8(b, 6, n), flags, u32(b, 8, n), u16(b, 12, n),
                prefix, suffix, at)
    except IndexError as exc:
        raise _malformed(rec, op, exc) from None


def parse(rec: XLogRecord) -> object | None:
    """The record as a dataclass (HeapInsert, HeapUpdate, ...; None for the other kinds), its
    fields read as the decoder reads them (:mod:`cdclake.decoding.heapdecode`)."""
    op = rec.info & XLOG_HEAP_OPMASK
    md = rec.main_data
    if op == XLOG_HEAP_INSERT:
        b = first_block(rec, op)
        offnum, flags = insert_fields(rec, md, b.data)
        return HeapInsert(b.rlocator, b.blkno, offnum, flags,
                          tuple_at(b.data, 0) if b.data else None)
    if op in (XLOG_HEAP_UPDATE, XLOG_HEAP_HOT_UPDATE):
        b = first_block(rec, op)
        old_xmax, old_off, old_bits, flags, new_xmax, new_off, prefix, suffix, at = (
            update_fields(rec, op, md, b.data))
        return HeapUpdate(op == XLOG_HEAP_HOT_UPDATE, b.rlocator, b.blkno, old_xmax, old_off,
                          old_bits, flags, new_xmax, new_off,
                          tuple_at(md, SIZE_OF_UPDATE) if flags & XLH_UPDATE_CONTAINS_OLD
                          else None,
                          tuple_at(b.data, at) if at >= 0 and b.data is not None else None,
                          prefix, suffix)
    if op == XLOG_HEAP_DELETE:
        b = first_block(rec, op)
        xmax, offnum, bits, flags = delete_fields(rec, md)
        return HeapDelete(b.rlocator, b.blkno, xmax, offnum, bits, flags,
                          tuple_at(md, SIZE_OF_DELETE) if flags & XLH_DELETE_CONTAINS_OLD
                          else None)
    try:
        if op == XLOG_HEAP_TRUNCATE:
            db_id, n, flags = _TRUNC.unpack_from(md, 0)
            return HeapTruncate(db_id, flags, struct.unpack_from(f"<{n}I", md, 12))
        if op in (XLOG_HEAP_CONFIRM, XLOG_HEAP_INPLACE):
            b = first_block(rec, op)
            offnum = u16(bytes_of(contiguous(md)), 0, len(md))
            if op == XLOG_HEAP_CONFIRM:
                return HeapConfirm(b.rlocator, b.blkno, offnum)
            return HeapInplace(b.rlocator, b.blkno, offnum)
    except (struct.error, IndexError) as exc:
        raise _malformed(rec, op, exc) from None
    return None


def first_block(rec: XLogRecord, op: int) -> BlockRef:
    """The record's block reference (the changed heap page): a record without one is
    malformed."""
    if not rec.blocks:
        raise WalCorruptError(f"malformed heap {OPNAMES[op]} record: no block reference",
                              segment=rec.segment, lsn=rec.lsn)
    return rec.blocks[0]


if not cython.compiled:  # Python's readers (waldump, the catalog tracker) read them as C too
    tuple_at = native.twin(tuple_at, "cdclake.wal.rmgr._heap")
    insert_fields = native.twin(insert_fields, "cdclake.wal.rmgr._heap")
    delete_fields = native.twin(delete_fields, "cdclake.wal.rmgr._heap")
    update_fields = native.twin(update_fields, "cdclake.wal.rmgr._heap")
