"""Heap2 resource manager records (access/heapam_xlog.h): multi-insert and new-cid."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake.errors import WalCorruptError
from cdclake.wal.record import RelFileLocator, WalTuple, XLogRecord
from cdclake.wal.rmgr.heap import XLOG_HEAP_INIT_PAGE

XLOG_HEAP2_REWRITE = 0x00
XLOG_HEAP2_PRUNE = 0x10  # 17+: PRUNE_ON_ACCESS
XLOG_HEAP2_VACUUM = 0x20  # 17+: PRUNE_VACUUM_SCAN
XLOG_HEAP2_FREEZE_PAGE = 0x30  # 17+: PRUNE_VACUUM_CLEANUP
XLOG_HEAP2_VISIBLE = 0x40
XLOG_HEAP2_MULTI_INSERT = 0x50
XLOG_HEAP2_LOCK_UPDATED = 0x60
XLOG_HEAP2_NEW_CID = 0x70
XLOG_HEAP2_OPMASK = 0x70

_MULTI = struct.Struct("<BxH")  # flags, ntuples (offsets at 4 unless INIT_PAGE)
_MTUP = struct.Struct("<HHHB")  # datalen, t_infomask2, t_infomask, t_hoff
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


def parse(rec: XLogRecord, version: int = 15) -> object | None:
    op = rec.info & XLOG_HEAP2_OPMASK
    md = rec.main_data
    try:
        if op == XLOG_HEAP2_MULTI_INSERT:
            flags, n = _MULTI.unpack_from(md, 0)
            offsets: tuple[int, ...] = ()
            if not rec.info & XLOG_HEAP_INIT_PAGE:
                offsets = struct.unpack_from(f"<{n}H", md, 4)
            b = rec.blocks[0]
            tuples: list[WalTuple] = []
            data = b.data
            if data:
                p = 0
                size = _MTUP.size
                for _ in range(n):
                    p = (p + 1) & ~1  # each xl_multi_insert_tuple is SHORTALIGNed
                    dlen, im2, im, hoff = _MTUP.unpack_from(data, p)
                    p += size
                    tuples.append(WalTuple(im2, im, hoff, bytes(data[p:p + dlen])))
                    p += dlen
                if p > len(data):
                    raise WalCorruptError("multi-insert tuples run past the block data",
                                          segment=rec.segment, lsn=rec.lsn)
            return MultiInsert(b.rlocator, b.blkno, flags, n, offsets, tuples)
        if op == XLOG_HEAP2_NEW_CID:
            top, cmin, cmax, combo, loc, bhi, blo, off = _NEWCID.unpack_from(md, 0)
            return NewCid(top, cmin, cmax, combo, RelFileLocator(*struct.unpack("<III", loc)),
                          ((bhi << 16) | blo, off))
    except (struct.error, IndexError) as exc:
        raise WalCorruptError(f"malformed Heap2 record: {exc}", segment=rec.segment,
                              lsn=rec.lsn) from None
    return None
