"""Which timeline's WAL is the stream: the path through the timeline history files.

After a failover the archive may hold two copies of the same LSNs: the new timeline's, and the
old timeline's from an old primary that kept writing after the promotion (or archived what the
standby never received). PostgreSQL follows the newest timeline's history file
(``<TLI>.history``: each ancestor and the LSN where it ended), and so does every reader here —
the WAL reader, the Spark planner, ``wal-push``, the archive's continuity check: one rule, in
this module. Segment number N belongs to the newest timeline that had begun by the end of N:
the segment holding a switch point is taken from the *new* timeline, which holds a copy of the
old timeline's WAL up to the switch (PostgreSQL's XLogInitNewTimeline). WAL of a timeline past
the point where the path leaves it is an abandoned branch: never decoded, never archived.

Pure: callers read the history files (:func:`newest_path` takes the reading as a function).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cdclake.lsn import (
    DEFAULT_SEGMENT_SIZE,
    SegmentName,
    TimelineSwitch,
    segno_of,
    timeline_of_lsn,
)


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


@dataclass(frozen=True)
class TimelinePath:
    """The stream as timeline ``timeline`` sees it, through its ancestors (``history``)."""

    timeline: int
    history: tuple[TimelineSwitch, ...] = ()
    #: the parsed history of every timeline known, to place a timeline that is off the path
    histories: Mapping[int, Sequence[TimelineSwitch]] = field(default_factory=dict,
                                                              compare=False)
    #: a newer timeline whose segments are archived but not its history file: where it
    #: branched off is unknown, so the path stops short of it (None: the path is the newest)
    missing: int | None = None

    @property
    def history_file(self) -> str:
        return f"{self.timeline:08X}.history"

    def timeline_at(self, lsn: int) -> int:
        """The timeline whose WAL at ``lsn`` is the path's."""
        return timeline_of_lsn(self.history, self.timeline, lsn)

    def timeline_of(self, segno: int, segment_size: int) -> int:
        """The timeline whose copy of segment ``segno`` the path reads."""
        return timeline_for_segno(segno, self.timeline, self.history, segment_size)

    def leaves(self, timeline: int) -> int | None:
        """The LSN from which WAL of ``timeline`` is not the path's (an abandoned branch), or
        None when all of it is: the path's own timeline, or a newer one (which no history
        known has abandoned).

        An ancestor leaves where the history says it ended. A timeline off the path (a
        sibling branch) leaves where its own history and the path's first name different
        timelines for the same LSN; one whose history is unknown leaves at 0.
        """
        if timeline >= self.timeline:
            return None
        for entry in self.history:
            if entry.parent == timeline:
                return entry.switch_lsn
        theirs = TimelinePath(timeline, tuple(self.histories.get(timeline, ())))
        cuts = {0, *(e.switch_lsn for e in self.history), *(e.switch_lsn for e in theirs.history)}
        return next(c for c in sorted(cuts) if self.timeline_at(c) != theirs.timeline_at(c))

    def abandons(self, segment: SegmentName, segment_size: int) -> int | None:
        """Where ``segment``'s timeline left the path, if the segment starts at or after that
        point: then it is WAL of an abandoned branch, which no reader takes and the archive
        refuses. None: it may be archived. The segment holding the switch point is not
        abandoned: its WAL before the switch is the path's (its ``.partial`` is what the
        promoted server archives of the old timeline)."""
        left = self.leaves(segment.timeline)
        return left if left is not None and segment.start_lsn(segment_size) >= left else None


def timeline_path(timelines: Iterable[int],
                  histories: Mapping[int, Sequence[TimelineSwitch]]) -> TimelinePath:
    """The path the stream follows through ``timelines`` (those with archived segments) and
    the timelines of ``histories`` (the parsed history files known): the newest timeline's.

    An archive of one timeline needs no history file, whatever its number. When the newest
    timeline has none but older ones are archived, the path is the newest timeline that has
    one (else the oldest timeline) and ``missing`` names the newest.
    """
    known = set(timelines) | set(histories)
    if not known:
        return TimelinePath(1)
    newest = max(known)
    if newest in histories or newest == min(known):
        return TimelinePath(newest, tuple(histories.get(newest, ())), histories)
    fallback = max((t for t in histories if t < newest), default=min(known))
    return TimelinePath(fallback, tuple(histories.get(fallback, ())), histories, missing=newest)


def newest_path(timelines: Iterable[int],
                read_history: Callable[[int], Sequence[TimelineSwitch] | None]) -> TimelinePath:
    """:func:`timeline_path` through ``timelines`` and every newer timeline whose history
    ``read_history`` finds, probed upward until one is missing, as PostgreSQL's
    findNewestTimeLine does: a promotion archives its history file before any segment of the
    new timeline, so the history tells the old timeline's end before its abandoned WAL comes.
    """
    known = set(timelines) or {1}
    histories: dict[int, Sequence[TimelineSwitch]] = {}
    for tli in sorted(known):
        found = read_history(tli) if tli > 1 else None
        if found is not None:
            histories[tli] = found
    probe = max(known) + 1
    while (found := read_history(probe)) is not None:
        histories[probe] = found
        probe += 1
    return timeline_path(known, histories)
