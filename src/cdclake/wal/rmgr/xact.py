"""Transaction resource manager records (access/xact.h; parsed as xactdesc.c does)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake.errors import WalCorruptError
from cdclake.wal.record import RelFileLocator, XLogRecord

XLOG_XACT_COMMIT = 0x00
XLOG_XACT_PREPARE = 0x10
XLOG_XACT_ABORT = 0x20
XLOG_XACT_COMMIT_PREPARED = 0x30
XLOG_XACT_ABORT_PREPARED = 0x40
XLOG_XACT_ASSIGNMENT = 0x50
XLOG_XACT_INVALIDATIONS = 0x60
XLOG_XACT_OPMASK = 0x70
XLOG_XACT_HAS_INFO = 0x80

XACT_XINFO_HAS_DBINFO = 1 << 0
XACT_XINFO_HAS_SUBXACTS = 1 << 1
XACT_XINFO_HAS_RELFILELOCATORS = 1 << 2
XACT_XINFO_HAS_INVALS = 1 << 3
XACT_XINFO_HAS_TWOPHASE = 1 << 4
XACT_XINFO_HAS_ORIGIN = 1 << 5
XACT_XINFO_HAS_AE_LOCKS = 1 << 6
XACT_XINFO_HAS_GID = 1 << 7
XACT_XINFO_HAS_DROPPED_STATS = 1 << 8

OPNAMES = {XLOG_XACT_COMMIT: "COMMIT", XLOG_XACT_PREPARE: "PREPARE",
           XLOG_XACT_ABORT: "ABORT", XLOG_XACT_COMMIT_PREPARED: "COMMIT_PREPARED",
           XLOG_XACT_ABORT_PREPARED: "ABORT_PREPARED", XLOG_XACT_ASSIGNMENT: "ASSIGNMENT",
           XLOG_XACT_INVALIDATIONS: "INVALIDATION"}
_KINDS = {XLOG_XACT_COMMIT: "commit", XLOG_XACT_ABORT: "abort",
          XLOG_XACT_COMMIT_PREPARED: "commit_prepared", XLOG_XACT_ABORT_PREPARED: "abort_prepared"}

_I64 = struct.Struct("<q")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_2U32 = struct.Struct("<II")
_ORIGIN = struct.Struct("<Qq")
_PREPARE = struct.Struct("<IIIIqIiiiiiiBxHQq")  # xl_xact_prepare, 72 bytes
INVAL_MSG_SIZE = 16


@dataclass(slots=True)
class XactFinish:
    """A parsed commit/abort (also their *_prepared forms), xl_xact_parsed_commit."""

    kind: str
    xact_time: int  #: µs since 2000-01-01 UTC
    xinfo: int
    db_id: int
    ts_id: int
    subxacts: tuple[int, ...]
    relations: tuple[RelFileLocator, ...]
    dropped_stats: int
    invals: int
    twophase_xid: int
    gid: str
    origin_lsn: int
    origin_ts: int


@dataclass(slots=True)
class XactPrepare:
    xid: int
    db_id: int
    prepared_at: int
    owner: int
    gid: str
    subxacts: tuple[int, ...]
    origin_lsn: int
    origin_ts: int


@dataclass(slots=True)
class XactAssignment:
    xtop: int
    subxacts: tuple[int, ...]


@dataclass(slots=True)
class XactInvalidations:
    nmsgs: int


def stats_item_size(version: int) -> int:
    """xl_xact_stats_item: 12 bytes up to PostgreSQL 17, 16 from 18 (objid split lo/hi)."""
    return 16 if version >= 18 else 12


def parse(rec: XLogRecord, version: int) -> object | None:
    op = rec.info & XLOG_XACT_OPMASK
    md = rec.main_data
    try:
        if op in _KINDS:
            return _finish(rec, op, md, version)
        if op == XLOG_XACT_PREPARE:
            return _prepare(md)
        if op == XLOG_XACT_ASSIGNMENT:
            xtop, n = _2U32.unpack_from(md, 0)
            return XactAssignment(xtop, struct.unpack_from(f"<{n}I", md, 8))
        if op == XLOG_XACT_INVALIDATIONS:
            return XactInvalidations(_I32.unpack_from(md, 0)[0])
    except (struct.error, IndexError, ValueError) as exc:  # ValueError: no NUL after a gid
        raise WalCorruptError(f"malformed Transaction {OPNAMES.get(op, hex(op))} record: {exc}",
                              segment=rec.segment, lsn=rec.lsn) from None
    return None


def _finish(rec: XLogRecord, op: int, md: bytes | memoryview, version: int) -> XactFinish:
    xact_time = _I64.unpack_from(md, 0)[0]
    p = 8
    xinfo = 0
    if rec.info & XLOG_XACT_HAS_INFO:
        xinfo = _U32.unpack_from(md, p)[0]
        p += 4
    db_id = ts_id = 0
    if xinfo & XACT_XINFO_HAS_DBINFO:
        db_id, ts_id = _2U32.unpack_from(md, p)
        p += 8
    subxacts: tuple[int, ...] = ()
    if xinfo & XACT_XINFO_HAS_SUBXACTS:
        n = _I32.unpack_from(md, p)[0]
        subxacts = struct.unpack_from(f"<{n}I", md, p + 4)
        p += 4 + 4 * n
    relations: tuple[RelFileLocator, ...] = ()
    if xinfo & XACT_XINFO_HAS_RELFILELOCATORS:
        n = _I32.unpack_from(md, p)[0]
        flat = struct.unpack_from(f"<{3 * n}I", md, p + 4)
        relations = tuple(RelFileLocator(*flat[i:i + 3]) for i in range(0, 3 * n, 3))
        p += 4 + 12 * n
    dropped = 0
    if xinfo & XACT_XINFO_HAS_DROPPED_STATS:
        dropped = _I32.unpack_from(md, p)[0]
        p += 4 + stats_item_size(version) * dropped
    invals = 0
    if xinfo & XACT_XINFO_HAS_INVALS and op in (XLOG_XACT_COMMIT, XLOG_XACT_COMMIT_PREPARED):
        invals = _I32.unpack_from(md, p)[0]
        p += 4 + INVAL_MSG_SIZE * invals
    twophase_xid = 0
    gid = ""
    if xinfo & XACT_XINFO_HAS_TWOPHASE:
        twophase_xid = _U32.unpack_from(md, p)[0]
        p += 4
        if xinfo & XACT_XINFO_HAS_GID:
            end = bytes(md[p:]).index(b"\0")
            gid = bytes(md[p:p + end]).decode()
            p += end + 1
    origin_lsn = origin_ts = 0
    if xinfo & XACT_XINFO_HAS_ORIGIN:
        origin_lsn, origin_ts = _ORIGIN.unpack_from(md, p)
        p += _ORIGIN.size
    if p > len(md):
        raise struct.error(f"needs {p} bytes, has {len(md)}")
    return XactFinish(_KINDS[op], xact_time, xinfo, db_id, ts_id, subxacts, relations, dropped,
                      invals, twophase_xid, gid, origin_lsn, origin_ts)


def _prepare(md: bytes | memoryview) -> XactPrepare:
    (_magic, _total, xid, db, prepared_at, owner, nsub, _ncr, _nar, _ncs, _nas, _ninv, _init,
     gidlen, origin_lsn, origin_ts) = _PREPARE.unpack_from(md, 0)
    p = _PREPARE.size
    gid = bytes(md[p:p + gidlen]).split(b"\0", 1)[0].decode()
    p += (gidlen + 7) & ~7
    subxacts = struct.unpack_from(f"<{nsub}I", md, p)
    return XactPrepare(xid, db, prepared_at, owner, gid, subxacts, origin_lsn, origin_ts)
