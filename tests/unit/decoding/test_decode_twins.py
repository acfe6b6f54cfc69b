"""The compiled ``Decoder._heap`` and ``Decoder._heap2`` (``decoding/heapdecode.py`` and
``wal/rmgr/heap.py``, ``heap2.py`` compiled as themselves), ``Decoder.process``
(``decoding/rmgrs.py``) and ``Decoder._xact`` (``decoding/commit.py`` and ``wal/rmgr/xact.py``)
against the same files run as Python, record by record. Commits: of every sub-record
combination, cut short at every length, with bad counts, spilled, before the start, unproven by
start-up, another decoder's; they must make the same replay calls (every field of the
transaction), leave the same buffer and statistics, and raise the same error. Changes: heap
INSERT, UPDATE, DELETE and COPY's MULTI_INSERT, whole, cut short at every length, with every
flag byte, with their block data cut, without blocks and with a payload that is not contiguous.
Both must queue the same changes (every field, in the same transaction, with the same work_mem
accounting and the same spill), count the same statistics, and raise the same error; as one
decoder or as a worker of a parallel decode, whose share of the rows it queues, placeholders for
the others'. No server."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from cdclake import native
from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding.changes import ELSEWHERE, Change, TxnInfo
from cdclake.decoding.decode import Decoder
from cdclake.decoding.filter import Filter
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.decoding.startup import Startup
from cdclake.decoding.stripes import shares_of
from cdclake.errors import DecodingError, WalCorruptError
from cdclake.wal.record import (
    RM_HEAP2_ID,
    RM_HEAP_ID,
    RM_XACT_ID,
    BlockRef,
    RelFileLocator,
    XLogRecord,
)
from cdclake.wal.rmgr import heap, xact
from tests.unit.decoding.records import (
    DB,
    USER_REL,
    Recording,
    assignment,
    heap_record,
    multi_insert,
    prepare_record,
)

LOC = RelFileLocator(1663, DB, USER_REL)
TUPLE = struct.pack("<HHB", 2, 0, 24) + b"\0" + struct.pack("<ii", 7, 8)


def _update(lsn: int, xid: int, op: int = heap.XLOG_HEAP_UPDATE) -> XLogRecord:
    flags = (heap.XLH_UPDATE_CONTAINS_OLD_KEY | heap.XLH_UPDATE_CONTAINS_NEW_TUPLE
             | heap.XLH_UPDATE_PREFIX_FROM_OLD)
    md = struct.pack("<IHBBIH", xid, 1, 0, flags, 0, 2) + TUPLE
    data = struct.pack("<H", 3) + TUPLE
    return XLogRecord(lsn, lsn + 8, 0, xid, RM_HEAP_ID, op, 64,
                      [BlockRef(0, LOC, 0, 0, 0, data=data)], md)


def _delete(lsn: int, xid: int) -> XLogRecord:
    md = struct.pack("<IHBB", xid, 1, 0, heap.XLH_DELETE_CONTAINS_OLD_KEY) + TUPLE
    return XLogRecord(lsn, lsn + 8, 0, xid, RM_HEAP_ID, heap.XLOG_HEAP_DELETE, 64,
                      [BlockRef(0, LOC, 0, 0, 0)], md)


def _variants(rec: XLogRecord) -> Iterator[XLogRecord]:
    md = bytes(rec.main_data)
    yield rec
    for n in range(len(md)):
        yield dataclasses.replace(rec, main_data=md[:n])
    flag_at = {RM_HEAP2_ID: 0, RM_HEAP_ID: 2 if rec.info & 0x70 == 0 else 7}[rec.rmid]
    for flags in range(256):
        yield dataclasses.replace(rec, main_data=md[:flag_at] + bytes([flags]) + md[flag_at + 1:])
    if rec.rmid == RM_HEAP2_ID:
        for n in (0, 1, 5, 40, 65535):  # tuple counts the data does or does not hold
            yield dataclasses.replace(rec, main_data=md[:2] + struct.pack("<H", n) + md[4:])
        yield dataclasses.replace(rec, info=rec.info & ~heap.XLOG_HEAP_INIT_PAGE)  # offsets
    blk = rec.blocks[0]
    data = bytes(blk.data or b"")
    for n in range(len(data)):
        yield dataclasses.replace(rec, blocks=[dataclasses.replace(blk, data=data[:n])])
    yield dataclasses.replace(rec, blocks=[dataclasses.replace(blk, data=None)])
    yield dataclasses.replace(rec, blocks=[])
    yield dataclasses.replace(rec, main_data=memoryview(md + md)[::2])
    yield dataclasses.replace(rec, blocks=[dataclasses.replace(blk, rlocator=LOC._replace(db=9))])
    yield dataclasses.replace(rec, origin=5)  # from another node: origin=none drops it


def _state(d: Decoder) -> object:
    """Everything a record can change: queued changes (every field), sizes, spills, stats."""
    rb = d.rb
    txns = {xid: (t.size, t.nspilled, [
        (c.action, c.lsn, c.seq, c.locator, c.clear_toast, c.origin, c.payload,
         *((t_.infomask2, t_.infomask, t_.t_hoff, t_.data) if t_ is not None else (None,)
           for t_ in (c.old, c.new)))
        for c in t.changes]) for xid, t in rb.by_txn.items()}
    return txns, rb.size, rb.spilled_changes, dataclasses.astuple(d.stats)


def _alternate(top: int, lsn: int) -> bool:
    """A parallel decode's share: every other 64 bytes of WAL, shifted by the xid."""
    return (top + lsn // 64) % 2 == 0


def _run(method: str, records: list[XLogRecord],
         spill: Path, work_mem: int, skip_before: int,
         share: Callable[[int, int], bool] | None = None, local_only: bool = False) -> object:
    rec = Recording()
    d = Decoder(db_oid=DB, buffer=ReorderBuffer(work_mem, spill, 1 << 20), replay=rec,
                filter=Filter(Dictionary(), local_only=local_only), start_lsn=0, version=15,
                tracker=rec,
                skip_before=skip_before, share=share)
    if share is not None:  # TOAST chunks queued before: the others' rows leave placeholders
        for xid in (10, 12, 14):
            d.rb.txn(xid, 1).toast_pending = True
    outcomes = []
    for r in records:
        try:
            getattr(d, method)(r)
            outcomes.append(None)
        except Exception as exc:  # the error itself is compared
            outcomes.append((type(exc), str(exc)))
    return outcomes, _state(d)


def test_heap_and_multi_insert_records_queue_the_same(tmp_path: Path) -> None:
    records = [*_variants(heap_record(100, 10)), *_variants(_update(200, 11)),
               *_variants(_update(300, 12, heap.XLOG_HEAP_HOT_UPDATE)),
               *_variants(_delete(400, 13)), *_variants(multi_insert(500, 14, 5))]
    heaps = [r for r in records if r.rmid == RM_HEAP_ID]
    copies = [r for r in records if r.rmid == RM_HEAP2_ID]
    configs = [(1 << 20, 0, None, False), (600, 0, None, False),  # spill
               (1 << 20, 450, None, False),  # cut
               (1 << 20, 0, _alternate, False), (1 << 20, 450, _alternate, False),  # a worker's
               (1 << 20, 0, shares_of(1, 2, 6), False), (1 << 20, 450, shares_of(0, 3, 6), False),
               (1 << 20, 0, None, True), (1 << 20, 0, shares_of(1, 2, 6), True)]  # origin=none
    for work_mem, skip_before, share, local in configs:
        for method, batch in (("_heap", heaps), ("_heap2", copies)):
            where = f"{method}-{work_mem}-{skip_before}-{share!r}-{local}"
            with native.use_python():
                want = _run(method, batch, tmp_path / f"py-{where}", work_mem, skip_before,
                            share, local)
            with native.use_python(False):
                assert type(getattr(Decoder, method)).__name__ == "cython_function_or_method"
                got = _run(method, batch, tmp_path / f"c-{where}", work_mem, skip_before,
                           share, local)
            assert got == want, where
    # the workload reaches what it is meant to: changes queued, errors raised, spills
    outcomes, (txns, _size, spilled, _stats) = _run("_heap2", copies,
                                                    tmp_path / "check", 600, 0)
    assert any(outcomes) and any(o is None for o in outcomes) and spilled > 0
    assert txns[14][2] or spilled
    # a worker's share: rows of its stripes queued, placeholders for the others'
    _outcomes, (txns, _size, _spilled, _stats) = _run("_heap", heaps,
                                                      tmp_path / "share", 1 << 20, 0, _alternate)
    actions = {c[0] for _size, _n, changes in txns.values() for c in changes}
    assert ELSEWHERE in actions and actions - {ELSEWHERE}
    # origin=none: the changes from another node are not queued, the local ones are
    _outcomes, (kept, *_rest) = _run("_heap", heaps, tmp_path / "local",
                                     1 << 20, 0, local_only=True)
    queued = [c for _size, _n, changes in txns.values() for c in changes]
    kept_changes = [c for _size, _n, changes in kept.values() for c in changes]
    assert kept_changes and all(c[5] == 0 for c in kept_changes)
    assert any(c[5] == 5 for c in queued)


def _commit(lsn: int, xid: int, xinfo: int, *, subxacts: tuple[int, ...] = (11, 12),
            db: int = DB, count: int | None = None) -> XLogRecord:
    """A COMMIT with the sub-records ``xinfo`` asks for, in xactdesc.c's order; ``count``
    replaces every array's count (negative, or more entries than there are bytes)."""
    md = struct.pack("<qI", 1_000_000 + lsn, xinfo)
    if xinfo & xact.XACT_XINFO_HAS_DBINFO:
        md += struct.pack("<II", db, 1663)
    for flag, n, item in ((xact.XACT_XINFO_HAS_SUBXACTS, len(subxacts), 4),
                          (xact.XACT_XINFO_HAS_RELFILELOCATORS, 1, 12),
                          (xact.XACT_XINFO_HAS_DROPPED_STATS, 2, 12),
                          (xact.XACT_XINFO_HAS_INVALS, 1, 16)):
        if xinfo & flag:
            body = (struct.pack(f"<{n}I", *subxacts) if item == 4 else bytes(n * item))
            md += struct.pack("<i", n if count is None else count) + body
    if xinfo & xact.XACT_XINFO_HAS_TWOPHASE:
        md += struct.pack("<I", xid) + b"gid\0"
    if xinfo & xact.XACT_XINFO_HAS_ORIGIN:
        md += struct.pack("<Qq", 77, 5)
    return XLogRecord(lsn, lsn + 8, 0, xid, RM_XACT_ID, xact.XLOG_XACT_HAS_INFO, 64, [], md)


def _commits() -> Iterator[XLogRecord]:
    """Commits of every sub-record combination, cut short, with bad counts, of another
    database, without xinfo, not contiguous; an abort, a prepare and an assignment."""
    every = (xact.XACT_XINFO_HAS_DBINFO | xact.XACT_XINFO_HAS_SUBXACTS
             | xact.XACT_XINFO_HAS_RELFILELOCATORS | xact.XACT_XINFO_HAS_INVALS
             | xact.XACT_XINFO_HAS_DROPPED_STATS)
    for xinfo in range(512):
        yield _commit(1000, 10, xinfo)
    whole = _commit(1000, 10, every)
    md = bytes(whole.main_data)
    for n in range(len(md)):
        yield dataclasses.replace(whole, main_data=md[:n])
    for count in (-1, 0, 3, 1 << 30, -(1 << 31)):
        yield _commit(1000, 10, every, count=count)
    yield _commit(1000, 10, every, db=DB + 1)
    yield _commit(1000, 10, xact.XACT_XINFO_HAS_SUBXACTS, subxacts=())
    yield _commit(1000, 10, xact.XACT_XINFO_HAS_SUBXACTS, subxacts=(13,))
    yield _commit(1000, 99, 0)  # nothing buffered
    yield dataclasses.replace(whole, info=0, main_data=md[:8])  # no xinfo at all
    yield dataclasses.replace(whole, main_data=memoryview(md + md)[::2])
    yield dataclasses.replace(whole, main_data=memoryview(md))
    for op in (xact.XLOG_XACT_ABORT, xact.XLOG_XACT_COMMIT_PREPARED):
        yield dataclasses.replace(whole, info=whole.info | op)
    yield prepare_record(1000, 10, (11,))
    yield assignment(1000, 10, (11, 12))


class _Replay:
    """Every call a commit makes of the replay stage, with every field of the transaction."""

    def __init__(self) -> None:
        self.calls: list[object] = []

    def apply_catalog(self, events: list[tuple[int, object]], info: TxnInfo) -> None:
        self.calls.append(("apply_catalog", events, dataclasses.astuple(info)))

    def replay(self, info: TxnInfo, changes: Iterable[Change]) -> None:
        self.calls.append(("replay", dataclasses.astuple(info), [c.lsn for c in changes]))

    def message(self, lsn: int, prefix: str, content: bytes) -> None:
        self.calls.append(("message", lsn, prefix))


def _decode_all(records: list[XLogRecord], spill: Path, *, work_mem: int, start_lsn: int,
                startup: Startup, spilled: bool, owns: Callable[[int], bool] | None,
                share: Callable[[int, int], bool] | None, nested: bool) -> object:
    """A fresh decoder per commit record, after a transaction was buffered (10, with DDL
    events; when ``nested``, in subtransactions 11 and 12 too), fed through ``process``; what
    it did."""
    out = []
    for i, commit in enumerate(records):
        rp = _Replay()
        d = Decoder(db_oid=DB, buffer=ReorderBuffer(work_mem, spill / str(i), 1 << 20),
                    replay=rp, filter=Filter(Dictionary()), start_lsn=start_lsn, version=15,
                    startup=dataclasses.replace(startup), owns=owns, share=share)
        for lsn, xid, top in ((100, 10, 0), (200, 11, 10), (300, 12, 10), (400, 10, 0)):
            d.process(heap_record(lsn, xid if nested else 10, toplevel=top if nested else 0))
        d.rb.txn(10, 100).ddl.append((450, b"b"))
        d.rb.txn(12 if nested else 10, 300).ddl.append((350, b"a"))
        if spilled:
            d.rb.spill(d.rb.txn(11 if nested else 10, 200))
        try:
            d.process(commit)
            outcome: object = None
        except Exception as exc:  # the error itself is compared
            outcome = (type(exc), str(exc))
        out.append((outcome, rp.calls, sorted(d.rb.by_txn), d.rb.size, d.rb.peak_size,
                    dataclasses.astuple(d.stats)))
    return out


def test_commit_records_and_dispatch_do_the_same(tmp_path: Path) -> None:
    # the compiled ``process`` and ``_xact`` (the commit's fields read as C) against Python
    records = list(_commits())
    setups = [dict(work_mem=1 << 20, start_lsn=0, startup=Startup(set()), spilled=False,
                   owns=None, share=None),
              dict(work_mem=1 << 20, start_lsn=0, startup=Startup(set()), spilled=True,
                   owns=None, share=None),
              dict(work_mem=1 << 20, start_lsn=5000, startup=Startup(set()), spilled=False,
                   owns=None, share=None),
              dict(work_mem=1 << 20, start_lsn=0, startup=Startup(), spilled=False,
                   owns=None, share=None),
              dict(work_mem=1 << 20, start_lsn=0, startup=Startup({12}), spilled=False,
                   owns=None, share=None),
              dict(work_mem=1 << 20, start_lsn=0, startup=Startup(set()), spilled=False,
                   owns=lambda xid: xid != 10, share=None),
              dict(work_mem=1 << 20, start_lsn=0, startup=Startup(set()), spilled=False,
                   owns=None, share=_alternate),
              dict(work_mem=1 << 20, start_lsn=0, startup=Startup(set()), spilled=False,
                   owns=None, share=shares_of(1, 2, 6))]
    setups += [{**s, "nested": False} for s in setups]
    for n, setup in enumerate(setups):
        setup.setdefault("nested", True)
        with native.use_python():
            want = _decode_all(records, tmp_path / f"py{n}", **setup)  # type: ignore[arg-type]
        with native.use_python(False):
            assert type(Decoder.process).__name__ == "cython_function_or_method"
            got = _decode_all(records, tmp_path / f"c{n}", **setup)  # type: ignore[arg-type]
        assert got == want, setup
    # the workload reaches what it is meant to: replays, errors, transactions left buffered
    outcomes = [o for o, *_ in want] + [o for o, *_ in _decode_all(records, tmp_path / "x",
                                                                   **setups[3])]
    calls = [c for _o, cs, *_ in want for c in cs]
    assert {"replay", "apply_catalog"} <= {c[0] for c in calls}  # type: ignore[index]
    assert any(o is None for o in outcomes)
    assert {WalCorruptError, DecodingError} <= {o[0] for o in outcomes if o}  # type: ignore[index]
