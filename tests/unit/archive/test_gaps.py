"""check_continuity: holes, the head, and the path through timeline switches."""

from __future__ import annotations

from cdclake.archive.gaps import Gap, GapKind, check_continuity
from cdclake.lsn import SegmentName, TimelineSwitch
from cdclake.wal.timelines import timeline_for_segno

MB = 1 << 20


def segs(tli: int, *segnos: int) -> list[SegmentName]:
    return [SegmentName(tli, s) for s in segnos]


def gaps(entries: list[SegmentName], history: dict[int, list[TimelineSwitch]] | None = None,
         **kw: int) -> list[Gap]:
    return check_continuity(entries, history or {}, segment_size=MB, **kw)


def test_contiguous_segments_have_no_gap() -> None:
    assert gaps(segs(1, 3, 4, 5, 6)) == []
    assert gaps([]) == []


def test_the_archive_start_is_not_a_gap() -> None:
    # archives begin at a base backup: nothing before the first segment is expected
    assert gaps(segs(1, 100, 101)) == []


def test_hole_between_archived_segments_is_missing() -> None:
    found = gaps(segs(1, 1, 2, 5, 6, 8))
    assert found == [Gap(GapKind.MISSING, 1, 3, 4, MB), Gap(GapKind.MISSING, 1, 7, 7, MB)]
    assert found[0].first_segment == "000000010000000000000003"
    assert str(found[0]) == ("000000010000000000000003..000000010000000000000004 "
                             "(2 segments) missing between archived segments")
    assert str(found[1]) == "000000010000000000000007 missing between archived segments"


def test_head_gap_up_to_but_not_including_the_segment_being_written() -> None:
    head = 9 * MB + 1234  # the source is writing segment 9
    assert gaps(segs(1, 1, 2, 3), head_lsn=head) == [Gap(GapKind.HEAD, 1, 4, 8, MB)]
    assert gaps(segs(1, 1, 2, 3), head_lsn=4 * MB) == []  # 3 just finished, 4 being written
    assert "not archived yet" in str(gaps(segs(1, 1), head_lsn=3 * MB)[0])


def test_new_timeline_continues_from_the_switch_segment() -> None:
    # TLI 1 ended inside segment 3; TLI 2's segment 3 holds TLI 1's WAL up to the switch
    history = {2: [TimelineSwitch(1, 3 * MB + 0x2000, "")]}
    archive = segs(1, 1, 2, 3) + segs(2, 3, 4, 5)
    assert gaps(archive, history) == []
    # TLI 1's own segment 3 (often a .partial) is not needed
    assert gaps(segs(1, 1, 2) + segs(2, 3, 4), history) == []
    # an abandoned branch (TLI 1 past its switch) is neither a gap nor filler
    assert gaps(segs(1, 1, 2, 3, 4, 5) + segs(2, 3, 4, 5), history) == []
    assert gaps(segs(1, 1, 2, 3, 4, 5) + segs(2, 3, 5), history) == [
        Gap(GapKind.MISSING, 2, 4, 4, MB)]


def test_missing_switch_segment_is_named_on_the_new_timeline() -> None:
    history = {2: [TimelineSwitch(1, 3 * MB + 0x2000, "")]}
    found = gaps(segs(1, 1, 2, 3) + segs(2, 4, 5), history)
    assert found == [Gap(GapKind.MISSING, 2, 3, 3, MB)]
    assert found[0].first_segment == "000000020000000000000003"


def test_switch_on_a_segment_boundary() -> None:
    # TLI 1 ended exactly at the end of segment 2: TLI 2 starts with segment 3
    history = {2: [TimelineSwitch(1, 3 * MB, "")]}
    assert timeline_for_segno(2, 2, history[2], MB) == 1
    assert timeline_for_segno(3, 2, history[2], MB) == 2
    assert gaps(segs(1, 1, 2) + segs(2, 3, 4), history) == []


def test_a_hole_across_a_switch_is_split_per_timeline() -> None:
    history = {2: [TimelineSwitch(1, 4 * MB + 8, "")]}
    assert gaps(segs(1, 1, 2) + segs(2, 6), history) == [
        Gap(GapKind.MISSING, 1, 3, 3, MB), Gap(GapKind.MISSING, 2, 4, 5, MB)]


def test_three_timelines_follow_the_newest_history() -> None:
    history = {
        2: [TimelineSwitch(1, 3 * MB + 8, "")],
        3: [TimelineSwitch(1, 3 * MB + 8, ""), TimelineSwitch(2, 6 * MB + 8, "")],
    }
    archive = segs(1, 1, 2) + segs(2, 3, 4, 5, 6, 7) + segs(3, 6, 7, 8)
    assert gaps(archive, history) == []  # TLI 2's segments 6 and 7 are off the path
    assert gaps(segs(1, 1, 2) + segs(2, 3, 5) + segs(3, 6, 8), history) == [
        Gap(GapKind.MISSING, 2, 4, 4, MB), Gap(GapKind.MISSING, 3, 7, 7, MB)]


def test_head_on_a_new_timeline() -> None:
    history = {2: [TimelineSwitch(1, 3 * MB + 8, "")]}
    assert gaps(segs(1, 1, 2), history, head_lsn=5 * MB, head_timeline=2) == [
        Gap(GapKind.HEAD, 2, 3, 4, MB)]


def test_missing_history_of_the_newest_timeline() -> None:
    found = gaps(segs(1, 1, 2) + segs(2, 3, 4))
    assert found == [Gap(GapKind.HISTORY, 2, 3, 3, MB)]
    assert "00000002.history" in str(found[0])


def test_a_single_timeline_needs_no_history_file() -> None:
    assert gaps(segs(3, 10, 11, 12)) == []
