"""Which segments the next batch decodes: from where the last batch stopped, contiguous.

A batch takes the archived segments from the progress position on, up to ``until_segment``
and never past a gap (a segment still being shipped): the reader would refuse a gap anyway,
and waiting for it keeps batches exact. The batch name depends only on the progress state, so
a batch decoded again after a crash gets the same name and overwrites itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdclake.archive.layout import Layout
from cdclake.archive.source import StoreSegmentSource
from cdclake.archive.store import ObjectStore
from cdclake.errors import ConfigError, WalError
from cdclake.spark.progress import Progress
from cdclake.spark.segments import SegmentTask
from cdclake.wal.lsn import SegmentName, parse_segment_name

#: how many following segments a task may read to finish a record that starts in its own
#: (a record longer than this many segments is beyond what PostgreSQL writes in practice)
WINDOW = 64


@dataclass(frozen=True)
class BatchPlan:
    seq: int
    name: str
    segment_size: int
    read_from: int  #: where reading starts (the previous batch's next_lsn)
    tasks: tuple[SegmentTask, ...]

    @property
    def segments(self) -> list[str]:
        return [t.segment.name(self.segment_size) for t in self.tasks]


def plan_batch(store: ObjectStore, layout: Layout, progress: Progress | None,
               until_segment: str | None, max_segments: int | None = None,
               max_bytes: int | None = None) -> BatchPlan | None:
    """The next batch's segment tasks, or None when nothing new is archived.

    At most ``max_segments`` segments and ``max_bytes`` of WAL (at least one segment): a
    backlog is decoded as several bounded batches, the later ones planned from the progress
    the earlier ones saved."""
    source = StoreSegmentSource(store, layout)
    if progress is not None:
        size = progress.segment_size
        source = StoreSegmentSource(store, layout, size)
    try:
        size = source.segment_size()
    except WalError:
        return None  # no segment archived yet
    timeline_of: dict[int, int] = {}
    for name in source.list_segments():  # newest timeline per segment number
        timeline_of[name.segno] = max(name.timeline, timeline_of.get(name.segno, 0))
    if not timeline_of:
        return None
    if progress is None:
        start = min(timeline_of)
        read_from = start * size
    else:
        read_from = progress.next_lsn
        start = read_from // size
    run = []
    s = start
    while s in timeline_of:
        run.append(s)
        s += 1
    chosen = run
    if until_segment is not None:
        try:
            until = parse_segment_name(until_segment, size).segno
        except ValueError as exc:
            raise ConfigError(f"until_segment {until_segment!r}: {exc}") from exc
        chosen = [x for x in run if x <= until]
    if max_segments:
        chosen = chosen[:max_segments]
    if max_bytes:
        chosen = chosen[:max(1, max_bytes // size)]
    if not chosen:
        return None
    if (progress is not None and len(run) == 1
            and parse_segment_name(progress.last_segment, size).segno == start):
        # The last batch stopped inside its own last segment because the final record
        # continues in the next one, which is still not archived: nothing new can be read.
        # (Stopping inside a later segment means a record straddled into it: read on.)
        return None
    tasks = []
    for i, segno in enumerate(chosen):
        window = tuple(SegmentName(timeline_of[x], x) for x in run[i:i + WINDOW])
        tasks.append(SegmentTask(segment=window[0], read_from=max(segno * size, read_from),
                                 end=(segno + 1) * size, keep_first=progress is None and i == 0,
                                 window=window))
    seq = (progress.seq if progress is not None else 0) + 1
    first = tasks[0].segment.name(size)
    return BatchPlan(seq, f"{seq:06d}-{first}", size, read_from, tuple(tasks))
