"""Is the archived WAL one unbroken stream? Gap classification, after WAL-G's wal-verify.

With timelines, "the stream" is a path through the newest timeline's history
(:mod:`cdclake.wal.timelines`, the rule every reader follows). Segments of an abandoned branch
(an old timeline past its switch point) are not on the path and are not gaps.

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

from cdclake.lsn import DEFAULT_SEGMENT_SIZE, TimelineSwitch, segment_name, segno_of
from cdclake.wal.timelines import TimelinePath, timeline_path


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
    gaps: list[Gap] = []
    path = timeline_path(timelines, history)
    if path.missing is not None:
        # Older timelines are archived too, and nothing says where the newest branched off.
        first = min((s for t, s in present if t == path.missing), default=0)
        gaps.append(Gap(GapKind.HISTORY, path.missing, first, first, segment_size))
    on_path = sorted(s for t, s in present if t == path.timeline_of(s, segment_size))
    for a, b in pairwise(on_path):
        if b > a + 1:
            gaps.extend(_runs(GapKind.MISSING, a + 1, b - 1, path, segment_size))
    if head_lsn is not None and on_path:
        head_segno = segno_of(head_lsn, segment_size)
        if head_segno > on_path[-1] + 1:
            gaps.extend(_runs(GapKind.HEAD, on_path[-1] + 1, head_segno - 1, path,
                              segment_size))
    return sorted(gaps, key=lambda g: (g.first_segno, g.kind is not GapKind.HISTORY))


def missing(first: int, last: int, path: TimelinePath, segment_size: int) -> list[Gap]:
    """Segments ``first..last`` of ``path`` as ``missing`` gaps, one per timeline: the hole a
    reader of the path stops at (:mod:`cdclake.spark.plan`)."""
    return _runs(GapKind.MISSING, first, last, path, segment_size)


def _runs(kind: GapKind, first: int, last: int, path: TimelinePath,
          segment_size: int) -> list[Gap]:
    """Split ``first..last`` where the owning timeline changes, one Gap per timeline."""
    cuts = sorted({segno_of(e.switch_lsn, segment_size) for e in path.history} | {last + 1})
    out: list[Gap] = []
    start = first
    for cut in cuts:
        if cut <= start:
            continue
        end = min(cut - 1, last)
        out.append(Gap(kind, path.timeline_of(start, segment_size), start, end, segment_size))
        start = end + 1
        if start > last:
            break
    return out
