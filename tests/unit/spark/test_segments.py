"""Reading a batch's segments on Spark: the scan's summary, and the records read again in
pieces, over the committed decoding fixtures (real WAL, records straddling pages and
segments)."""

from __future__ import annotations

import dataclasses
import pickle
import struct
from collections import Counter
from pathlib import Path

import pytest

from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.archive.push import push_wal_file
from cdclake.decoding.startup import Startup
from cdclake.errors import SegmentDigestError, WalCorruptError
from cdclake.spark.job import _check_joins
from cdclake.spark.plan import BatchPlan, plan_batch
from cdclake.spark.progress import Progress
from cdclake.spark.segments import ParsedSegment, SegmentTask, scan_segment, segment_records
from cdclake.wal.lsn import SegmentName, format_lsn, segment_name
from cdclake.wal.reader import PAGE_SIZE, XLP_LONG_HEADER, XLogReader
from cdclake.wal.source import DirectorySource
from tests.oracle.wal.pgwaldump import row_of
from tests.twins import both_implementations  # noqa: F401 - autouse: both implementations
from tests.unit.archive.walfiles import padding_offset, sha
from tests.unit.decoding.fixture import DecodingFixture
from tests.unit.wal.conftest import WalFixture

SIZE = 16 * 1024 * 1024  #: of the segments of the test without WAL
XLOG_SWITCH = 0x40


def _store(segments: Path, tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "store")
    for path in sorted(segments.iterdir()):
        push_wal_file(store, Layout(), path.name, path.read_bytes())
    return store


def _read(task: SegmentTask, store: LocalStore, db_oid: int, size: int) -> list[object]:
    return [(kind, row_of(rec), bytes(rec.main_data))
            for kind, rec in segment_records(task, store, Layout(), size, db_oid)]


def _pieces_read_what_their_segment_reads(segments: Path, db_oid: int, key: bytes,
                                          tmp_path: Path) -> int:
    """However a segment is cut, its pieces together send the shuffle exactly the records a
    task reading the whole segment sends, in order; the scan counts them. How many segments
    were cut."""
    store = _store(segments, tmp_path)
    plan = plan_batch(store, Layout(), None, None)
    assert plan is not None
    size = plan.segment_size
    cut = 0
    for task in plan.tasks:
        summary = scan_segment(task, store, Layout(), size, db_oid, key)
        whole = _read(task, store, db_oid, size)
        assert summary.records == len(whole)
        for n in (2, 5, 64):
            pieces = task.pieces(n, summary.last_lsn)
            assert [p.read_from for p in pieces[1:]] == [p.end for p in pieces[:-1]]
            assert pieces[0].read_from == task.read_from and pieces[-1].end == task.end
            assert [p.keep_first for p in pieces] == [task.keep_first] + [False] * (
                len(pieces) - 1)
            assert all(p.read_from % PAGE_SIZE == 0 for p in pieces[1:])
            assert [r for p in pieces for r in _read(p, store, db_oid, size)] == whole
            cut += len(pieces) > 1
    return cut


def test_pieces_read_what_their_segment_reads(decfix: DecodingFixture, tmp_path: Path) -> None:
    assert _pieces_read_what_their_segment_reads(decfix.dir, decfix.db_oid, decfix.ddl_key,
                                                 tmp_path)


def test_pieces_of_segments_ending_in_a_switch_or_a_long_record(walfix: WalFixture,
                                                                tmp_path: Path) -> None:
    """The WAL fixtures hold records longer than a segment and, in PostgreSQL 15's, a WAL
    switch, after which the rest of the segment is zeroed: no piece may start there. It is
    followed here by a segment whose first page is valid, so zeroes there are corruption to
    a reader that starts in them, not the end of WAL."""
    wal = tmp_path / "wal"
    wal.mkdir()
    for path in walfix.segments:
        (wal / path.name).write_bytes(path.read_bytes())
    records = list(XLogReader(DirectorySource(wal)))
    last = walfix.segments[-1]
    if records[-1].rmid == 0 and records[-1].info & 0xF0 == XLOG_SWITCH:
        data = last.read_bytes()
        size = len(data)
        nxt = walfix.segment_start(last) + size
        page = bytearray(size)
        page[:PAGE_SIZE] = data[:PAGE_SIZE]
        magic, _info, tli = struct.unpack_from("<HHI", data)
        struct.pack_into("<HHIQI", page, 0, magic, XLP_LONG_HEADER, tli, nxt, 0)
        page[40:PAGE_SIZE] = bytes(PAGE_SIZE - 40)
        (wal / segment_name(tli, nxt // size, size)).write_bytes(bytes(page))
    db_oid = Counter(b.rlocator.db for r in records for b in r.blocks).most_common(1)[0][0]
    assert _pieces_read_what_their_segment_reads(wal, db_oid, b"k" * 32, tmp_path)


def test_pieces_start_no_later_than_the_last_record() -> None:
    seg = SegmentName(1, 3)
    task = SegmentTask(seg, 3 * SIZE + 4000, 4 * SIZE, True, (seg,))
    pieces = task.pieces(4, 3 * SIZE + 10 * PAGE_SIZE)
    assert len(pieces) == 4 and pieces[0].read_from == task.read_from
    assert all(p.read_from <= 3 * SIZE + 10 * PAGE_SIZE for p in pieces)
    assert pieces[-1].end == task.end
    assert task.pieces(1, 4 * SIZE - 100) == [task]
    assert task.pieces(4, None) == [task]  # no record starts in it
    assert task.pieces(4, task.read_from + PAGE_SIZE) == [task]  # too little to cut


def test_routed_records_pickle_to_equal_records(decfix: DecodingFixture,
                                                tmp_path: Path) -> None:
    """Records cross the shuffle pickled: compactly (their fields, not their slot dicts), and
    back equal, block references and images included."""
    store = _store(decfix.dir, tmp_path)
    plan = plan_batch(store, Layout(), None, None)
    assert plan is not None
    recs = [rec for _, rec in segment_records(plan.tasks[0], store, Layout(),
                                             plan.segment_size, decfix.db_oid)]
    assert any(b.image is not None for r in recs for b in r.blocks)
    back = pickle.loads(pickle.dumps(recs, 5))
    assert back == recs and b"main_data" not in pickle.dumps(recs[0], 5)


def _scan(plan: BatchPlan, store: LocalStore) -> list[ParsedSegment]:
    return [scan_segment(t, store, Layout(), plan.segment_size, 0, b"") for t in plan.tasks]


def test_a_batch_links_back_to_the_last_record_the_previous_one_read(wal15: WalFixture,
                                                                     tmp_path: Path) -> None:
    """The progress keeps the last record's LSN; the next batch's first record must link back
    to it. A broken link names both sides' timelines, and says when they differ."""
    store = _store(wal15.dir, tmp_path)
    first = plan_batch(store, Layout(), None, wal15.segments[1].name)
    assert first is not None and len(first.tasks) == 2
    done = _scan(first, store)
    last = done[-1].last_lsn
    assert last is not None
    progress = Progress(seq=1, batch=first.name, next_lsn=done[-1].end_of_wal,
                        last_segment=first.segments[-1], timeline=1, last_lsn=last,
                        confirmed_lsn=0, restart_lsn=0, start_lsn=0, db_oid=0, version=15,
                        segment_size=wal15.segment_size, dictionary_key="d",
                        startup=Startup(set()))
    nxt = plan_batch(store, Layout(), progress, None)
    assert nxt is not None
    scanned = _scan(nxt, store)
    _check_joins(nxt, scanned, progress)
    wrong = dataclasses.replace(progress, last_lsn=last - 8)
    with pytest.raises(WalCorruptError) as err:
        _check_joins(nxt, scanned, wrong)
    assert (f"links back to {format_lsn(last)}, not to the last record batch {first.name} "
            f"read, {format_lsn(last - 8)} (timeline 1)") in str(err.value)
    assert "does not continue" not in str(err.value)
    # the same WAL as timeline 2's copy, after a switch where the first batch stopped
    store.put(Layout().history_key(2),
              f"1\t{format_lsn(progress.next_lsn)}\tpromoted\n".encode())
    size = wal15.segment_size
    path = next(p for p in wal15.segments
                if wal15.segment_start(p) // size == progress.next_lsn // size)
    push_wal_file(store, Layout(), "00000002" + path.name[8:], path.read_bytes())
    on_two = plan_batch(store, Layout(), progress, None)
    assert on_two is not None and {t.segment.timeline for t in on_two.tasks} == {2}
    scanned = _scan(on_two, store)
    _check_joins(on_two, scanned, progress)
    with pytest.raises(WalCorruptError, match="timeline 2's WAL does not continue timeline "
                                              "1's here"):
        _check_joins(on_two, scanned, wrong)


def test_a_flipped_padding_byte_is_read_back_as_damage(wal15: WalFixture, tmp_path: Path) -> None:
    """A byte of a record's alignment padding flipped in the stored copy: the WAL reads the
    same (no CRC covers it), but the scan reports the segment as damaged — its sha256 is not
    the archived one — for the driver to stop the batch on; the second read refuses it too."""
    store = _store(wal15.dir, tmp_path)
    path = wal15.segments[1]
    offset = padding_offset(path)
    flipped = bytearray(path.read_bytes())
    flipped[offset] ^= 0xFF
    copy = tmp_path / "flipped" / path.name
    copy.parent.mkdir()
    copy.write_bytes(bytes(flipped))
    assert [row_of(r) for r in XLogReader(DirectorySource(copy))] == [
        row_of(r) for r in XLogReader(DirectorySource(path))]
    plan = plan_batch(store, Layout(), None, None)
    assert isinstance(plan, BatchPlan)
    assert [s.damaged for s in _scan(plan, store)] == [None] * len(plan.tasks)
    key = Layout().wal_key(path.name)
    store.delete(key)
    store.put(key, bytes(flipped))
    scanned = _scan(plan, store)
    damaged = [s.damaged for s in scanned]
    # the task of the segment before it reads its head too, for a record straddling into it
    assert damaged[2:] == [None] * (len(plan.tasks) - 2) and None not in damaged[:2]
    for msg in damaged[:2]:
        assert msg is not None and "\n" not in msg
        for part in (f"has sha256 {sha(bytes(flipped))}", f"not the {sha(path.read_bytes())}",
                     f"(segment {path.name})"):
            assert part in msg, part
    with pytest.raises(SegmentDigestError):
        list(segment_records(plan.tasks[1], store, Layout(), plan.segment_size, 0))
