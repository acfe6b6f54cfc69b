"""Standby resource manager records (storage/standbydefs.h): running xacts, locks, invals."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake.errors import WalCorruptError
from cdclake.wal.record import XLogRecord

XLOG_STANDBY_LOCK = 0x00
XLOG_RUNNING_XACTS = 0x10
XLOG_INVALIDATIONS = 0x20

OPNAMES = {XLOG_STANDBY_LOCK: "LOCK", XLOG_RUNNING_XACTS: "RUNNING_XACTS",
           XLOG_INVALIDATIONS: "INVALIDATIONS"}

_RUNNING = struct.Struct("<iiB3xIII")  # xcnt, subxcnt, overflow, next, oldest, latest


@dataclass(slots=True)
class RunningXacts:
    xcnt: int
    subxcnt: int
    overflow: bool
    next_xid: int
    oldest_running_xid: int
    latest_completed_xid: int
    xids: tuple[int, ...]
    subxids: tuple[int, ...]


@dataclass(slots=True)
class StandbyLocks:
    locks: tuple[tuple[int, int, int], ...]  #: (xid, db, rel)


def parse(rec: XLogRecord) -> object | None:
    op = rec.info & 0xF0
    md = rec.main_data
    try:
        if op == XLOG_RUNNING_XACTS:
            xcnt, subxcnt, overflow, nxt, oldest, latest = _RUNNING.unpack_from(md, 0)
            ids = struct.unpack_from(f"<{xcnt + subxcnt}I", md, _RUNNING.size)
            return RunningXacts(xcnt, subxcnt, bool(overflow), nxt, oldest, latest,
                                ids[:xcnt], ids[xcnt:])
        if op == XLOG_STANDBY_LOCK:
            n = struct.unpack_from("<i", md, 0)[0]
            flat = struct.unpack_from(f"<{3 * n}I", md, 4)
            return StandbyLocks(tuple(tuple(flat[i:i + 3]) for i in range(0, 3 * n, 3)))  # type: ignore[misc]
    except struct.error as exc:
        raise WalCorruptError(f"malformed Standby record: {exc}", segment=rec.segment,
                              lsn=rec.lsn) from None
    return None
