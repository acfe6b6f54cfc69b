"""What a commit record does (PostgreSQL's DecodeCommit): the transaction leaves the reorder
buffer, its catalog events are applied, and its changes are replayed if this decoder emits it.

Written once for both decoders: the Python :class:`~cdclake.decoding.decode.Decoder` calls
:func:`commit` with the fields ``xact.parse`` read, and the compiled one (``_decode.pyx``)
with those it read from the record's bytes, as C. This file is compiled as itself (Cython's
pure-Python mode, ``_commit.pxd``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from cdclake.decoding.changes import TxnInfo
from cdclake.decoding.filter import Filter
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.startup import Startup

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.decoding._filter import origin_ok
    from cython.cimports.cdclake.decoding._reorder import discard, members, merged_changes
    from cython.cimports.cdclake.decoding._stripes import says_yes
    from cython.cimports.cdclake.wal._slots import blank, offset, put
else:
    from cdclake.decoding.filter import origin_ok
    from cdclake.decoding.reorder import discard, members, merged_changes
    from cdclake.decoding.stripes import says_yes


class Counts(Protocol):
    """The statistics a commit counts in (``DecodeStats``)."""

    committed: int
    emitted: int
    skipped_before_start: int


class Replay(Protocol):
    """Commit processing (reassembly + emit), called at a commit."""

    def apply_catalog(self, events: list[tuple[int, object]], info: TxnInfo) -> None: ...

    def replay(self, info: TxnInfo, changes: object) -> None: ...


class Decoder(Protocol):
    """What a commit reads of a decoder (:class:`~cdclake.decoding.decode.Decoder`)."""

    db_oid: int
    start_lsn: int
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
