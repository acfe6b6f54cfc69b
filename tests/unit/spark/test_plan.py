"""Which segments a batch takes: from the progress position, contiguous, up to until."""

from __future__ import annotations

from pathlib import Path

from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.decoding.startup import Startup
from cdclake.spark.plan import plan_batch
from cdclake.spark.progress import Progress
from cdclake.wal.lsn import segment_name
from tests.unit.archive.walfiles import SEGSIZE, segment_bytes


def _store(tmp_path: Path, segnos: list[int]) -> LocalStore:
    store = LocalStore(tmp_path / "store")
    for s in segnos:
        store.put(Layout().wal_key(segment_name(1, s, SEGSIZE)), segment_bytes(1, s))
    return store


def _progress(next_lsn: int, last_segno: int) -> Progress:
    return Progress(seq=4, batch="000004-x", next_lsn=next_lsn,
                    last_segment=segment_name(1, last_segno, SEGSIZE), confirmed_lsn=0,
                    restart_lsn=next_lsn, start_lsn=0, db_oid=5, version=15,
                    segment_size=SEGSIZE, dictionary_key="dictionary/x.json",
                    startup=Startup(set(), continued=True))


def test_first_batch_takes_the_contiguous_run_and_stops_at_a_gap(tmp_path: Path) -> None:
    plan = plan_batch(_store(tmp_path, [3, 4, 5, 7]), Layout(), None, None)
    assert plan is not None
    assert plan.segments == [segment_name(1, s, SEGSIZE) for s in (3, 4, 5)]
    assert plan.name == f"000001-{segment_name(1, 3, SEGSIZE)}"
    assert plan.tasks[0].keep_first and not plan.tasks[1].keep_first
    assert plan.tasks[0].read_from == 3 * SEGSIZE
    # a task may read the following segments to finish a straddling record
    assert [s.segno for s in plan.tasks[2].window] == [5]
    assert [s.segno for s in plan.tasks[0].window] == [3, 4, 5]


def test_until_segment_and_resume_inside_a_segment(tmp_path: Path) -> None:
    store = _store(tmp_path, [3, 4, 5, 6])
    first = plan_batch(store, Layout(), None, segment_name(1, 4, SEGSIZE))
    assert first is not None and first.segments == [segment_name(1, s, SEGSIZE) for s in (3, 4)]
    # the previous batch read segment 4 and its last record ended 100 bytes into segment 5
    nxt = plan_batch(store, Layout(), _progress(5 * SEGSIZE + 100, 4), None)
    assert nxt is not None and nxt.seq == 5
    assert [t.segment.segno for t in nxt.tasks] == [5, 6]
    assert nxt.tasks[0].read_from == 5 * SEGSIZE + 100 and not nxt.tasks[0].keep_first
    assert nxt.tasks[1].read_from == 6 * SEGSIZE


def test_nothing_new(tmp_path: Path) -> None:
    assert plan_batch(LocalStore(tmp_path / "empty"), Layout(), None, None) is None
    store = _store(tmp_path, [3, 4])
    assert plan_batch(store, Layout(), _progress(5 * SEGSIZE, 4), None) is None
    # stopped inside its own last segment (the last record continues in a missing one)
    assert plan_batch(store, Layout(), _progress(4 * SEGSIZE + 500, 4), None) is None
    # ... but once that segment arrives, the batch re-reads from the record's start
    store.put(Layout().wal_key(segment_name(1, 5, SEGSIZE)), segment_bytes(1, 5))
    plan = plan_batch(store, Layout(), _progress(4 * SEGSIZE + 500, 4), None)
    assert plan is not None and plan.tasks[0].read_from == 4 * SEGSIZE + 500


def test_a_backlog_is_cut_into_bounded_batches(tmp_path: Path) -> None:
    store = _store(tmp_path, [3, 4, 5, 6, 7])
    by_count = plan_batch(store, Layout(), None, None, max_segments=2)
    assert by_count is not None and [t.segment.segno for t in by_count.tasks] == [3, 4]
    # the last task still reads past the cut to finish a record that straddles it
    assert [s.segno for s in by_count.tasks[-1].window] == [4, 5, 6, 7]
    by_bytes = plan_batch(store, Layout(), None, None, max_bytes=3 * SEGSIZE + 1)
    assert by_bytes is not None and [t.segment.segno for t in by_bytes.tasks] == [3, 4, 5]
    tiny = plan_batch(store, Layout(), None, None, max_bytes=1)  # never less than a segment
    assert tiny is not None and [t.segment.segno for t in tiny.tasks] == [3]
    both = plan_batch(store, Layout(), _progress(5 * SEGSIZE, 4), None, max_segments=4,
                      max_bytes=2 * SEGSIZE)
    assert both is not None and [t.segment.segno for t in both.tasks] == [5, 6]
