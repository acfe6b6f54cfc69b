"""Heap resource manager records (access/heapam_xlog.h): insert, delete, update, truncate..."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake.errors import WalCorruptError
from cdclake.wal.record import RelFileLocator, WalTuple, XLogRecord

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

_HDR = struct.Struct("<HHB")  # xl_heap_header: t_infomask2, t_infomask, t_hoff
_INSERT = struct.Struct("<HB")  # offnum, flags
_DELETE = struct.Struct("<IHBB")  # xmax, offnum, infobits_set, flags
_UPDATE = struct.Struct("<IHBBIH")  # old_xmax, old_offnum, old_infobits, flags, new_xmax, new_off
_TRUNC = struct.Struct("<IIB")  # dbId, nrelids, flags (relids at offset 12)
_U16 = struct.Struct("<H")


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


def wal_tuple(buf: bytes | memoryview, offset: int, rec: XLogRecord) -> WalTuple:
    """xl_heap_header followed by the tuple's bytes from t_bits on (DecodeXLogTuple)."""
    if len(buf) - offset < _HDR.size:
        raise WalCorruptError("heap tuple data shorter than its header", segment=rec.segment,
                              lsn=rec.lsn)
    im2, im, hoff = _HDR.unpack_from(buf, offset)
    return WalTuple(im2, im, hoff, bytes(buf[offset + _HDR.size:]))


def parse(rec: XLogRecord) -> object | None:
    op = rec.info & XLOG_HEAP_OPMASK
    md = rec.main_data
    try:
        if op == XLOG_HEAP_INSERT:
            offnum, flags = _INSERT.unpack_from(md, 0)
            b = rec.blocks[0]
            tup = wal_tuple(b.data, 0, rec) if b.data else None
            return HeapInsert(b.rlocator, b.blkno, offnum, flags, tup)
        if op in (XLOG_HEAP_UPDATE, XLOG_HEAP_HOT_UPDATE):
            old_xmax, old_off, old_bits, flags, new_xmax, new_off = _UPDATE.unpack_from(md, 0)
            b = rec.blocks[0]
            old = wal_tuple(md, _UPDATE.size, rec) if flags & XLH_UPDATE_CONTAINS_OLD else None
            new = None
            prefix = suffix = 0
            data = b.data
            if data:
                p = 0
                if flags & XLH_UPDATE_PREFIX_FROM_OLD:
                    prefix = _U16.unpack_from(data, p)[0]
                    p += 2
                if flags & XLH_UPDATE_SUFFIX_FROM_OLD:
                    suffix = _U16.unpack_from(data, p)[0]
                    p += 2
                new = wal_tuple(data, p, rec)
            return HeapUpdate(op == XLOG_HEAP_HOT_UPDATE, b.rlocator, b.blkno, old_xmax,
                              old_off, old_bits, flags, new_xmax, new_off, old, new, prefix,
                              suffix)
        if op == XLOG_HEAP_DELETE:
            xmax, offnum, bits, flags = _DELETE.unpack_from(md, 0)
            b = rec.blocks[0]
            old = wal_tuple(md, _DELETE.size, rec) if flags & XLH_DELETE_CONTAINS_OLD else None
            return HeapDelete(b.rlocator, b.blkno, xmax, offnum, bits, flags, old)
        if op == XLOG_HEAP_TRUNCATE:
            db_id, n, flags = _TRUNC.unpack_from(md, 0)
            return HeapTruncate(db_id, flags, struct.unpack_from(f"<{n}I", md, 12))
        if op == XLOG_HEAP_CONFIRM:
            b = rec.blocks[0]
            return HeapConfirm(b.rlocator, b.blkno, _U16.unpack_from(md, 0)[0])
        if op == XLOG_HEAP_INPLACE:
            b = rec.blocks[0]
            return HeapInplace(b.rlocator, b.blkno, _U16.unpack_from(md, 0)[0])
    except (struct.error, IndexError) as exc:
        raise WalCorruptError(f"malformed heap {OPNAMES[op]} record: {exc}",
                              segment=rec.segment, lsn=rec.lsn) from None
    return None
