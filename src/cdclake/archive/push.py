"""``cdclake wal-push %p``: PostgreSQL's ``archive_command``, straight to the object store.

Semantics are pgBackRest's archive-push: the archiver may call us again for a file we already
stored (it retries whenever it did not see exit 0, e.g. after a crash), so the same content
already in the store is success; *different* content under the same name means two clusters
(or a restored old primary) archive into one stream, which must stop everything — exit
non-zero, keep the store as it was, and PostgreSQL keeps the WAL and retries until an operator
acts. Any store failure is non-zero too: PostgreSQL retries, and removes nothing meanwhile.

A segment (or ``.partial``) of an abandoned branch is a conflict too: one of a timeline that
starts at or past the point where the archived history files say the stream left that
timeline (:meth:`~cdclake.wal.timelines.TimelinePath.abandons`) — an old primary that kept
writing after a failover. The segment holding the switch point is archived: its WAL before
the switch is the stream's.

Exit codes: 0 stored (or already stored), 3 conflict, 2 any other error (cli.py).
This module is imported by every archive_command call, so it imports nothing heavy.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from cdclake.archive import Layout, ObjectStore, open_store, require_store
from cdclake.archive.layout import ZST_SUFFIX, WalFileKind, wal_file_kind
from cdclake.archive.manifest import Manifest, ManifestEntry, SystemInfo
from cdclake.archive.segment import verify_segment
from cdclake.archive.store import sha256_hex
from cdclake.config import Config
from cdclake.errors import ArchiveConflictError, ObjectNotFound, StoreError, WalError
from cdclake.lsn import format_lsn, parse_history
from cdclake.wal.timelines import TimelinePath

EXIT_CONFLICT = 3


@dataclass(frozen=True, slots=True)
class PushResult:
    """What one push did."""

    name: str
    kind: WalFileKind
    key: str  #: where the file is in the store (maybe an earlier ``.zst`` or plain copy)
    sha256: str  #: of the file as PostgreSQL wrote it
    uploaded: bool  #: False when the same content was already stored
    entry: ManifestEntry | None  #: the manifest entry (segments only)


def push_wal_file(store: ObjectStore, layout: Layout, name: str, data: bytes, *,
                  compress: bool = False, shipped_by: str = "wal-push",
                  record: bool = True) -> PushResult:
    """Archive one WAL file (segment, ``.partial``, ``.history`` or ``.backup``) named ``name``.

    Without ``record`` a segment's manifest entry is returned, not written: a caller that
    uploads several segments at once (:mod:`cdclake.archive.ship`) records them in order, so
    the manifest never shows a later segment without the ones before it.

    Segments are checked against their name first (WalError if they are not what the name
    says) and against the stream's identity (ArchiveConflictError for another cluster).
    Raises ArchiveConflictError if the store holds different bytes under that name, and
    StoreError/StoreUnreachableError if the store fails; in every error case nothing already
    in the store was changed.
    """
    kind = wal_file_kind(name)
    if kind is None:
        raise WalError("not a file PostgreSQL archives (segment, .partial, .history, .backup)",
                       segment=name)
    manifest = Manifest(store, layout)
    seg = hdr = None
    if kind in (WalFileKind.SEGMENT, WalFileKind.PARTIAL):
        seg, hdr = verify_segment(name, data)
        manifest.ensure_system(SystemInfo.of(hdr), name)
        path = manifest.timeline_path({seg.timeline})
        left = path.abandons(seg, hdr.segment_size)
        if left is not None:
            raise ArchiveConflictError(abandoned_message(name, seg.timeline, left, path))
    elif kind is WalFileKind.HISTORY:
        try:
            parse_history(data.decode("ascii"), name)
        except UnicodeDecodeError as exc:
            raise WalError("timeline history file is not text", segment=name) from exc
    digest = sha256_hex(data)
    # only full segments are compressed: readers look history files up by their plain name,
    # and .partial/.backup files are rare and small in number
    compress = compress and kind is WalFileKind.SEGMENT

    key = layout.wal_key(name, compressed=compress)
    other = layout.wal_key(name, compressed=not compress)
    uploaded = False
    stored = _stored_sha256(store, other)  # the same file archived in the other form?
    if stored is not None:
        _check_same(store, name, other, stored, digest)
        key = other
        stored_size = _size(store, other)
    else:
        body = data
        if compress:
            from cdclake.archive.compress import compress as zstd

            body = zstd(data)
        if store.put(key, body, if_absent=True):
            uploaded, stored_size = True, len(body)
        else:
            stored = _stored_sha256(store, key)
            if stored is None:
                raise StoreError(f"{store.url(key)} existed a moment ago and is gone; retry")
            _check_same(store, name, key, stored, digest)
            stored_size = _size(store, key)

    entry = None
    if kind is WalFileKind.SEGMENT and seg is not None and hdr is not None:
        entry = ManifestEntry.for_segment(
            seg, hdr, sha256=digest, key=key, compressed=key.endswith(ZST_SUFFIX),
            stored_size=stored_size, shipped_by=shipped_by)
        if record:
            entry = manifest.record(entry)
    return PushResult(name, kind, key, digest, uploaded, entry)


def abandoned_message(name: str, timeline: int, left: int, path: TimelinePath) -> str:
    """Why ``name`` (of ``timeline``, which left the stream's ``path`` at ``left``) is not
    archived, and what to do."""
    return (f"WAL file {name} is on timeline {timeline} at or past {format_lsn(left)}, where "
            f"{path.history_file} in the archive says the stream left timeline {timeline} for "
            f"timeline {path.timeline}: it is WAL of an abandoned branch (an old primary still "
            "writing after a failover?) and is not archived. Stop this server, or make it a "
            f"standby of timeline {path.timeline}'s primary (pg_rewind)")


def _stored_sha256(store: ObjectStore, key: str) -> str | None:
    """sha256 of the *uncompressed* file stored at ``key``, or None if there is none."""
    if not key.endswith(ZST_SUFFIX):
        return store.content_sha256(key)
    from cdclake.archive.compress import decompress

    try:
        raw = store.get(key)
    except ObjectNotFound:
        return None
    return sha256_hex(decompress(raw, store.url(key)))


def _size(store: ObjectStore, key: str) -> int:
    info = store.head(key)
    if info is None:
        raise StoreError(f"{store.url(key)} existed a moment ago and is gone; retry")
    return info.size


def _check_same(store: ObjectStore, name: str, key: str, stored: str, ours: str) -> None:
    if stored != ours:
        raise ArchiveConflictError(
            f"WAL file {name} is already archived at {store.url(key)} with sha256 {stored}, "
            f"but the file to push has sha256 {ours}; refusing to overwrite (multiple "
            "primaries archiving to one stream, or a restored old primary?). PostgreSQL keeps "
            "the file and retries; resolve which copy is right before removing either")


# -- CLI ---------------------------------------------------------------------------------


def add_wal_push_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="the file to archive: %%p in archive_command (relative to "
                        "the data directory, which is the working directory)")
    parser.add_argument("--compress", action="store_true",
                        help="store segments zstd-compressed as <name>.zst")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="say what was done on stderr (lands in the PostgreSQL log)")


def run_wal_push(args: argparse.Namespace, config: Config) -> int:
    require_store(config, "wal-push")
    path = Path(args.path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WalError(f"cannot read {path.resolve()}: {exc.strerror or exc}",
                       segment=path.name) from exc
    store = open_store(config)
    try:
        result = push_wal_file(store, Layout(), path.name, data, compress=args.compress)
    except ArchiveConflictError as exc:
        print(f"cdclake wal-push: conflict: {exc}", file=sys.stderr)
        return EXIT_CONFLICT
    if args.verbose:
        what = "stored" if result.uploaded else "already stored, same sha256"
        print(f"cdclake wal-push: {result.name} {what} at {store.url(result.key)}",
              file=sys.stderr)
    return 0
