"""Storage manager records (catalog/storage_xlog.h): relation file create and truncate."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake.errors import WalCorruptError
from cdclake.wal.record import RelFileLocator, XLogRecord

XLOG_SMGR_CREATE = 0x10
XLOG_SMGR_TRUNCATE = 0x20
SMGR_TRUNCATE_HEAP = 0x0001
SMGR_TRUNCATE_VM = 0x0002
SMGR_TRUNCATE_FSM = 0x0004

_CREATE = struct.Struct("<IIIi")
_TRUNC = struct.Struct("<IIIIi")


@dataclass(slots=True)
class SmgrCreate:
    rlocator: RelFileLocator
    fork: int


@dataclass(slots=True)
class SmgrTruncate:
    blkno: int
    rlocator: RelFileLocator
    flags: int


def parse(rec: XLogRecord) -> object | None:
    op = rec.info & 0xF0
    try:
        if op == XLOG_SMGR_CREATE:
            spc, db, rel, fork = _CREATE.unpack_from(rec.main_data, 0)
            return SmgrCreate(RelFileLocator(spc, db, rel), fork)
        if op == XLOG_SMGR_TRUNCATE:
            blkno, spc, db, rel, flags = _TRUNC.unpack_from(rec.main_data, 0)
            return SmgrTruncate(blkno, RelFileLocator(spc, db, rel), flags)
    except struct.error as exc:
        raise WalCorruptError(f"malformed Storage record: {exc}", segment=rec.segment,
                              lsn=rec.lsn) from None
    return None
