"""Transaction resource manager records (access/xact.h; parsed as xactdesc.c does).

A commit's or an abort's fields are read by :func:`finish`, once for every reader: ``parse``
makes them an :class:`XactFinish`, and the decoder commits with them as they are
(:func:`cdclake.decoding.commit.decode_xact`). This file is compiled as itself (Cython's
pure-Python mode, ``_xact.pxd``): the fields are read through the record's bytes with the
reader's primitives (:mod:`cdclake.wal.primitives`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake import native
from cdclake.errors import WalCorruptError
from cdclake.wal.record import RelFileLocator, XLogRecord

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.wal._primitives import (
        bytes_of,
        contiguous,
        i64,
        locator,
        need,
        u32,
        u64,
    )
else:
    from cdclake.wal.primitives import bytes_of, contiguous, i64, locator, need, u32, u64

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

_I32 = struct.Struct("<i")
_2U32 = struct.Struct("<II")
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
    if op in _KINDS:
        return XactFinish(_KINDS[op], *finish(rec, version))
    md = rec.main_data
    try:
        if op == XLOG_XACT_PREPARE:
            return _prepare(md)
        if op == XLOG_XACT_ASSIGNMENT:
            xtop, n = _2U32.unpack_from(md, 0)
            return XactAssignment(xtop, struct.unpack_from(f"<{n}I", md, 8))
        if op == XLOG_XACT_INVALIDATIONS:
            return XactInvalidations(_I32.unpack_from(md, 0)[0])
    except (struct.error, IndexError, ValueError) as exc:  # ValueError: no NUL after a gid
        raise _malformed(rec, op, exc) from None
    return None


FinishFields = tuple[int, int, int, int, tuple[int, ...], tuple[RelFileLocator, ...], int, int,
                     int, str, int, int]


def finish(rec: XLogRecord, version: int) -> FinishFields:
    """A commit's or an abort's fields (``rec``: any of the four kinds), in XactFinish's order
    after ``kind``: the record's layout (xl_xact_parsed_commit) walked to its end; a
    WalCorruptError where it is malformed."""
    op = rec.info & XLOG_XACT_OPMASK
    try:
        return finish_fields(rec.info, op, rec.main_data, version)
    except (IndexError, ValueError) as exc:  # ValueError: no NUL after a gid
        raise _malformed(rec, op, exc) from None


def _malformed(rec: XLogRecord, op: int, exc: Exception) -> WalCorruptError:
    return WalCorruptError(f"malformed Transaction {OPNAMES.get(op, hex(op))} record: {exc}",
                           segment=rec.segment, lsn=rec.lsn)


def finish_fields(info: int, op: int, md: bytes | memoryview, version: int) -> FinishFields:
    """:func:`finish` of the main data ``md``: an IndexError where it ends too soon."""
    md = contiguous(md)
    b = bytes_of(md)
    n = len(md)
    xact_time = i64(b, 0, n)
    p = 8
    xinfo = 0
    if info & XLOG_XACT_HAS_INFO:
        xinfo = u32(b, p, n)
        p += 4
    db_id = ts_id = 0
    if xinfo & XACT_XINFO_HAS_DBINFO:
        db_id = u32(b, p, n)
        ts_id = u32(b, p + 4, n)
        p += 8
    subxacts: tuple[int, ...] = ()
    if xinfo & XACT_XINFO_HAS_SUBXACTS:
        k = _count(b, p, n, 4)
        subxacts = tuple([u32(b, p + 4 + 4 * i, n) for i in range(k)])
        p += 4 + 4 * k
    relations: tuple[RelFileLocator, ...] = ()
    if xinfo & XACT_XINFO_HAS_RELFILELOCATORS:
        k = _count(b, p, n, 12)
        relations = tuple([locator(b, p + 4 + 12 * i, n) for i in range(k)])
        p += 4 + 12 * k
    dropped = 0
    if xinfo & XACT_XINFO_HAS_DROPPED_STATS:
        dropped = _count(b, p, n, stats_item_size(version))
        p += 4 + stats_item_size(version) * dropped
    invals = 0
    if xinfo & XACT_XINFO_HAS_INVALS and op in (XLOG_XACT_COMMIT, XLOG_XACT_COMMIT_PREPARED):
        invals = _count(b, p, n, INVAL_MSG_SIZE)
        p += 4 + INVAL_MSG_SIZE * invals
    twophase_xid = 0
    gid = ""
    if xinfo & XACT_XINFO_HAS_TWOPHASE:
        twophase_xid = u32(b, p, n)
        p += 4
        if xinfo & XACT_XINFO_HAS_GID:
            rest = bytes(md[p:])
            end = rest.index(b"\0")
            gid = rest[:end].decode()
            p += end + 1
    origin_lsn = origin_ts = 0
    if xinfo & XACT_XINFO_HAS_ORIGIN:
        origin_lsn = u64(b, p, n)
        origin_ts = i64(b, p + 8, n)
        p += 16
    need(p, n)
    return (xact_time, xinfo, db_id, ts_id, subxacts, relations, dropped, invals, twophase_xid,
            gid, origin_lsn, origin_ts)


def _count(b: bytes | memoryview, p: int, n: int, item: int) -> int:
    """The count at ``p`` of the ``item``-byte entries after it, all of which must be there
    (an int32 in PostgreSQL: a negative one cannot be)."""
    k = u32(b, p, n)
    if k >= 1 << 31 or p + 4 + item * k > n:
        raise IndexError(f"{k} entries of {item} bytes at offset {p + 4}, the record ends at "
                         f"{n}")
    return k


def _prepare(md: bytes | memoryview) -> XactPrepare:
    (_magic, _total, xid, db, prepared_at, owner, nsub, _ncr, _nar, _ncs, _nas, _ninv, _init,
     gidlen, origin_lsn, origin_ts) = _PREPARE.unpack_from(md, 0)
    p = _PREPARE.size
    gid = bytes(md[p:p + gidlen]).split(b"\0", 1)[0].decode()
    p += (gidlen + 7) & ~7
    subxacts = struct.unpack_from(f"<{nsub}I", md, p)
    return XactPrepare(xid, db, prepared_at, owner, gid, subxacts, origin_lsn, origin_ts)


if not cython.compiled:  # Python's readers (waldump, the scan's memberships) read it as C too
    finish_fields = native.twin(finish_fields, "cdclake.wal.rmgr._xact")
