"""Is the archived WAL one unbroken stream? Gap classification, after WAL-G's wal-verify.

With timelines, "the stream" is a path: the newest timeline's history file lists where each
ancestor ended, and segment number N belongs to the newest timeline that had begun by the end
of N — the timeline switch segment itself is taken from the *new* timeline, which holds a copy
of the old timeline's WAL up to the switch point (PostgreSQL's XLogInitNewTimeline). Segments
of an abandoned branch (an old timeline past its switch point) are not on the path and are
not gaps.

Classification:

- ``missing``: a segment on the path between two archived ones. Decoding cannot pass it.
- ``head``: after the newest archived segment and before the source's current segment
  (given as ``head_lsn``): written but not archived yet — delayed, or stuck in the archiver.
- ``history``: the archive holds more than one timeline but not the newest one's ``.history``
  file, so the path from the older timelines to it is unknown. (An archive of a single
  timeline needs no history file, whatever its number.)

Everything here is pure: callers pass names and parsed history files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise
from typing import Protocol

from cdclake.wal.lsn import DEFAULT_SEGMENT_SIZE, TimelineSwitch, segment_name, segno_of


class GapKind(StrEnum):
    MISSING = "missing"
    HEAD = "head"
    HISTORY = "history"


class HasSegment(Protocol):
    """Anything naming a segment: SegmentName, ManifestEntry."""

    @property
    def timeline(self) -> int: ...

    @property
    def segno(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Gap:
    """Segments ``first_segno..last_segno`` (inclusive) of ``timeline`` that are missing."""

    kind: GapKind
    timeline: int
    first_segno: int
    last_segno: int
    segment_size: int = DEFAULT_SEGMENT_SIZE

    @property
    def first_segment(self) -> str:
        return segment_name(self.timeline, self.first_segno, self.segment_size)

    @property
    def last_segment(self) -> str:
        return segment_name(self.timeline, self.last_segno, self.segment_size)

    @property
    def count(self) -> int:
        return self.last_segno - self.first_segno + 1

    def __str__(self) -> str:
        if self.kind is GapKind.HISTORY:
            return (f"timeline {self.timeline} has no {self.timeline:08X}.history in the "
                    "archive: the path through the timeline switch is unknown")
        span = (self.first_segment if self.count == 1
                else f"{self.first_segment}..{self.last_segment} ({self.count} segments)")
        if self.kind is GapKind.HEAD:
            return f"{span} written by the source but not archived yet"
        return f"{span} missing between archived segments"


def timeline_for_segno(segno: int, newest: int, history: Sequence[TimelineSwitch],
                       segment_size: int = DEFAULT_SEGMENT_SIZE) -> int:
    """The timeline whose copy of segment ``segno`` is on the path to ``newest``.

    ``history`` is the newest timeline's history (its ancestors, oldest first). A timeline
    owns the segments wholly before its switch point; the segment holding the switch point
    belongs to the child.
    """
    for entry in history:
        if segno < segno_of(entry.switch_lsn, segment_size):
            return entry.parent
    return newest


def check_continuity(entries: Iterable[HasSegment],
                     history: Mapping[int, Sequence[TimelineSwitch]], *,
                     segment_size: int = DEFAULT_SEGMENT_SIZE, head_lsn: int | None = None,
                     head_timeline: int | None = None) -> list[Gap]:
    """Gaps in the archived segments ``entries``, sorted by position in the stream.

    ``history`` maps a timeline to its parsed ``.history`` file (timeline 1 has none). With
    ``head_lsn`` (the source's current insert/flush LSN, on ``head_timeline``, default the
    newest timeline) segments between the newest archived one and the head's are ``head``
    gaps. The archive's first segment is taken as the start: what came before it is not a
    gap (archives begin at a base backup).
    """
    present = {(e.timeline, e.segno) for e in entries}
    timelines = {tli for tli, _ in present} | set(history)
    if head_timeline is not None:
        timelines.add(head_timeline)
    if not timelines:
        return []
    newest = max(timelines)
    gaps: list[Gap] = []
    path_tli = newest
    if newest not in history and any(t < newest for t in timelines):
        # Older timelines are archived too, and nothing says where the newest branched off.
        first = min((s for t, s in present if t == newest), default=0)
        gaps.append(Gap(GapKind.HISTORY, newest, first, first, segment_size))
        known = [t for t in history if t < newest]
        path_tli = max(known, default=1)
    path_history = history.get(path_tli, ())

    def tli(segno: int) -> int:
        return timeline_for_segno(segno, path_tli, path_history, segment_size)

    on_path = sorted(s for t, s in present if t == tli(s))
    for a, b in pairwise(on_path):
        if b > a + 1:
            gaps.extend(_runs(GapKind.MISSING, a + 1, b - 1, path_tli, path_history,
                              segment_size))
    if head_lsn is not None and on_path:
        head_segno = segno_of(head_lsn, segment_size)
        if head_segno > on_path[-1] + 1:
            gaps.extend(_runs(GapKind.HEAD, on_path[-1] + 1, head_segno - 1, path_tli,
                              path_history, segment_size))
    return sorted(gaps, key=lambda g: (g.first_segno, g.kind is not GapKind.HISTORY))


def _runs(kind: GapKind, first: int, last: int, newest: int,
          history: Sequence[TimelineSwitch], segment_size: int) -> list[Gap]:
    """Split ``first..last`` where the owning timeline changes, one Gap per timeline."""
    cuts = sorted({segno_of(e.switch_lsn, segment_size) for e in history} | {last + 1})
    out: list[Gap] = []
    start = first
    for cut in cuts:
        if cut <= start:
            continue
        end = min(cut - 1, last)
        out.append(Gap(kind, timeline_for_segno(start, newest, history, segment_size),
                       start, end, segment_size))
        start = end + 1
        if start > last:
            break
    return out
