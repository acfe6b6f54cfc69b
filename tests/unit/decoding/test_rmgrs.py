"""The rmgr table: names, record types, decode dispatch and routing classes agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake import native
from cdclake.decoding import rmgrs
from cdclake.decoding.rmgrs import ALL, CATALOG, IGNORE, TXN
from cdclake.decoding.startup import Startup
from cdclake.wal.reader import XLogReader
from cdclake.wal.record import (
    RM_BTREE_ID,
    RM_HEAP2_ID,
    RM_HEAP_ID,
    RM_SEQ_ID,
    RM_STANDBY_ID,
    RM_XACT_ID,
    RM_XLOG_ID,
    BlockRef,
    RelFileLocator,
    XLogRecord,
)
from cdclake.wal.rmgr import heap, heap2, standby, xact
from cdclake.wal.source import DirectorySource
from tests.unit.decoding.records import (
    DB,
    assignment,
    commit_record,
    heap_record,
    multi_insert,
    prepare_record,
    recording_decoder,
)
from tests.unit.wal.conftest import WalFixture

#: pg_waldump's names of the built-in resource managers (access/rmgrlist.h), by id
PG_WALDUMP_NAMES = (
    "XLOG", "Transaction", "Storage", "CLOG", "Database", "Tablespace", "MultiXact", "RelMap",
    "Standby", "Heap2", "Heap", "Btree", "Hash", "Gin", "Gist", "Sequence", "SPGist", "BRIN",
    "CommitTs", "ReplicationOrigin", "Generic", "LogicalMessage",
)


def test_table_names_every_rmgr_once_with_its_pg_waldump_name() -> None:
    assert [r.id for r in rmgrs.RMGRS] == list(range(len(PG_WALDUMP_NAMES)))
    assert tuple(r.name for r in rmgrs.RMGRS) == PG_WALDUMP_NAMES
    assert rmgrs.rmgr_name(200) == "custom200"
    assert rmgrs.rmgr_by_name("heap") is rmgrs.BY_ID[RM_HEAP_ID]
    assert rmgrs.rmgr_by_name("nosuch") is None


def test_identify_names_record_types_as_pg_waldump() -> None:
    def name(rmid: int, info: int, version: int = 15) -> str:
        return rmgrs.identify(XLogRecord(0, 0, 0, 0, rmid, info, 0), version)

    assert name(RM_HEAP_ID, heap.XLOG_HEAP_INSERT | heap.XLOG_HEAP_INIT_PAGE) == "INSERT+INIT"
    assert name(RM_HEAP_ID, heap.XLOG_HEAP_LOCK) == "LOCK"
    assert name(RM_HEAP2_ID, 0x10, 15) == "PRUNE"
    assert name(RM_HEAP2_ID, 0x10, 17) == "PRUNE_ON_ACCESS"
    assert name(RM_HEAP2_ID, heap2.XLOG_HEAP2_NEW_CID, 18) == "NEW_CID"
    assert name(RM_XACT_ID, xact.XLOG_XACT_COMMIT | xact.XLOG_XACT_HAS_INFO) == "COMMIT"
    assert name(RM_XLOG_ID, 0x00) == "CHECKPOINT_SHUTDOWN"
    assert name(RM_BTREE_ID, 0x00) == "INSERT_LEAF"
    assert name(RM_SEQ_ID, 0x00) == "LOG"
    assert name(RM_XLOG_ID, 0xC0) == "UNKNOWN (0xC0)"
    assert name(150, 0x10) == "UNKNOWN (0x10)"


def test_every_decode_handler_exists(tmp_path: Path) -> None:
    d, _ = recording_decoder(tmp_path)
    table = rmgrs.dispatch(d)
    assert len(table) == 256
    decoded = {r.id for r in rmgrs.RMGRS if r.decode}
    assert {i for i, h in enumerate(table) if h is not None} == decoded
    assert decoded == {0, 1, 7, 8, 9, 10, 21}  # xlog, xact, relmap, standby, heap2, heap, msg


def test_routing_classes() -> None:
    route = rmgrs.route_class
    assert route(heap_record(1, 7), DB) == TXN
    assert route(heap_record(1, 7, db=6), DB) == IGNORE  # gate 1: another database
    assert route(heap_record(1, 7, rel=1259), DB) == CATALOG  # pg_class, other catalogs
    assert route(heap_record(1, 0), DB) == ALL  # no xid: no owner
    assert route(heap_record(1, 7, heap.XLOG_HEAP_LOCK), DB) == IGNORE
    assert route(commit_record(1, 7), DB) == ALL
    assert route(assignment(1, 7, (8,)), DB) == ALL
    inval = XLogRecord(1, 2, 0, 7, RM_XACT_ID, xact.XLOG_XACT_INVALIDATIONS, 30)
    assert route(inval, DB) == IGNORE
    running = XLogRecord(1, 2, 0, 0, RM_STANDBY_ID, standby.XLOG_RUNNING_XACTS, 30)
    assert route(running, DB) == ALL
    assert route(XLogRecord(1, 2, 0, 0, RM_STANDBY_ID, standby.XLOG_STANDBY_LOCK, 30),
                 DB) == IGNORE
    assert route(XLogRecord(1, 2, 0, 7, RM_BTREE_ID, 0, 30), DB) == IGNORE
    assert route(XLogRecord(1, 2, 0, 7, 200, 0, 30), DB) == IGNORE  # a custom rmgr


def test_plain_changes_are_the_ones_one_decoder_can_take_alone() -> None:
    def with_flags(op: int, offset: int, flags: int) -> XLogRecord:
        rec = heap_record(1, 7, op)
        md = bytearray(8)
        md[offset] = flags
        rec.main_data = bytes(md)
        return rec

    assert rmgrs.plain_change(heap_record(1, 7))
    assert rmgrs.plain_change(multi_insert(1, 7, 3))
    assert rmgrs.plain_change(heap_record(1, 7, heap.XLOG_HEAP_UPDATE))
    assert rmgrs.plain_change(heap_record(1, 7, heap.XLOG_HEAP_HOT_UPDATE))
    assert rmgrs.plain_change(with_flags(heap.XLOG_HEAP_DELETE, 7, 0))
    # what every decoder sharing the transaction must see
    assert not rmgrs.plain_change(with_flags(heap.XLOG_HEAP_INSERT, 2,
                                             heap.XLH_INSERT_ON_TOAST_RELATION))
    assert not rmgrs.plain_change(with_flags(heap.XLOG_HEAP_INSERT, 2,
                                             heap.XLH_INSERT_IS_SPECULATIVE))
    assert not rmgrs.plain_change(with_flags(heap.XLOG_HEAP_DELETE, 7, heap.XLH_DELETE_IS_SUPER))
    assert not rmgrs.plain_change(heap_record(1, 7, heap.XLOG_HEAP_CONFIRM))
    assert not rmgrs.plain_change(heap_record(1, 7, heap.XLOG_HEAP_TRUNCATE))


def test_a_subtransaction_first_record_tells_its_top_level_transaction(tmp_path: Path) -> None:
    """The bug's record: a LOCK naming the top-level xid, which decoding otherwise ignores;
    every decoder reads it (as every Spark partition does), and the scan collects it."""
    lock = heap_record(10, 101, heap.XLOG_HEAP_LOCK, toplevel=100)
    assert rmgrs.route_class(lock, DB) == IGNORE
    assert rmgrs.memberships(lock, 15) == [(101, 100)]
    d, _ = recording_decoder(tmp_path)
    d.process(lock)
    assert d.rb.by_txn[101].top == 100 and d.rb.by_txn[100].subxids == [101]


def test_memberships_from_every_source() -> None:
    assert rmgrs.memberships(heap_record(1, 11, toplevel=10), 15) == [(11, 10)]
    assert rmgrs.memberships(heap_record(1, 10), 15) == []
    assert rmgrs.memberships(assignment(1, 10, (11, 12)), 15) == [(11, 10), (12, 10)]
    assert rmgrs.memberships(commit_record(1, 10, (11, 12)), 18) == [(11, 10), (12, 10)]
    # a subtransaction's abort (ROLLBACK TO SAVEPOINT) lists its own committed children
    abort = commit_record(1, 11, (13,), op=xact.XLOG_XACT_ABORT)
    assert rmgrs.memberships(abort, 15) == [(13, 11)]
    # COMMIT PREPARED is written by another transaction: the prepared xid is in the record
    cp = commit_record(1, 0, (21,), op=xact.XLOG_XACT_COMMIT_PREPARED, twophase_xid=20)
    assert rmgrs.memberships(cp, 15) == [(21, 20)]
    assert rmgrs.memberships(prepare_record(1, 20, (21, 22)), 15) == [(21, 20), (22, 20)]


def _untouched(d: object, rec: object) -> str | None:
    """Why the decoder shows a trace of having read a record, or None."""
    from cdclake.decoding.decode import Decoder

    assert isinstance(d, Decoder)
    if d.rb.by_txn:
        return f"buffered {sorted(d.rb.by_txn)}"
    if d.stats.changes or d.startup.suspects is not None:
        return f"decoder state changed: {d.stats}, {d.startup}"
    return None


def test_records_routed_ignore_are_ignored_by_the_decoder(tmp_path: Path) -> None:
    """Every record type routing drops is one the decoder's handler leaves alone."""
    for r in rmgrs.RMGRS:
        for info in range(0, 256, 16):
            rec = XLogRecord(100, 108, 0, 7, r.id, info, 64,
                             [BlockRef(0, RelFileLocator(1663, DB + 1, 20000), 0, 0, 0)])
            if rmgrs.route_class(rec, DB) != IGNORE:
                continue
            d, calls = recording_decoder(tmp_path)
            d.startup = Startup(continued=True)
            d.process(rec)
            assert _untouched(d, rec) is None and not calls.calls, (r.name, hex(info))


@pytest.mark.parametrize("db_oid", [16384, 1])
def test_committed_wal_routed_ignore_is_ignored_by_the_decoder(walfix: WalFixture,
                                                                tmp_path: Path,
                                                                db_oid: int) -> None:
    """Real records of every kind (the fixtures' database is 16384): same property."""
    reader = XLogReader(DirectorySource([str(walfix.dir)]))
    ignored = 0
    for rec in reader:
        if rmgrs.route_class(rec, db_oid) != IGNORE or rec.toplevel_xid:
            continue
        ignored += 1
        d, calls = recording_decoder(tmp_path, db_oid=db_oid, version=reader.version)
        d.startup = Startup(continued=True)
        d.process(rec)
        assert _untouched(d, rec) is None and not calls.calls, \
            (rmgrs.rmgr_name(rec.rmid), rmgrs.identify(rec, reader.version), rec.lsn)
    assert ignored > 100


@pytest.mark.parametrize("db_oid", [16384, 1])
def test_a_decoder_is_fed_what_routing_keeps(walfix: WalFixture, db_oid: int) -> None:
    """``decodable`` passes over the records routed IGNORE (the property above) but the
    first; the compiled twin builds none of them, and keeps the same records as the
    reference, over real WAL of every kind."""
    assert "cdclake.decoding.rmgrs.decodable" in native.twins()  # built, as make builds it

    def kept(python: bool) -> list[tuple[int, int]]:
        with native.use_python(python):
            reader = XLogReader(DirectorySource([str(walfix.dir)]))
            return [(r.lsn, r.end_lsn) for r in rmgrs.decodable(reader, db_oid)]

    every = [r for r in XLogReader(DirectorySource([str(walfix.dir)]))]
    wanted = [(r.lsn, r.end_lsn) for i, r in enumerate(every)
              if i == 0 or r.toplevel_xid or rmgrs.route_class(r, db_oid) != IGNORE]
    assert kept(False) == kept(True) == wanted
    assert 0 < len(wanted) < len(every)
