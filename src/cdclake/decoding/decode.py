"""Decode: WAL records -> reorder-buffer changes and transaction events (PostgreSQL's decode.c).

The cheapest filtering gates run in the handlers, before anything is buffered, as in
PostgreSQL: gate 1 drops records of other databases from the block reference alone, before the
record is parsed; gate 2 drops changes with a replication origin when ``origin=none``; gate 4
drops changes to relations known to be catalogs or TOAST deletions. Whatever cannot be decided
yet (a relfilenode created by a transaction still running) is buffered and decided at commit.

Transactions are emitted at their commit record, in WAL order, which is commit-LSN order.
Records reach their handler through the rmgr table (:mod:`cdclake.decoding.rmgrs`), which
also tells the Spark shuffle which records these handlers read. The heap rmgrs' handlers
(:mod:`cdclake.decoding.heapdecode`) and the transaction rmgr's
(:mod:`cdclake.decoding.commit`) are modules of their own, compiled as themselves; the others
are the methods below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cdclake import native
from cdclake.catalog.signing import DDL_PREFIX
from cdclake.decoding import rmgrs
from cdclake.decoding.changes import (
    MESSAGE,
    Change,
    Message,
)
from cdclake.decoding.commit import Replay as CommitReplay
from cdclake.decoding.commit import decode_xact
from cdclake.decoding.filter import Filter
from cdclake.decoding.heapdecode import decode_heap, decode_heap2
from cdclake.decoding.queueing import foreign
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.startup import Startup
from cdclake.wal.record import RelFileLocator, XLogRecord
from cdclake.wal.rmgr import heap, logicalmsg, relmap, standby

#: pg_control.h: the XLOG record a clean shutdown writes; nothing runs before it
XLOG_CHECKPOINT_SHUTDOWN = 0x00


class Replay(CommitReplay, Protocol):
    """Commit processing (reassembly + emit), and the messages outside transactions, called
    by the decoder."""

    def message(self, lsn: int, prefix: str, content: bytes) -> None: ...


class CatalogTracker(Protocol):
    """Follows pg_class rows in the WAL (VACUUM FULL, CLUSTER, table rewrites, TRUNCATE)."""

    def is_pg_class(self, loc: RelFileLocator) -> bool: ...

    def pg_class_insert(self, rec: XLogRecord, ins: heap.HeapInsert) -> object | None: ...

    def pg_class_change(self, rec: XLogRecord,
                        change: heap.HeapUpdate | heap.HeapDelete) -> object | None: ...

    def relmap_update(self, upd: relmap.RelmapUpdate, lsn: int) -> None: ...


@dataclass
class DecodeStats:
    records: int = 0
    changes: int = 0
    committed: int = 0
    emitted: int = 0
    aborted: int = 0
    skipped_before_start: int = 0
    #: changes not queued because their record precedes ``Decoder.skip_before``
    cut_before_start: int = 0
    last_lsn: int = 0


class Decoder:
    """Feeds one database's records into a ReorderBuffer and replays commits.

    ``skip_before`` (0: off) starts a stream at the full dictionary ``cdclake source install``
    wrote, at that LSN (the dictionary-start mode of a new stream with no start LSN): no change
    whose record precedes it is queued (heap and multi-inserts, updates, deletes, speculative
    confirms and aborts, TOAST chunks, TRUNCATE, transactional messages), because no
    dictionary describes the tables they touch. Everything else is read as always: the
    pg_class tracker, subtransaction assignments and the ``cdclake.ddl`` events of
    transactions committing after the start, which shape the dictionary. ``start_lsn`` should
    be the same LSN, and the first record read must not be after it.
    """

    #: one record through the decoder: :func:`cdclake.decoding.rmgrs.process` (bound below)
    process: Callable[[XLogRecord], None]
    #: the transaction rmgr's records: :func:`cdclake.decoding.commit.decode_xact` (bound below)
    _xact: Callable[[XLogRecord], None]
    #: the heap rmgrs' records: :mod:`cdclake.decoding.heapdecode`'s ``decode_heap`` and
    #: ``decode_heap2`` (bound below)
    _heap: Callable[[XLogRecord], None]
    _heap2: Callable[[XLogRecord], None]

    def __init__(self, *, db_oid: int, buffer: ReorderBuffer, replay: Replay, filter: Filter,
                 start_lsn: int, version: int, tracker: CatalogTracker | None = None,
                 skip_before: int = 0, startup: Startup | None = None,
                 owns: Callable[[int], bool] | None = None,
                 share: Callable[[int, int], bool] | None = None) -> None:
        self.db_oid = db_oid
        self.rb = buffer
        self.replay = replay
        self.filter = filter
        self.start_lsn = start_lsn
        self.version = version
        self.tracker = tracker
        self.skip_before = skip_before
        self.stats = DecodeStats()
        #: which top-level transactions this decoder emits (None: all; a Spark partition its
        #: own and the split ones, see ``share``). The changes of the
        #: others are dropped before they are parsed or buffered; their catalog events, fate
        #: and subtransaction memberships are still followed, so every decoder sharing a WAL
        #: keeps the same dictionary (:class:`~cdclake.decoding.context.OwnedReplay`).
        self.owns = owns
        #: when a committing transaction is provably whole (:mod:`cdclake.decoding.startup`);
        #: a continued decoder gets the previous batch's. In the dictionary-start mode nothing
        #: is suspect: a transaction with changes before the first WAL read began before the
        #: install, so those changes precede ``skip_before`` and are cut anyway, as are the
        #: earlier changes of every transaction open across the install. The lake never needs
        #: them: the initial snapshot waits until every transaction older than the install has
        #: ended, so it holds their effects, and the merge hands over from it by transaction
        #: visibility.
        self.startup = startup or (Startup.at_dictionary() if skip_before else Startup())
        #: which changes this decoder emits, by top-level xid and LSN (None: all), in a
        #: parallel decode where every worker reads every transaction
        #: (:mod:`cdclake.decoding.parallel`), or of a transaction a Spark job split
        #: (:mod:`cdclake.spark.routing`: there a partition gets only its own INSERT, UPDATE,
        #: DELETE and COPY rows, and every TRUNCATE). An INSERT, UPDATE, DELETE or COPY row it does
        #: not emit is not parsed or buffered; its transaction is still entered, so every worker
        #: processes the same commits, and while TOAST chunks of its transaction are buffered a
        #: placeholder (ELSEWHERE) takes its place, so reassembly releases them where the
        #: change would have. Speculative inserts and their confirmations and aborts, TOAST
        #: chunks, TRUNCATEs and transactional messages are buffered by every worker; the
        #: replayer emits each from one (``Replayer.share``).
        self.share = share
        #: the handler of each rmgr id (the rmgr table's ``decode``), built once
        self.handlers = rmgrs.dispatch(self)

    # -- the handlers of the other rmgrs ---------------------------------------------------------

    def _xlog(self, rec: XLogRecord) -> None:
        if self.stats.records == 1:
            self.startup.first_record((rec.info & 0xF0) == XLOG_CHECKPOINT_SHUTDOWN)

    def _relmap(self, rec: XLogRecord) -> None:
        if self.tracker is None:
            return
        upd = relmap.parse(rec)
        if upd is not None and upd.db_id == self.db_oid:
            self.tracker.relmap_update(upd, rec.lsn)

    def _message(self, rec: XLogRecord) -> None:
        m = logicalmsg.parse(rec)
        if m.db_id != self.db_oid or not self.filter.origin_ok(rec.origin):
            return
        if m.transactional:
            if foreign(self, rec.xid):
                pass  # another decoder's transaction: only its catalog bookkeeping below
            elif rec.lsn < self.skip_before:
                self.stats.cut_before_start += 1
            else:  # queued with the record's end LSN, as PostgreSQL does
                self.rb.queue(rec.xid, Change(MESSAGE, rec.end_lsn, 0, None, None, None, False,
                                              rec.origin, Message(m.prefix, m.message, True)))
            if m.prefix == DDL_PREFIX:  # catalog bookkeeping: kept whatever its LSN
                self.rb.txn(rec.xid, rec.lsn).ddl.append((rec.lsn, m.message))
        elif rec.lsn >= self.start_lsn:
            self.replay.message(rec.end_lsn, m.prefix, m.message)

    def _standby(self, rec: XLogRecord) -> None:
        if rec.info & 0xF0 != standby.XLOG_RUNNING_XACTS:
            return
        rx = standby.parse(rec)
        self.startup.running_xacts((*rx.xids, *rx.subxids))
        self.rb.abort_old(rx.oldest_running_xid)


#: one record through the decoder, the transaction rmgr's records and the heap rmgrs': module
#: functions written once, compiled as themselves
native.bind(Decoder, "process", rmgrs.process, "cdclake.decoding._rmgrs")
native.bind(Decoder, "_xact", decode_xact, "cdclake.decoding._commit")
native.bind(Decoder, "_heap", decode_heap, "cdclake.decoding._heapdecode")
native.bind(Decoder, "_heap2", decode_heap2, "cdclake.decoding._heapdecode")
