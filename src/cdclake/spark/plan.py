"""Which segments the next batch decodes: from where the last batch stopped, contiguous.

A batch takes the archived segments from the progress position on, up to ``until_segment``.
A segment still being archived after the newest one archived is waited for. A segment missing
below archived ones is a hole the stream cannot pass: the plan stops with
:class:`~cdclake.errors.ArchiveGapError` naming it (it never comes by itself, so waiting for
it would stall the stream silently). The batch name depends only on the progress state, so a
batch decoded again after a crash gets the same name and overwrites itself.

A new stream starts at the full dictionary ``cdclake source install`` wrote. Where that
message lies is recorded on the source (:class:`~cdclake.catalog.install.InstallMessage`), so
the first batch skips the segments wholly before it — a database that archived before cdclake
came has many, and they hold nothing the stream decodes — and, until the segments holding the
message are archived, the plan is :class:`Waiting` for them.

Segments are taken along the newest timeline's history (:mod:`cdclake.wal.timelines`): after
a failover, an old primary's segments past the switch point are an abandoned branch and are
never decoded; the switch segment is the new timeline's, and the batch waits for it. A
history file that arrives after its old timeline's abandoned WAL was decoded cannot be made
good: the plan stops with an error saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.archive.gaps import missing
from cdclake.archive.layout import Layout
from cdclake.archive.manifest import Manifest
from cdclake.archive.source import StoreSegmentSource
from cdclake.archive.store import ObjectStore
from cdclake.errors import ArchiveGapError, ConfigError, DecodingError, WalError
from cdclake.lsn import SegmentName, format_lsn, parse_segment_name
from cdclake.spark.segments import SegmentTask
from cdclake.stream.progress import Progress
from cdclake.wal.reader import first_record_at
from cdclake.wal.timelines import TimelinePath

if TYPE_CHECKING:
    from cdclake.catalog.install import InstallMessage
    from cdclake.config import Config

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


@dataclass(frozen=True)
class Waiting:
    """No batch yet: a new stream waits for the segment holding the install's message."""

    reason: str  #: one line, naming the segment


def next_plan(config: Config, store: ObjectStore, layout: Layout, progress: Progress | None,
              until_segment: str | None = None, *,
              from_install: bool = True) -> BatchPlan | Waiting | None:
    """:func:`plan_batch` with the configuration's batch bounds. A new stream that starts at
    the install's message (``from_install``: no start LSN or dictionary given) is planned from
    where the source says the install wrote it, when ``config.source_dsn`` reaches the source."""
    install = None
    if progress is None and from_install and config.source_dsn:
        from cdclake.catalog.install import recorded_message

        install = recorded_message(config.source_dsn)
    return plan_batch(store, layout, progress, until_segment, config.max_batch_segments,
                      config.max_batch_bytes, install=install)


def plan_batch(store: ObjectStore, layout: Layout, progress: Progress | None,
               until_segment: str | None, max_segments: int | None = None,
               max_bytes: int | None = None, *,
               install: InstallMessage | None = None) -> BatchPlan | Waiting | None:
    """The next batch's segment tasks; None when nothing new is archived, :class:`Waiting`
    when a new stream's first batch waits for the install's segment.

    At most ``max_segments`` segments and ``max_bytes`` of WAL (at least one segment): a
    backlog is decoded as several bounded batches, the later ones planned from the progress
    the earlier ones saved. ``install``, for a new stream: where its first batch starts (the
    segments wholly before the message are skipped) and how far it reads at least (the
    message whole, whatever the bounds). Raises ArchiveGapError when the segment the stream
    reads next is missing but later ones are archived."""
    source = StoreSegmentSource(store, layout, progress.segment_size if progress else None)
    try:
        size = source.segment_size()
    except WalError:
        return None  # no segment archived yet
    names = source.list_segments()
    timelines = {n.timeline for n in names} | ({progress.timeline} if progress else set())
    path = Manifest(store, layout).timeline_path(timelines)
    _check_path(path, progress, size)
    on_path = sorted(n.segno for n in names if n.timeline == path.timeline_of(n.segno, size))
    if not on_path:
        return None
    if progress is not None:
        read_from = progress.next_lsn
        start = read_from // size
        # stopped inside its own last segment: the final record continues in the next one
        stopped_inside = parse_segment_name(progress.last_segment, size).segno == start
        reach = start + 1 if stopped_inside else start
    else:
        start = on_path[0]
        reach = start
        if install is not None:
            _check_archived(install, start, size, store)
            start = max(start, install.from_lsn // size)
            reach = max(start, (install.end_lsn - 1) // size)
        read_from = start * size
    archived = set(on_path)
    run = []
    s = start
    while s in archived:
        run.append(s)
        s += 1
    if not run or run[-1] < reach:  # the segment read next is not archived
        _check_hole(path, s, on_path, size, store)
        if progress is None and install is not None:
            return _waiting(install, SegmentName(path.timeline_of(s, size), s), size,
                            len([x for x in on_path if x < start]))
        return None
    count = len(run)
    if until_segment is not None:
        try:
            until = parse_segment_name(until_segment, size).segno
        except ValueError as exc:
            raise ConfigError(f"until_segment {until_segment!r}: {exc}") from exc
        count = len([x for x in run if x <= until])
    bound = count
    if max_segments:
        bound = min(bound, max_segments)
    if max_bytes:
        bound = min(bound, max(1, max_bytes // size))
    if progress is None and install is not None:
        if count < reach - start + 1:
            return None  # until_segment ends before the message: nothing to decode up to it
        bound = max(bound, reach - start + 1)
    chosen = run[:bound]
    if not chosen:
        return None
    tasks = []
    for i, segno in enumerate(chosen):
        window = tuple(SegmentName(path.timeline_of(x, size), x) for x in run[i:i + WINDOW])
        tasks.append(SegmentTask(segment=window[0], read_from=max(segno * size, read_from),
                                 end=(segno + 1) * size, window=window))
    seq = (progress.seq if progress is not None else 0) + 1
    name = f"{seq:06d}-{tasks[0].segment.name(size)}"
    return BatchPlan(seq, name, size, read_from, tuple(tasks), path.timeline)


def _check_hole(path: TimelinePath, segno: int, on_path: list[int], size: int,
                store: ObjectStore) -> None:
    """Refuse to wait for segment ``segno`` when later segments of the path are archived:
    it is missing, not late (PostgreSQL archives segments in order), and never comes by
    itself."""
    later = next((x for x in on_path if x > segno), None)
    if later is None:
        return
    gaps = missing(segno, later - 1, path, size)
    name = gaps[0].first_segment
    raise ArchiveGapError(
        f"WAL segment {name} is missing from the archive at {store.url()} but later segments "
        f"are archived ({'; '.join(map(str, gaps))}), so the stream cannot be decoded past "
        f"LSN {format_lsn(segno * size)}: archive it again from the source's pg_wal if it is "
        f"still there (`cdclake wal-push pg_wal/{name}`, or `cdclake ship`); if it is lost, "
        "this stream cannot continue: start a new one (a new CDCLAKE_STORE_URL, new mirrors)")


def _check_archived(install: InstallMessage, first: int, size: int, store: ObjectStore) -> None:
    """A new stream starts at the install's message: refuse an archive that begins after it."""
    if first <= (install.end_lsn - 1) // size:
        return
    raise DecodingError(
        f"the archive at {store.url()} begins at LSN {format_lsn(first * size)}, after the "
        f"full dictionary `cdclake source install` wrote at {format_lsn(install.from_lsn)}.."
        f"{format_lsn(install.end_lsn)}, where a new stream starts: run `cdclake source "
        "install` again, and its new message reaches the archive")


def _waiting(install: InstallMessage, segment: SegmentName, size: int, skipped: int) -> Waiting:
    name = segment.name(size)
    before = (f"; the {skipped} segment(s) archived before it hold nothing the stream "
              "decodes" if skipped else "")
    return Waiting(
        f"waiting for the install's segment {name}: `cdclake source install` wrote the "
        f"full dictionary where a new stream starts at {format_lsn(install.from_lsn)}.."
        f"{format_lsn(install.end_lsn)}, and it is not archived yet{before} (on a quiet "
        "database `SELECT pg_switch_wal()` on the source archives it now)")


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
