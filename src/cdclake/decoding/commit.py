"""What the transaction rmgr's records do to a decoder (PostgreSQL's xact_decode): a commit
(DecodeCommit) takes the transaction out of the reorder buffer, applies its catalog events and
replays its changes if this decoder emits it; an abort forgets it; a PREPARE and an assignment
say which subtransactions a transaction has.

Written once for both decoders: :func:`decode_xact` is the Python
:class:`~cdclake.decoding.decode.Decoder`'s handler of these records, and, compiled as itself
(Cython's pure-Python mode, ``_commit.pxd``), the compiled one's, which reads a commit's
fields with the compiled ``xact.finish`` (``wal/rmgr/_xact``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.filter import Filter
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.startup import Startup
from cdclake.wal.record import XLogRecord
from cdclake.wal.rmgr import xact
from cdclake.wal.rmgr.xact import (
    XACT_XINFO_HAS_ORIGIN,
    XLOG_XACT_ABORT,
    XLOG_XACT_ABORT_PREPARED,
    XLOG_XACT_ASSIGNMENT,
    XLOG_XACT_COMMIT,
    XLOG_XACT_COMMIT_PREPARED,
    XLOG_XACT_OPMASK,
    XLOG_XACT_PREPARE,
    XactAssignment,
    XactPrepare,
)

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.decoding._filter import origin_ok
    from cython.cimports.cdclake.decoding._reorder import discard, members, merged_changes, txn
    from cython.cimports.cdclake.decoding._stripes import says_yes
    from cython.cimports.cdclake.wal._slots import blank, offset, put
    from cython.cimports.cdclake.wal.rmgr._xact import finish
else:
    from cdclake.decoding.filter import origin_ok
    from cdclake.decoding.reorder import discard, members, merged_changes, txn
    from cdclake.decoding.stripes import says_yes
    from cdclake.wal.rmgr.xact import finish


class Counts(Protocol):
    """The statistics a commit or an abort counts in (``DecodeStats``)."""

    committed: int
    emitted: int
    skipped_before_start: int
    aborted: int


class Replay(Protocol):
    """Commit processing (reassembly + emit), called at a commit."""

    def apply_catalog(self, events: list[tuple[int, object]], info: TxnInfo) -> None: ...

    def replay(self, info: TxnInfo, changes: object) -> None: ...


class Decoder(Protocol):
    """What a commit reads of a decoder (:class:`~cdclake.decoding.decode.Decoder`)."""

    db_oid: int
    start_lsn: int
    version: int
    rb: ReorderBuffer
    filter: Filter
    owns: Callable[[int], bool] | None
    share: Callable[[int, int], bool] | None

    @property
    def replay(self) -> Replay: ...

    @property
    def startup(self) -> Startup: ...

    @property
    def stats(self) -> Counts: ...


if cython.compiled:  # where TxnInfo holds its fields (wal/_slots.pxd)
    I_XID = offset(TxnInfo, "xid")
    I_FIRST = offset(TxnInfo, "first_lsn")
    I_FINAL = offset(TxnInfo, "final_lsn")
    I_END = offset(TxnInfo, "end_lsn")
    I_TIME = offset(TxnInfo, "commit_time")
    I_ORIGIN = offset(TxnInfo, "origin_id")
    I_OLSN = offset(TxnInfo, "origin_lsn")
    I_GID = offset(TxnInfo, "gid")


def _txn_info(xid: int, first_lsn: int, final_lsn: int, end_lsn: int, commit_time: int,
              origin: int, origin_lsn: int, gid: str) -> TxnInfo:
    """``TxnInfo(...)``; compiled, its slots filled without running the dataclass's
    ``__init__``, a Python frame per commit (1-2 % of decoding pgbench's WAL)."""
    if not cython.compiled:
        return TxnInfo(xid, first_lsn, final_lsn, end_lsn, commit_time, origin, origin_lsn, gid)
    info = blank(TxnInfo)
    put(info, I_XID, xid)
    put(info, I_FIRST, first_lsn)
    put(info, I_FINAL, final_lsn)
    put(info, I_END, end_lsn)
    put(info, I_TIME, commit_time)
    put(info, I_ORIGIN, origin)
    put(info, I_OLSN, origin_lsn)
    put(info, I_GID, gid)
    return info


def _event_lsn(event: tuple[int, object]) -> int:
    return event[0]


def commit(decoder: Decoder, xid: int, lsn: int, end_lsn: int, origin: int, commit_time: int,
           origin_lsn: int, gid: str, db_id: int, subxacts: tuple[int, ...]) -> None:
    """Transaction ``xid`` (and its ``subxacts``) committed at ``lsn`` (the record ending at
    ``end_lsn``, of ``origin``): what it changed in the catalog is applied in LSN order
    whichever decoder emits it, so every decoder sharing a WAL keeps the same dictionary; of
    a parallel decode, every worker holding changes of it replays them (its share), and the
    one whose share the commit record is counts it and replays it in any case (an empty
    transaction's BEGIN and COMMIT, when the plugin writes them). A commit of another
    database (``db_id``) only forgets it."""
    stats = decoder.stats
    stats.committed += 1
    rb = decoder.rb
    txns = members(rb, xid, subxacts)
    if not txns:
        return
    if db_id and db_id != decoder.db_oid:
        discard(rb, xid, subxacts)
        return
    first = txns[0].first_lsn
    ddl = False
    for m in txns:
        if m.first_lsn < first:
            first = m.first_lsn
        if m.ddl:
            ddl = True
    info = _txn_info(xid, first, lsn, end_lsn, commit_time, origin, origin_lsn, gid)
    if ddl:
        decoder.replay.apply_catalog(sorted([e for m in txns for e in m.ddl], key=_event_lsn),
                                     info)
    share = decoder.share
    counts = share is None or says_yes(share, xid, lsn)
    owns = decoder.owns
    filt = decoder.filter
    if owns is not None and not owns(xid):
        pass  # another decoder emits it
    elif lsn < decoder.start_lsn or not (origin_ok(filt, origin) if type(filt) is Filter
                                         else filt.origin_ok(origin)):
        stats.skipped_before_start += counts
    elif counts or any([m.changes or m.spill_files for m in txns]):
        startup = decoder.startup
        if type(startup) is not Startup or startup.suspects is None or startup.suspects:
            startup.check(xid, subxacts, lsn)
        decoder.replay.replay(info, merged_changes(txns))
        stats.emitted += counts
    discard(rb, xid, subxacts)


def decode_xact(decoder: Decoder, rec: XLogRecord) -> None:
    """A record of the transaction rmgr: a commit committed (:func:`commit`; a replicated
    transaction's commit time and LSN are its origin's), an abort forgotten with its
    subtransactions, a prepared transaction's subtransactions kept buffered with it from its
    PREPARE (as PostgreSQL's DecodePrepare records them), an assignment's joined to their
    transaction."""
    op = rec.info & XLOG_XACT_OPMASK
    if op in (XLOG_XACT_COMMIT, XLOG_XACT_COMMIT_PREPARED):
        (xact_time, xinfo, db_id, _ts_id, subxacts, _relations, _dropped, _invals, twophase_xid,
         gid, origin_lsn, origin_ts) = finish(rec, decoder.version)
        if xinfo & XACT_XINFO_HAS_ORIGIN:
            commit(decoder, twophase_xid or rec.xid, rec.lsn, rec.end_lsn, rec.origin,
                   origin_ts, origin_lsn, gid, db_id, subxacts)
        else:
            commit(decoder, twophase_xid or rec.xid, rec.lsn, rec.end_lsn, rec.origin,
                   xact_time, 0, gid, db_id, subxacts)
    elif op in (XLOG_XACT_ABORT, XLOG_XACT_ABORT_PREPARED):
        (_time, _xinfo, _db_id, _ts_id, subxacts, _relations, _dropped, _invals, twophase_xid,
         _gid, _origin_lsn, _origin_ts) = finish(rec, decoder.version)
        discard(decoder.rb, twophase_xid or rec.xid, subxacts)
        decoder.stats.aborted += 1
    elif op == XLOG_XACT_PREPARE:
        prepared = xact.parse(rec, decoder.version)
        assert isinstance(prepared, XactPrepare)
        t = txn(decoder.rb, rec.xid, rec.lsn)
        t.prepared = True
        t.gid = prepared.gid
        for sub in prepared.subxacts:
            decoder.rb.assign_child(rec.xid, sub, rec.lsn)
    elif op == XLOG_XACT_ASSIGNMENT:
        assigned = xact.parse(rec, decoder.version)
        assert isinstance(assigned, XactAssignment)
        for sub in assigned.subxacts:
            decoder.rb.assign_child(assigned.xtop, sub, rec.lsn)
