"""Which segments the next batch decodes: from where the last batch stopped, contiguous.

A batch takes the archived segments from the progress position on, up to ``until_segment``
and never past a gap (a segment still being shipped): the reader would refuse a gap anyway,
and waiting for it keeps batches exact. The batch name depends only on the progress state, so
a batch decoded again after a crash gets the same name and overwrites itself.

Segments are taken along the newest timeline's history (:mod:`cdclake.wal.timelines`): after
a failover, an old primary's segments past the switch point are an abandoned branch and are
never decoded; the switch segment is the new timeline's, and the batch waits for it. A
history file that arrives after its old timeline's abandoned WAL was decoded cannot be made
good: the plan stops with an error saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdclake.archive.layout import Layout
from cdclake.archive.manifest import Manifest
from cdclake.archive.source import StoreSegmentSource
from cdclake.archive.store import ObjectStore
from cdclake.errors import ConfigError, DecodingError, WalError
from cdclake.spark.progress import Progress
from cdclake.spark.segments import SegmentTask
from cdclake.wal.lsn import SegmentName, format_lsn, parse_segment_name
from cdclake.wal.reader import first_record_at
from cdclake.wal.timelines import TimelinePath

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
    timeline: int  #: the timeline whose history the batch follows

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
    names = source.list_segments()
    timelines = {n.timeline for n in names} | ({progress.timeline} if progress else set())
    path = Manifest(store, layout).timeline_path(timelines)
    _check_path(path, progress, size)
    present = {(n.timeline, n.segno) for n in names}
    first = min((s for t, s in present if t == path.timeline_of(s, size)), default=None)
    if first is None:
        return None
    if progress is None:
        start = first
        read_from = start * size
    else:
        read_from = progress.next_lsn
        start = read_from // size
    run = []
    s = start
    while (path.timeline_of(s, size), s) in present:
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
        window = tuple(SegmentName(path.timeline_of(x, size), x) for x in run[i:i + WINDOW])
        tasks.append(SegmentTask(segment=window[0], read_from=max(segno * size, read_from),
                                 end=(segno + 1) * size, keep_first=progress is None and i == 0,
                                 window=window))
    seq = (progress.seq if progress is not None else 0) + 1
    name = f"{seq:06d}-{tasks[0].segment.name(size)}"
    return BatchPlan(seq, name, size, read_from, tuple(tasks), path.timeline)


def _check_path(path: TimelinePath, progress: Progress | None, size: int) -> None:
    """Refuse to plan when the path is unknown (the newest timeline's history is missing) or
    when the stream already read WAL that is not on it (its history came too late)."""
    if path.missing is not None:
        name = f"{path.missing:08X}.history"
        raise DecodingError(
            f"segments of timeline {path.missing} are archived but not {name}, so where "
            f"timeline {path.missing} branched off is unknown and no batch is decoded: "
            f"archive {name} from its server's pg_wal (`cdclake wal-push pg_wal/{name}`)")
    if progress is None:
        return
    left = path.leaves(progress.timeline)
    if left is None or progress.next_lsn <= first_record_at(left, size):
        return
    raise DecodingError(
        f"the stream read WAL of timeline {progress.timeline} up to "
        f"{format_lsn(progress.next_lsn)} (batch {progress.batch}), past {format_lsn(left)}, "
        f"where {path.history_file} says the stream left timeline {progress.timeline} for "
        f"timeline {path.timeline}: that history file was archived after the WAL was decoded, "
        f"so the stream (and the mirrors that merged it) holds changes timeline "
        f"{path.timeline} never had, an old primary's after a failover. This stream cannot "
        f"continue: start a new one from timeline {path.timeline}'s primary (a new "
        "CDCLAKE_STORE_URL for cdclake and archive_command, new mirrors: drop these or set "
        "CDCLAKE_NAMESPACE; `cdclake source install`, then `cdclake run` snapshots every table)")
