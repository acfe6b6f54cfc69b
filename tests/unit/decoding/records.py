"""Synthetic WAL records (layouts of access/heapam_xlog.h, access/xact.h,
replication/message.h, storage/standbydefs.h) and a recording decoder, for tests of the rmgr
table, routing and the decoder that need no server."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.decode import Decoder
from cdclake.decoding.filter import Filter
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.startup import Startup
from cdclake.wal.record import (
    RM_HEAP2_ID,
    RM_HEAP_ID,
    RM_LOGICALMSG_ID,
    RM_STANDBY_ID,
    RM_XACT_ID,
    BlockRef,
    RelFileLocator,
    XLogRecord,
)
from cdclake.wal.rmgr import heap, heap2, standby, xact

DB = 5
USER_REL = 20000


def heap_record(lsn: int, xid: int, op: int = heap.XLOG_HEAP_INSERT, *, rel: int = USER_REL,
                db: int = DB, toplevel: int = 0) -> XLogRecord:
    """A heap record on one block; an INSERT carries a one-column tuple."""
    data = None
    md = b""
    if op == heap.XLOG_HEAP_INSERT:
        md = struct.pack("<HB", 1, heap.XLH_INSERT_CONTAINS_NEW_TUPLE)
        # xl_heap_header, then the tuple from t_bits on: one pad byte up to t_hoff 24
        data = struct.pack("<HHB", 1, 0, 24) + b"\0" + struct.pack("<i", lsn)
    elif op == heap.XLOG_HEAP_LOCK:
        md = struct.pack("<IHBB", xid, 1, 0, 0)  # xmax, offnum, infobits, flags
    rec = XLogRecord(lsn, lsn + 8, 0, xid, RM_HEAP_ID, op, 64,
                     [BlockRef(0, RelFileLocator(1663, db, rel), 0, 0, 0, data=data)], md)
    rec.toplevel_xid = toplevel
    return rec


def commit_record(lsn: int, xid: int, subxacts: tuple[int, ...] = (), *,
                  op: int = xact.XLOG_XACT_COMMIT, twophase_xid: int = 0) -> XLogRecord:
    """A commit or abort (or their prepared forms) naming its subtransactions."""
    xinfo = xact.XACT_XINFO_HAS_SUBXACTS if subxacts else 0
    if twophase_xid:
        xinfo |= xact.XACT_XINFO_HAS_TWOPHASE
    md = struct.pack("<qI", 0, xinfo)
    if subxacts:
        md += struct.pack(f"<i{len(subxacts)}I", len(subxacts), *subxacts)
    if twophase_xid:
        md += struct.pack("<I", twophase_xid)
    return XLogRecord(lsn, lsn + 8, 0, xid, RM_XACT_ID, op | xact.XLOG_XACT_HAS_INFO, 64, [], md)


def prepare_record(lsn: int, xid: int, subxacts: tuple[int, ...], gid: str = "g") -> XLogRecord:
    """xl_xact_prepare followed by the gid (padded to 8 bytes) and the subxact xids."""
    g = gid.encode() + b"\0"
    head = struct.pack("<IIIIqIiiiiiiBxHQq", 0x57F94534, 0, xid, DB, 0, 10, len(subxacts),
                       0, 0, 0, 0, 0, 0, len(g), 0, 0)
    md = head + g.ljust((len(g) + 7) & ~7, b"\0") + struct.pack(f"<{len(subxacts)}I", *subxacts)
    return XLogRecord(lsn, lsn + 8, 0, xid, RM_XACT_ID, xact.XLOG_XACT_PREPARE, 64, [], md)


def assignment(lsn: int, xtop: int, subxacts: tuple[int, ...]) -> XLogRecord:
    md = struct.pack(f"<Ii{len(subxacts)}I", xtop, len(subxacts), *subxacts)
    return XLogRecord(lsn, lsn + 8, 0, xtop, RM_XACT_ID, xact.XLOG_XACT_ASSIGNMENT, 64, [], md)


def message(lsn: int, xid: int, prefix: str, content: bytes, *,
            transactional: bool = True) -> XLogRecord:
    """xl_logical_message: dbId, transactional, prefix_size, message_size, prefix, message."""
    p = prefix.encode() + b"\0"
    md = struct.pack("<IB3xQQ", DB, transactional, len(p), len(content)) + p + content
    return XLogRecord(lsn, lsn + 8, 0, xid, RM_LOGICALMSG_ID, 0x00, 64, [], md)


def multi_insert(lsn: int, xid: int, n: int) -> XLogRecord:
    """A COPY's multi-insert of ``n`` one-column tuples on a fresh page."""
    md = struct.pack("<BxH", heap.XLH_INSERT_CONTAINS_NEW_TUPLE | heap.XLH_INSERT_LAST_IN_MULTI,
                     n)
    data = b""
    for i in range(n):
        data += (b"\0" if len(data) % 2 else b"") + struct.pack("<HHHB", 4, 1, 0, 24)
        data += struct.pack("<i", i)
    return XLogRecord(lsn, lsn + 8, 0, xid, RM_HEAP2_ID,
                      heap2.XLOG_HEAP2_MULTI_INSERT | heap.XLOG_HEAP_INIT_PAGE, 64,
                      [BlockRef(0, RelFileLocator(1663, DB, USER_REL), 0, 0, 0, data=data)], md)


def truncate(lsn: int, xid: int) -> XLogRecord:
    md = struct.pack("<IIB3xI", DB, 1, 0, USER_REL)
    return XLogRecord(lsn, lsn + 8, 0, xid, RM_HEAP_ID, heap.XLOG_HEAP_TRUNCATE, 64, [], md)


def running_xacts(lsn: int, xids: tuple[int, ...]) -> XLogRecord:
    md = struct.pack(f"<iiB3xIII{len(xids)}I", len(xids), 0, 0, 100, min(xids), 9, *xids)
    return XLogRecord(lsn, lsn + 8, 0, 0, RM_STANDBY_ID, standby.XLOG_RUNNING_XACTS, 64, [],
                      md)


@dataclass
class Recording:
    """Replay and catalog tracker at once: remembers every call the decoder makes."""

    calls: list[tuple[str, object]] = field(default_factory=list)
    #: xid -> LSNs of the changes replayed at its commit
    emitted: dict[int, list[int]] = field(default_factory=dict)

    def apply_catalog(self, events: list[tuple[int, object]], info: TxnInfo) -> None:
        self.calls.append(("apply_catalog", events))

    def replay(self, info: TxnInfo, changes: object) -> None:
        self.calls.append(("replay", info.xid))
        self.emitted[info.xid] = [c.lsn for c in changes]  # type: ignore[attr-defined]

    def message(self, lsn: int, prefix: str, content: bytes) -> None:
        self.calls.append(("message", prefix))

    def is_pg_class(self, loc: RelFileLocator) -> bool:
        self.calls.append(("is_pg_class", loc.rel))
        return False

    def pg_class_insert(self, rec: XLogRecord, ins: object) -> object | None:
        self.calls.append(("pg_class_insert", rec.lsn))
        return None

    def relmap_update(self, upd: object, lsn: int) -> None:
        self.calls.append(("relmap_update", lsn))


def recording_decoder(spill: Path, *, db_oid: int = DB,
                      version: int = 15) -> tuple[Decoder, Recording]:
    """A decoder past its first record (no clean-start test) that may emit any commit."""
    rec = Recording()
    d = Decoder(db_oid=db_oid, buffer=ReorderBuffer(1 << 20, spill, 1 << 20), replay=rec,
                filter=Filter(Dictionary()), start_lsn=0, version=version, tracker=rec,
                startup=Startup(set(), continued=True))
    return d, rec
