"""The compiled ``Decoder._heap`` and ``Decoder._heap2`` (``decoding/_decode.pyx``) against
their Python reference, record by record: heap INSERT, UPDATE, DELETE and COPY's
MULTI_INSERT, whole, cut short at every length, with every flag byte, with their block data
cut, without blocks and with a payload that is not contiguous. Both must queue the same
changes (every field, in the same transaction, with the same work_mem accounting and the same
spill), count the same statistics, and raise the same error; as one decoder or as a worker of
a parallel decode, whose share of the rows it queues, placeholders for the others'. No
server."""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from cdclake.catalog.dictionary import Dictionary
from cdclake.decoding import _decode  # type: ignore[attr-defined]
from cdclake.decoding.changes import ELSEWHERE
from cdclake.decoding.decode import Decoder
from cdclake.decoding.filter import Filter
from cdclake.decoding.reorder import ReorderBuffer
from cdclake.wal.record import RM_HEAP2_ID, RM_HEAP_ID, BlockRef, RelFileLocator, XLogRecord
from cdclake.wal.rmgr import heap
from tests.unit.decoding.records import DB, USER_REL, Recording, heap_record, multi_insert

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


def _run(method: Callable[[Decoder, XLogRecord], None], records: list[XLogRecord],
         spill: Path, work_mem: int, skip_before: int,
         share: Callable[[int, int], bool] | None = None) -> object:
    rec = Recording()
    d = Decoder(db_oid=DB, buffer=ReorderBuffer(work_mem, spill, 1 << 20), replay=rec,
                filter=Filter(Dictionary()), start_lsn=0, version=15, tracker=rec,
                skip_before=skip_before, share=share)
    if share is not None:  # TOAST chunks queued before: the others' rows leave placeholders
        for xid in (10, 12, 14):
            d.rb.txn(xid, 1).toast_pending = True
    outcomes = []
    for r in records:
        try:
            method(d, r)
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
    configs = [(1 << 20, 0, None), (600, 0, None), (1 << 20, 450, None),  # spill; cut
               (1 << 20, 0, _alternate), (1 << 20, 450, _alternate)]  # a parallel worker's
    for work_mem, skip_before, share in configs:
        for fast, reference, batch in ((_decode._heap, Decoder._python_heap, heaps),
                                       (_decode._heap2, Decoder._python_heap2, copies)):
            where = f"{fast.__name__}-{work_mem}-{skip_before}-{share is None}"
            want = _run(reference, batch, tmp_path / f"py-{where}", work_mem, skip_before, share)
            got = _run(fast, batch, tmp_path / f"c-{where}", work_mem, skip_before, share)
            assert got == want, where
    # the workload reaches what it is meant to: changes queued, errors raised, spills
    outcomes, (txns, _size, spilled, _stats) = _run(Decoder._python_heap2, copies,
                                                    tmp_path / "check", 600, 0)
    assert any(outcomes) and any(o is None for o in outcomes) and spilled > 0
    assert txns[14][2] or spilled
    # a worker's share: rows of its stripes queued, placeholders for the others'
    _outcomes, (txns, _size, _spilled, _stats) = _run(Decoder._python_heap, heaps,
                                                      tmp_path / "share", 1 << 20, 0, _alternate)
    actions = {c[0] for _size, _n, changes in txns.values() for c in changes}
    assert ELSEWHERE in actions and actions - {ELSEWHERE}
