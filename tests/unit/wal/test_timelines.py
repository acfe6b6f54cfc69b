"""The path through the timeline history files: which timeline's WAL is the stream, and where
a timeline became an abandoned branch."""

from __future__ import annotations

from cdclake.lsn import SegmentName, TimelineSwitch
from cdclake.wal.timelines import TimelinePath, newest_path, timeline_path
from tests.support.twins import no_twin  # noqa: F401 - no twinned code here: runs once

MB = 1 << 20
#: timeline 1 ended 0xA0 bytes into segment 8 (a promotion after a clean shutdown's checkpoint)
SWITCH = 8 * MB + 0xA0
TWO = (TimelineSwitch(1, SWITCH, ""),)


def test_an_ancestor_leaves_the_path_where_the_history_says_it_ended() -> None:
    path = TimelinePath(2, TWO)
    assert path.leaves(1) == SWITCH
    assert path.leaves(2) is None
    assert path.leaves(3) is None  # newer than anything known: nothing abandoned it
    assert [path.timeline_of(s, MB) for s in (7, 8, 9)] == [1, 2, 2]
    assert (path.timeline_at(SWITCH - 1), path.timeline_at(SWITCH)) == (1, 2)


def test_segments_past_the_switch_are_abandoned_the_switch_segment_is_not() -> None:
    path = TimelinePath(2, TWO)
    assert path.abandons(SegmentName(1, 7), MB) is None
    # the switch segment's WAL before the switch is the stream's (its .partial too)
    assert path.abandons(SegmentName(1, 8), MB) is None
    assert path.abandons(SegmentName(1, 8, partial=True), MB) is None
    assert path.abandons(SegmentName(1, 9), MB) == SWITCH
    assert path.abandons(SegmentName(2, 9), MB) is None
    # a switch on a segment boundary abandons the segment starting there
    boundary = TimelinePath(2, (TimelineSwitch(1, 8 * MB, ""),))
    assert boundary.abandons(SegmentName(1, 7), MB) is None
    assert boundary.abandons(SegmentName(1, 8), MB) == 8 * MB


def test_a_sibling_branch_leaves_where_the_histories_part() -> None:
    # timeline 2 branched off 1 at 4 MB; timeline 3 branched off 1 later, at 6 MB: 2 is a
    # sibling, abandoned from 4 MB on, and 1 is the path up to 6 MB
    histories = {2: [TimelineSwitch(1, 4 * MB, "")], 3: [TimelineSwitch(1, 6 * MB, "")]}
    path = timeline_path({1, 2, 3}, histories)
    assert (path.timeline, path.missing) == (3, None)
    assert path.leaves(2) == 4 * MB
    assert path.leaves(1) == 6 * MB
    assert path.abandons(SegmentName(1, 5), MB) is None  # timeline 1's, on timeline 3's path
    assert path.abandons(SegmentName(2, 5), MB) == 4 * MB
    # branched off 1 earlier than its sibling: abandoned where 3 left 1
    early = timeline_path({1, 2, 3}, {2: [TimelineSwitch(1, 7 * MB, "")],
                                      3: [TimelineSwitch(1, 6 * MB, "")]})
    assert early.leaves(2) == 6 * MB
    # a timeline off the path whose history is unknown: all of it is abandoned
    assert timeline_path({2, 3}, {3: [TimelineSwitch(1, 6 * MB, "")]}).leaves(2) == 0


def test_the_newest_timeline_without_its_history_is_missing() -> None:
    path = timeline_path({1, 2}, {})
    assert (path.timeline, path.missing) == (1, 2)
    assert path.leaves(1) is None  # nothing known abandons timeline 1 (yet)
    # the newest timeline that has a history, then
    three = timeline_path({1, 2, 3}, {2: list(TWO)})
    assert (three.timeline, three.history, three.missing) == (2, TWO, 3)
    # one timeline needs no history, whatever its number
    assert timeline_path({3}, {}) == TimelinePath(3)
    assert timeline_path({4, 5}, {}).timeline == 4


def test_newer_timelines_are_found_by_their_history_files() -> None:
    """As PostgreSQL's findNewestTimeLine: a history file archived before any segment of its
    timeline already says where the old one ended."""
    files = {2: list(TWO), 3: [*TWO, TimelineSwitch(2, 9 * MB, "")]}
    asked: list[int] = []

    def read(tli: int) -> list[TimelineSwitch] | None:
        asked.append(tli)
        return files.get(tli)

    path = newest_path({1}, read)
    assert (path.timeline, path.leaves(1), path.leaves(2)) == (3, SWITCH, 9 * MB)
    assert asked == [2, 3, 4]  # timeline 1 has no history file; 4 is the first missing
    assert newest_path([], lambda tli: None) == TimelinePath(1)
