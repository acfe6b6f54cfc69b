"""``cdclake ship --from DIR``: upload what an archive directory holds that the store lacks.

For sources whose ``archive_command`` copies into a directory (the PostgreSQL default
``cp``), the DAG's first task ships the directory to the store. Three rules make it safe to
run on a schedule, concurrently with the archiver, and again after any failure:

- *Skip what is shipped*: the manifest lists shipped segments, so a re-run uploads nothing
  and reads only the listing. Every upload goes through :func:`push_wal_file`, with its
  same-content-is-success semantics, so a segment shipped but not yet recorded (a crash
  between the two) is completed, not duplicated.
- *Never move past a gap*: if segment N is neither shipped nor in the directory but a later
  one is there, ship everything before N, then stop with ArchiveGapError naming N. Decoding
  must not run over a hole, and a hole that is silently stepped over is never noticed again.
- *A half-copied newest file is not an error*: ``cp`` writes in place, so the newest segment
  may still be growing; it is left for the next run. A short file *before* others is
  corruption and stops the run there.

Timelines: history files go up first, and continuity follows the newest timeline's history
(:mod:`cdclake.archive.gaps`), so the segments of a new timeline continue the old ones.
Segments of an abandoned branch (an old primary's, past the point where a history file says
its timeline ended) are refused as wal-push refuses them, and listed in the report; they
hold up nothing else.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cdclake.archive import Layout, ObjectStore, open_store, require_store
from cdclake.archive.gaps import Gap, GapKind, check_continuity
from cdclake.archive.layout import WalFileKind, wal_file_kind
from cdclake.archive.manifest import Manifest
from cdclake.archive.push import PushResult, push_wal_file
from cdclake.archive.segment import LONG_HEADER_SIZE, SegmentHeader, read_long_header
from cdclake.archive.store import sha256_hex
from cdclake.config import Config
from cdclake.errors import (
    ArchiveConflictError,
    ArchiveGapError,
    ConfigError,
    WalCorruptError,
    WalError,
)
from cdclake.lsn import (
    SegmentName,
    TimelineSwitch,
    format_lsn,
    parse_history,
    parse_segment_name,
)
from cdclake.wal.timelines import newest_path

#: order of kinds at one segment number: the segment, then files that refer to it
_KIND_ORDER = {WalFileKind.SEGMENT: 0, WalFileKind.PARTIAL: 1, WalFileKind.BACKUP: 2}


@dataclass(frozen=True, slots=True)
class LocalWalFile:
    """A file in the archive directory that ship may upload."""

    name: str
    path: Path
    kind: WalFileKind
    timeline: int
    segno: int  #: for history files: 0 (they go first)


@dataclass
class ShipPlan:
    """What ship would do: computed from the directory and the store, without uploading."""

    from_dir: Path
    segment_size: int | None
    to_ship: list[LocalWalFile] = field(default_factory=list)  #: in upload order
    already: list[str] = field(default_factory=list)  #: shipped before (manifest, history)
    pending: list[str] = field(default_factory=list)  #: newest file still being written
    ignored: list[str] = field(default_factory=list)  #: files that are not WAL archive files
    held_back: list[str] = field(default_factory=list)  #: present but past the gap
    #: segments of an abandoned timeline branch (an old primary's after a failover): never
    #: shipped, as wal-push refuses them
    abandoned: list[str] = field(default_factory=list)
    gap: Gap | None = None  #: the first gap that stops shipping


@dataclass
class ShipReport:
    """What a ship run did (``dry_run``: would do)."""

    plan: ShipPlan
    store_url: str
    shipped: list[str] = field(default_factory=list)  #: newly uploaded, in order
    #: were in the store already with the same content (a crash after upload); manifest done
    unchanged: list[str] = field(default_factory=list)
    dry_run: bool = False

    def summary(self) -> str:
        p = self.plan
        verb = "would ship" if self.dry_run else "shipped"
        count = len(p.to_ship) if self.dry_run else len(self.shipped)
        parts = [f"{verb} {count} file(s) from {p.from_dir} to {self.store_url}"]
        if self.unchanged:
            parts.append(f"{len(self.unchanged)} were already stored (manifest completed)")
        if p.already:
            parts.append(f"{len(p.already)} already shipped")
        if p.pending:
            parts.append(f"left for next run (still being written): {', '.join(p.pending)}")
        if p.ignored:
            parts.append(f"ignored (not WAL files): {', '.join(p.ignored)}")
        if p.abandoned:
            parts.append(f"refused (WAL of an abandoned timeline branch: an old primary "
                         f"writing after a failover?): {', '.join(p.abandoned)}")
        if p.gap is not None:
            parts.append(f"stopped at gap: {p.gap}")
        return "; ".join(parts)


def plan_ship(store: ObjectStore, layout: Layout, from_dir: Path) -> ShipPlan:
    """Look at the directory and the store and decide what to upload, in which order.

    Raises ConfigError for a directory that cannot be read, WalCorruptError for segments that
    disagree on their segment size, ArchiveConflictError for a history file the store holds
    with other content, ManifestError for an unreadable manifest, StoreError if the store
    fails. Reads only the first page of each segment; push_wal_file checks the rest.
    """
    try:
        names = sorted(e.name for e in os.scandir(from_dir) if e.is_file())
    except OSError as exc:
        raise ConfigError(f"cannot read archive directory {from_dir}: "
                          f"{exc.strerror or exc}") from exc
    manifest = Manifest(store, layout)
    plan = ShipPlan(from_dir, None)
    segment_names = [n for n in names if wal_file_kind(n) is WalFileKind.SEGMENT]
    plan.ignored = [n for n in names if wal_file_kind(n) is None]
    headers = {n: h for n in segment_names if (h := _header(from_dir / n)) is not None}
    system = manifest.system()
    plan.segment_size = _segment_size(headers, system.segment_size if system else None,
                                      from_dir)
    if plan.segment_size is None:
        if segment_names:  # all too short to say their size: still being written
            plan.pending = segment_names
        plan.to_ship = _new_histories(store, layout, from_dir, names, plan)
        return plan
    size = plan.segment_size

    files = []
    for n in names:
        kind = wal_file_kind(n)
        if kind in (WalFileKind.SEGMENT, WalFileKind.PARTIAL, WalFileKind.BACKUP):
            try:
                seg = parse_segment_name(n[:24], size)
            except ValueError as exc:
                raise WalCorruptError(str(exc), segment=n) from exc
            files.append(LocalWalFile(n, from_dir / n, kind, seg.timeline, seg.segno))
    files.sort(key=lambda f: (f.segno, f.timeline, _KIND_ORDER[f.kind]))
    segments = [f for f in files if f.kind is WalFileKind.SEGMENT]
    if segments and not _complete(segments[-1].path, headers.get(segments[-1].name), size):
        plan.pending.append(segments[-1].name)
        files.remove(segments[-1])
        segments.pop()

    shipped = {(s.timeline, s.segno) for s in manifest.segments(size)}
    present = {(f.timeline, f.segno) for f in segments}
    timelines = {t for t, _ in shipped | present} | {
        int(n[:8], 16) for n in names if wal_file_kind(n) is WalFileKind.HISTORY}
    path = newest_path(timelines, lambda tli: _history(manifest, from_dir, names, tli))
    for f in list(files):  # wal-push would refuse them: an abandoned branch blocks nothing
        if (f.kind in (WalFileKind.SEGMENT, WalFileKind.PARTIAL)
                and (f.timeline, f.segno) not in shipped
                and path.abandons(SegmentName(f.timeline, f.segno), size) is not None):
            plan.abandoned.append(f.name)
            files.remove(f)
    gaps = [g for g in check_continuity(
        [_Seg(t, s) for t, s in shipped | present], path.histories, segment_size=size)
        if g.kind in (GapKind.MISSING, GapKind.HISTORY)]
    stop = None
    for g in gaps:  # the first gap with something to ship past it stops the run
        if any(f.segno >= g.first_segno and (f.timeline, f.segno) not in shipped
               for f in files):
            stop, plan.gap = g.first_segno, g
            break

    plan.to_ship = _new_histories(store, layout, from_dir, names, plan)
    for f in files:
        if f.kind is WalFileKind.SEGMENT and (f.timeline, f.segno) in shipped:
            plan.already.append(f.name)
        elif stop is not None and f.segno >= stop:
            plan.held_back.append(f.name)
        else:
            plan.to_ship.append(f)
    return plan


def ship(config: Config, from_dir: Path | str | None = None, *,
         store: ObjectStore | None = None, layout: Layout | None = None,
         compress: bool = False, dry_run: bool = False) -> ShipReport:
    """Ship ``from_dir`` (default ``config.archive_dir``) to the store; see the module doc.

    Uploads in segment order; on a gap ships what precedes it and raises ArchiveGapError
    naming the missing segment (a dry run raises too, uploading nothing). Raises
    ArchiveConflictError / WalError for a file that cannot be archived (earlier files stay
    shipped), StoreError / StoreUnreachableError if the store fails (nothing is lost: the
    directory is only read, and the manifest records only what is complete in the store).
    """
    directory = Path(from_dir) if from_dir is not None else config.archive_dir
    if directory is None:
        raise ConfigError("no archive directory: give --from DIR or set CDCLAKE_ARCHIVE_DIR")
    store = store if store is not None else open_store(config)
    layout = layout if layout is not None else Layout()
    plan = plan_ship(store, layout, directory)
    report = ShipReport(plan, store.url(), dry_run=dry_run)
    if not dry_run:
        _upload_all(store, layout, plan.to_ship, report, compress, config.ship_uploads)
    if plan.gap is not None:
        raise ArchiveGapError(_gap_message(report, plan.gap))
    return report


def _upload_all(store: ObjectStore, layout: Layout, files: Sequence[LocalWalFile],
                report: ShipReport, compress: bool, uploads: int) -> None:
    """Upload ``files`` in order, up to ``uploads`` segments at once (a file read, a SHA-256
    and a store round trip — an fsync, an HTTP PUT — all let other threads run), and record each
    segment in the manifest in order once it and every one before it is stored. Any other
    file (a timeline history, a ``.partial``) goes alone, after all before it: a segment's
    check against the stream's timelines must see the history files shipped before it. On
    an error nothing after the failed file is recorded; the uploads already under way finish
    and are completed, not duplicated, by the next run."""
    manifest = Manifest(store, layout)

    def upload(f: LocalWalFile, record: bool) -> PushResult:
        try:
            data = f.path.read_bytes()
        except OSError as exc:
            raise WalError(f"cannot read {f.path}: {exc.strerror or exc}",
                           segment=f.name) from exc
        return push_wal_file(store, layout, f.name, data, compress=compress,
                             shipped_by="ship", record=record)

    def settle(f: LocalWalFile, result: PushResult) -> None:
        if result.entry is not None:
            manifest.record(result.entry)
        (report.shipped if result.uploaded else report.unchanged).append(f.name)

    window: deque[tuple[LocalWalFile, Future[PushResult]]] = deque()
    with ThreadPoolExecutor(uploads, thread_name_prefix="cdclake-ship") as pool:
        try:
            for f in files:
                if f.kind is not WalFileKind.SEGMENT:
                    while window:
                        settle(*_done(window.popleft()))
                    settle(f, upload(f, record=True))
                    continue
                window.append((f, pool.submit(upload, f, False)))
                if len(window) >= uploads:
                    settle(*_done(window.popleft()))
            while window:
                settle(*_done(window.popleft()))
        finally:
            for _f, future in window:
                future.cancel()


def _done(item: tuple[LocalWalFile, Future[PushResult]]) -> tuple[LocalWalFile, PushResult]:
    return item[0], item[1].result()


def _gap_message(report: ShipReport, gap: Gap) -> str:
    p = report.plan
    done = (f"would ship {len(p.to_ship)} file(s) before it" if report.dry_run
            else f"shipped {len(report.shipped) + len(report.unchanged)} file(s) before it")
    after = ", ".join(p.held_back[:3]) + (" ..." if len(p.held_back) > 3 else "")
    if gap.kind is GapKind.HISTORY:
        return (f"timeline {gap.timeline} history file {gap.timeline:08X}.history is neither "
                f"in {p.from_dir} nor in {report.store_url}, so segments of timeline "
                f"{gap.timeline} cannot be placed in the stream; {done} and held back "
                f"{len(p.held_back)} ({after}). Copy the history file from the source's "
                "pg_wal into the archive directory and run ship again")
    start = format_lsn(gap.first_segno * (p.segment_size or 0))
    return (f"WAL segment {gap.first_segment} is missing: it is neither in {p.from_dir} nor "
            f"in {report.store_url}, but later segments are ({after}); {done} and nothing "
            f"past it ({gap!s}). Restore it into {p.from_dir} (from the source's pg_wal if "
            "it is still there) and run ship again; if it is lost, the stream cannot continue "
            f"past LSN {start}: take a new snapshot and start a new stream")


# -- directory helpers -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Seg:
    timeline: int
    segno: int


def _header(path: Path) -> SegmentHeader | None:
    """The segment's long header, or None if the file is too short or not WAL (yet)."""
    try:
        with open(path, "rb") as f:
            head = f.read(LONG_HEADER_SIZE)
        return read_long_header(head, path.name)
    except (OSError, WalError):
        return None


def _segment_size(headers: Mapping[str, SegmentHeader], pinned: int | None,
                  from_dir: Path) -> int | None:
    sizes = {h.segment_size for h in headers.values()} | ({pinned} if pinned else set())
    if len(sizes) > 1:
        odd = ", ".join(f"{n}: {h.segment_size}" for n, h in list(headers.items())[:5])
        raise WalCorruptError(
            f"segments in {from_dir} disagree on the segment size ({odd}"
            + (f"; the store holds {pinned}-byte segments" if pinned else "")
            + "): files from different clusters in one directory?")
    return next(iter(sizes), None)


def _complete(path: Path, header: SegmentHeader | None, size: int) -> bool:
    try:
        return header is not None and path.stat().st_size >= size
    except OSError:
        return False


def _new_histories(store: ObjectStore, layout: Layout, from_dir: Path, names: Sequence[str],
                   plan: ShipPlan) -> list[LocalWalFile]:
    """History files the store lacks; one it holds with other content is a conflict now."""
    out = []
    for n in names:
        if wal_file_kind(n) is not WalFileKind.HISTORY:
            continue
        path = from_dir / n
        try:
            ours = sha256_hex(path.read_bytes())
        except OSError as exc:
            raise WalError(f"cannot read {path}: {exc.strerror or exc}", segment=n) from exc
        key = layout.wal_key(n)
        stored = store.content_sha256(key)
        if stored is None:
            out.append(LocalWalFile(n, path, WalFileKind.HISTORY, int(n[:8], 16), 0))
        elif stored == ours:
            plan.already.append(n)
        else:
            raise ArchiveConflictError(
                f"timeline history {n} in {from_dir} (sha256 {ours}) differs from "
                f"{store.url(key)} (sha256 {stored}): two clusters in one stream?")
    return out


def _history(manifest: Manifest, from_dir: Path, names: Sequence[str],
             timeline: int) -> list[TimelineSwitch] | None:
    """Timeline ``timeline``'s parsed history, from the directory or else the store."""
    name = f"{timeline:08X}.history"
    if name not in names:
        return manifest.history(timeline)
    try:
        text = (from_dir / name).read_text("ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise WalError(f"cannot read {from_dir / name}: {exc}", segment=name) from exc
    return parse_history(text, name)


# -- CLI ---------------------------------------------------------------------------------


def add_ship_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="from_dir", type=Path,
                        help="archive directory to ship (default: CDCLAKE_ARCHIVE_DIR)")
    parser.add_argument("--dry-run", action="store_true",
                        help="show what would be shipped; upload nothing")
    parser.add_argument("--compress", action="store_true",
                        help="store segments zstd-compressed as <name>.zst")


def run_ship(args: argparse.Namespace, config: Config) -> int:
    require_store(config, "ship")
    if not args.dry_run:
        report = ship(config, args.from_dir, compress=args.compress)
        print(report.summary(), file=sys.stderr)
        return 0
    directory = args.from_dir or config.archive_dir
    if directory is None:
        raise ConfigError("no archive directory: give --from DIR or set CDCLAKE_ARCHIVE_DIR")
    store = open_store(config)
    plan = plan_ship(store, Layout(), Path(directory))
    report = ShipReport(plan, store.url(), dry_run=True)
    for f in plan.to_ship:
        print(f"would ship {f.name}")
    print(report.summary(), file=sys.stderr)
    if plan.gap is not None:
        raise ArchiveGapError(_gap_message(report, plan.gap))
    return 0
