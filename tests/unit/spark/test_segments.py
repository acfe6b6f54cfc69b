"""Reading a batch's segments on Spark: the scan's summary, and the records every partition
reads again, over the committed decoding fixtures (real WAL, records straddling pages and
segments)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from cdclake import native
from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.archive.push import push_wal_file
from cdclake.decoding.startup import Startup
from cdclake.errors import SegmentDigestError, WalCorruptError
from cdclake.lsn import format_lsn
from cdclake.spark.job import _check_joins
from cdclake.spark.plan import BatchPlan, plan_batch
from cdclake.spark.segments import ParsedSegment, scan_segments, task_records
from cdclake.stream.progress import Progress
from cdclake.wal.reader import XLogReader
from cdclake.wal.source import DirectorySource
from tests.support.pgwaldump import row_of
from tests.support.twins import both_implementations  # noqa: F401 - autouse: both implementations
from tests.support.walfiles import padding_offset, sha
from tests.unit.decoding.fixture import DecodingFixture
from tests.unit.wal.conftest import WalFixture

SIZE = 16 * 1024 * 1024  #: of the segments of the test without WAL
XLOG_SWITCH = 0x40


def _store(segments: Path, tmp_path: Path) -> LocalStore:
    store = LocalStore(tmp_path / "store")
    for path in sorted(segments.iterdir()):
        push_wal_file(store, Layout(), path.name, path.read_bytes())
    return store


def test_the_tasks_read_every_record_of_the_batch_once(decfix: DecodingFixture,
                                                       tmp_path: Path) -> None:
    """What each partition feeds its decoder: the tasks' records, one after the other, are
    the WAL's records as one reader of the whole archive reads them (records straddling
    segments included, each once)."""
    store = _store(decfix.dir, tmp_path)
    plan = plan_batch(store, Layout(), None, None)
    assert plan is not None and len(plan.tasks) > 1
    got: Counter[str] = Counter()
    get = store.get
    store.get = lambda key: (got.update([key]), get(key))[1]  # type: ignore[method-assign]
    read = [(row_of(rec), bytes(rec.main_data))
            for rec in task_records(plan.tasks, store, Layout(), plan.segment_size)]
    whole = [(row_of(rec), bytes(rec.main_data)) for rec in XLogReader(DirectorySource(decfix.dir))]
    assert read == whole and read
    segments = {k: n for k, n in got.items() if k.startswith(Layout().wal_prefix())}
    assert len(segments) == len(plan.tasks) and set(segments.values()) == {1}  # each once


def _scan(plan: BatchPlan, store: LocalStore) -> list[ParsedSegment]:
    return list(scan_segments(plan.tasks, store, Layout(), plan.segment_size, 0, b""))


def test_the_compiled_scan_finds_the_facts_of_the_reference(decfix: DecodingFixture,
                                                             tmp_path: Path) -> None:
    """The scan builds only transaction and message records and takes the others' facts
    from what the walk tells its sieve (:mod:`cdclake.spark.facts`): compiled, the same
    summaries as in Python, over WAL with subtransactions, aborts, two-phase, TOAST,
    speculative inserts, TRUNCATE, rewrites, messages and the install's dictionary."""
    assert "cdclake.spark.facts.collector" in native.twins()  # built, as make builds it
    store = _store(decfix.dir, tmp_path)
    plan = plan_batch(store, Layout(), None, None)
    assert isinstance(plan, BatchPlan)
    scans = []
    for python in (False, True):
        with native.use_python(python):
            scans.append(list(scan_segments(plan.tasks, store, Layout(), plan.segment_size,
                                            decfix.db_oid, decfix.ddl_key)))
    assert scans[0] == scans[1]
    facts = [s.facts for s in scans[0]]
    assert any(f.parent_of for f in facts) and any(f.unsplit for f in facts)
    assert [s.dictionary_lsn for s in scans[0] if s.dictionary_lsn] and all(
        s.first_lsn and s.last_lsn for s in scans[0])


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
        list(task_records(plan.tasks[1:2], store, Layout(), plan.segment_size))
