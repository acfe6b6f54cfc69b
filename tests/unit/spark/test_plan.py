"""Which segments a batch takes: from the progress position, contiguous, up to until; a new
stream from the install's message; never past a hole below archived segments."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.archive.layout import Layout
from cdclake.archive.local import LocalStore
from cdclake.archive.push import push_wal_file
from cdclake.catalog.install import InstallMessage
from cdclake.decoding.startup import Startup
from cdclake.errors import ArchiveGapError, DecodingError
from cdclake.lsn import SegmentName, format_lsn, segment_name
from cdclake.spark.plan import BatchPlan, Waiting, plan_batch
from cdclake.stream.progress import Progress
from tests.support.walfiles import SEGSIZE, history_text, segment_bytes

#: timeline 1 ended 0xA0 bytes into segment 4 (where a promoted standby's WAL ended)
SWITCH = 4 * SEGSIZE + 0xA0


def _store(tmp_path: Path, segnos: list[int], timeline: int = 1) -> LocalStore:
    store = LocalStore(tmp_path / "store")
    for s in segnos:
        _push(store, timeline, s)
    return store


def _push(store: LocalStore, timeline: int, segno: int) -> None:
    """Archive a segment as wal-push does: the object, then its manifest entry."""
    push_wal_file(store, Layout(), segment_name(timeline, segno, SEGSIZE),
                  segment_bytes(timeline, segno))


def _failover(tmp_path: Path, switch: int = SWITCH) -> LocalStore:
    """Timeline 1's segments 2-6, of which an old primary wrote 4-6 past the switch point
    after the promotion; timeline 2's history; none of timeline 2's segments yet."""
    store = _store(tmp_path, [2, 3, 4, 5, 6])
    store.put(Layout().history_key(2), history_text((1, switch)).encode())
    return store


def _names(*segments: tuple[int, int]) -> list[str]:
    return [segment_name(t, s, SEGSIZE) for t, s in segments]


def _progress(next_lsn: int, last_segno: int, timeline: int = 1) -> Progress:
    return Progress(seq=4, batch="000004-x", next_lsn=next_lsn,
                    last_segment=segment_name(1, last_segno, SEGSIZE), timeline=timeline,
                    last_lsn=next_lsn - 100, confirmed_lsn=0,
                    restart_lsn=next_lsn, start_lsn=0, db_oid=5, version=15,
                    segment_size=SEGSIZE, dictionary_key="dictionary/x.json",
                    startup=Startup(set(), continued=True))


def test_first_batch_takes_the_contiguous_run_and_stops_at_a_gap(tmp_path: Path) -> None:
    plan = plan_batch(_store(tmp_path, [3, 4, 5, 7]), Layout(), None, None)
    assert plan is not None
    assert plan.segments == [segment_name(1, s, SEGSIZE) for s in (3, 4, 5)]
    assert plan.name == f"000001-{segment_name(1, 3, SEGSIZE)}"
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
    assert nxt.tasks[0].read_from == 5 * SEGSIZE + 100
    assert nxt.tasks[1].read_from == 6 * SEGSIZE


def test_nothing_new(tmp_path: Path) -> None:
    assert plan_batch(LocalStore(tmp_path / "empty"), Layout(), None, None) is None
    store = _store(tmp_path, [3, 4])
    assert plan_batch(store, Layout(), _progress(5 * SEGSIZE, 4), None) is None
    # stopped inside its own last segment (the last record continues in a missing one)
    assert plan_batch(store, Layout(), _progress(4 * SEGSIZE + 500, 4), None) is None
    # ... but once that segment arrives, the batch re-reads from the record's start
    _push(store, 1, 5)
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


def test_segments_are_planned_along_the_newest_timelines_history(tmp_path: Path) -> None:
    """After a failover the old primary's segments past the switch are never planned: the
    batch waits for timeline 2's copy of the switch segment, then follows timeline 2."""
    store = _failover(tmp_path)
    plan = plan_batch(store, Layout(), None, None)
    assert plan is not None and plan.segments == _names((1, 2), (1, 3))
    assert plan.timeline == 2
    assert plan.tasks[-1].window == (SegmentName(1, 3),)  # not timeline 1's segment 4
    assert plan_batch(store, Layout(), _progress(4 * SEGSIZE, 3), None) is None
    for s in (4, 5):
        _push(store, 2, s)
    plan = plan_batch(store, Layout(), None, None)
    assert plan is not None and plan.segments == _names((1, 2), (1, 3), (2, 4), (2, 5))
    assert plan.tasks[1].window == (SegmentName(1, 3), SegmentName(2, 4), SegmentName(2, 5))
    # a stream that stopped before the switch (saved while timeline 1 was the newest) goes on
    nxt = plan_batch(store, Layout(), _progress(3 * SEGSIZE + 100, 3), None)
    assert nxt is not None and nxt.segments == _names((1, 3), (2, 4), (2, 5))
    # up to the switch point itself: the last record read ended there
    at = plan_batch(store, Layout(), _progress(SWITCH, 4), None)
    assert at is not None and at.segments == _names((2, 4), (2, 5))
    assert at.tasks[0].read_from == SWITCH


def test_a_stream_past_a_switch_point_stops_with_one_line(tmp_path: Path) -> None:
    """The history file came after timeline 1's WAL past the switch was decoded (an old
    primary archived it first): the stream holds changes timeline 2 never had, and says so."""
    store = _failover(tmp_path)
    past = _progress(5 * SEGSIZE + 100, 5)
    with pytest.raises(DecodingError) as err:
        plan_batch(store, Layout(), past, None)
    msg = str(err.value)
    assert "\n" not in msg
    for part in ("timeline 1", "timeline 2", format_lsn(SWITCH), format_lsn(past.next_lsn),
                 "00000002.history", "batch 000004-x", "start a new one"):
        assert part in msg, part
    # progress saved on timeline 2's path is on the path
    assert plan_batch(store, Layout(), _progress(SWITCH + 8, 4, timeline=2), None) is None


def test_a_switch_on_a_segment_boundary(tmp_path: Path) -> None:
    """Timeline 1 ended with a WAL switch at the end of segment 3 (a standby restoring from
    the archive is promoted there). The batch that read segment 3 also read the long page
    header of the next segment, and stopped past it: not past the switch."""
    store = _failover(tmp_path, 4 * SEGSIZE)
    _push(store, 2, 4)
    nxt = plan_batch(store, Layout(), _progress(4 * SEGSIZE + 40, 3), None)
    assert nxt is not None and nxt.segments == _names((2, 4))
    with pytest.raises(DecodingError, match="past 0/400000"):
        plan_batch(store, Layout(), _progress(4 * SEGSIZE + 48, 4), None)


def test_a_new_timeline_without_its_history_is_not_planned(tmp_path: Path) -> None:
    """Where timeline 2 branched off is unknown: which of timeline 1's segments are on the
    path is too."""
    store = _store(tmp_path, [2, 3, 4, 5])
    _push(store, 2, 4)
    with pytest.raises(DecodingError, match=r"timeline 2 are archived but not 00000002\.history"):
        plan_batch(store, Layout(), None, None)


# -- a new stream starts at the install's message ---------------------------------------------


def _install(from_lsn: int, end_lsn: int | None = None) -> InstallMessage:
    return InstallMessage(from_lsn, end_lsn if end_lsn is not None else from_lsn + 15_000)


def test_a_new_stream_skips_the_segments_wholly_before_the_install(tmp_path: Path) -> None:
    """The database archived before cdclake came: segments 2 and 3 hold nothing the stream
    decodes, and are in no batch."""
    store = _store(tmp_path, [2, 3, 4, 5, 6])
    plan = plan_batch(store, Layout(), None, None, install=_install(4 * SEGSIZE + 0x2B50))
    assert isinstance(plan, BatchPlan) and plan.segments == _names((1, 4), (1, 5), (1, 6))
    assert plan.read_from == 4 * SEGSIZE and plan.tasks[0].read_from == 4 * SEGSIZE
    assert plan.name == f"000001-{segment_name(1, 4, SEGSIZE)}"
    # a message that starts on a segment boundary
    at = plan_batch(store, Layout(), None, None, install=_install(5 * SEGSIZE))
    assert isinstance(at, BatchPlan) and at.segments == _names((1, 5), (1, 6))
    # an archive that begins after the install's position but before its message ended
    late = _store(tmp_path / "late", [5, 6])
    plan = plan_batch(late, Layout(), None, None,
                      install=_install(4 * SEGSIZE + 8, 5 * SEGSIZE + 8))
    assert isinstance(plan, BatchPlan) and plan.segments == _names((1, 5), (1, 6))
    # a hole among the segments before the install stops nothing
    holed = _store(tmp_path / "holed", [1, 3, 5, 6])
    plan = plan_batch(holed, Layout(), None, None, install=_install(5 * SEGSIZE + 100))
    assert isinstance(plan, BatchPlan) and plan.segments == _names((1, 5), (1, 6))


def test_a_new_stream_waits_for_the_install_segment(tmp_path: Path) -> None:
    store = _store(tmp_path, [2, 3])
    install = _install(5 * SEGSIZE + 0x2B50)
    waiting = plan_batch(store, Layout(), None, None, install=install)
    assert isinstance(waiting, Waiting)
    name = segment_name(1, 5, SEGSIZE)
    assert "\n" not in waiting.reason
    assert waiting.reason.startswith(f"waiting for the install's segment {name}: ")
    for part in (format_lsn(install.from_lsn), format_lsn(install.end_lsn),
                 "the 2 segment(s) archived before it", "pg_switch_wal()"):
        assert part in waiting.reason, part
    # segment 4 comes (before the install), then the install's
    _push(store, 1, 4)
    assert isinstance(plan_batch(store, Layout(), None, None, install=install), Waiting)
    _push(store, 1, 5)
    plan = plan_batch(store, Layout(), None, None, install=install)
    assert isinstance(plan, BatchPlan) and plan.segments == _names((1, 5))


def test_the_first_batch_reads_the_install_message_whole(tmp_path: Path) -> None:
    """Writers filled segment 3 between the install's position and its message, which ends in
    segment 4: the first batch waits for 4 and takes it, whatever its bounds say."""
    store = _store(tmp_path, [2, 3])
    install = _install(3 * SEGSIZE + SEGSIZE - 200, 4 * SEGSIZE + 900)
    waiting = plan_batch(store, Layout(), None, None, install=install)
    assert isinstance(waiting, Waiting)
    assert waiting.reason.startswith(f"waiting for the install's segment "
                                     f"{segment_name(1, 4, SEGSIZE)}: ")
    _push(store, 1, 4)
    _push(store, 1, 5)
    plan = plan_batch(store, Layout(), None, None, max_segments=1, install=install)
    assert isinstance(plan, BatchPlan) and plan.segments == _names((1, 3), (1, 4))
    # decoding no further than segment 3 leaves nothing to decode: the message is not whole
    assert plan_batch(store, Layout(), None, segment_name(1, 3, SEGSIZE), install=install) is None


def test_an_archive_that_begins_after_the_install_message_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path, [6, 7])
    with pytest.raises(DecodingError) as err:
        plan_batch(store, Layout(), None, None, install=_install(4 * SEGSIZE + 16))
    msg = str(err.value)
    assert "\n" not in msg
    for part in ("begins at LSN 0/600000", f"{format_lsn(4 * SEGSIZE + 16)}..",
                 "run `cdclake source install` again"):
        assert part in msg, part


# -- a hole below archived segments ------------------------------------------------------------


def test_a_hole_below_archived_segments_stops_the_plan(tmp_path: Path) -> None:
    """Segment 6 never comes by itself once 7 is archived (PostgreSQL archives in order):
    waiting for it would stall the stream silently. The batch before the hole is planned; the
    plan that must read the hole stops, naming it."""
    store = _store(tmp_path, [3, 4, 5, 7, 8])
    before = plan_batch(store, Layout(), _progress(3 * SEGSIZE, 2), None)
    assert isinstance(before, BatchPlan) and before.segments == _names((1, 3), (1, 4), (1, 5))
    with pytest.raises(ArchiveGapError) as err:
        plan_batch(store, Layout(), _progress(6 * SEGSIZE, 5), None)
    msg = str(err.value)
    name = segment_name(1, 6, SEGSIZE)
    assert "\n" not in msg
    for part in (f"WAL segment {name} is missing from the archive at {store.url()}",
                 f"{name} missing between archived segments", "past LSN 0/600000",
                 f"cdclake wal-push pg_wal/{name}"):
        assert part in msg, part
    # the last batch stopped inside segment 5 (its last record continues in 6)
    with pytest.raises(ArchiveGapError, match=f"WAL segment {name} is missing"):
        plan_batch(store, Layout(), _progress(5 * SEGSIZE + 500, 5), None)
    # two missing: both named
    store.delete(Layout().manifest_key(segment_name(1, 7, SEGSIZE)))
    with pytest.raises(ArchiveGapError, match=rf"{name}\.\.{segment_name(1, 7, SEGSIZE)} "
                                              r"\(2 segments\) missing"):
        plan_batch(store, Layout(), _progress(6 * SEGSIZE, 5), None)
    # a new stream whose install's segment is missing under an archived one
    with pytest.raises(ArchiveGapError, match=f"WAL segment {name} is missing"):
        plan_batch(store, Layout(), None, None, install=_install(6 * SEGSIZE + 100))


def test_the_head_is_waited_for_not_a_hole(tmp_path: Path) -> None:
    """Past the newest archived segment nothing is missing yet: the source is still writing
    it, or archiving it. A segment whose push died before its manifest entry was written is
    not archived yet either (the push's retry completes it) — until a later one is."""
    store = _store(tmp_path, [3, 4, 5])
    assert plan_batch(store, Layout(), _progress(6 * SEGSIZE, 5), None) is None
    store.put(Layout().wal_key(segment_name(1, 6, SEGSIZE)), segment_bytes(1, 6))
    assert plan_batch(store, Layout(), _progress(6 * SEGSIZE, 5), None) is None
    _push(store, 1, 7)
    with pytest.raises(ArchiveGapError, match=f"{segment_name(1, 6, SEGSIZE)} is missing"):
        plan_batch(store, Layout(), _progress(6 * SEGSIZE, 5), None)
    _push(store, 1, 6)  # the retry: the same bytes, now with their entry
    plan = plan_batch(store, Layout(), _progress(6 * SEGSIZE, 5), None)
    assert isinstance(plan, BatchPlan) and plan.segments == _names((1, 6), (1, 7))


def test_a_hole_across_a_timeline_switch_names_each_timeline(tmp_path: Path) -> None:
    """Timeline 2's copies of segments 4 and 5 are missing under its segment 6: a hole on the
    path, named on timeline 2 (timeline 1's segments 4-6 are an abandoned branch)."""
    store = _failover(tmp_path)
    _push(store, 2, 6)
    with pytest.raises(ArchiveGapError) as err:
        plan_batch(store, Layout(), _progress(4 * SEGSIZE, 3), None)
    assert (f"{segment_name(2, 4, SEGSIZE)}..{segment_name(2, 5, SEGSIZE)} (2 segments) "
            "missing between archived segments") in str(err.value)
