"""What the archive holds, as small JSON objects beside the segments.

One entry per shipped segment (``manifest/wal/<segment>.json``) records what was archived —
size and sha256 of the segment as PostgreSQL wrote it, its LSN range, when and by whom — so
``ship`` can skip what is there by listing keys, ``status`` can check continuity without
reading segments, and a re-push can be told apart from a conflicting one. The entry is
written *after* its segment, so an entry always means "this segment is complete in the
store"; a crash between the two leaves a segment without an entry, which the next push or ship
completes.

``manifest/system.json`` pins the stream's identity (system identifier, PostgreSQL version,
segment size), like pgBackRest's ``archive.info``: a segment from another cluster is refused
instead of being mixed into the stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

from cdclake.archive.gaps import Gap, check_continuity
from cdclake.archive.layout import Layout
from cdclake.archive.segment import SegmentHeader
from cdclake.archive.store import ObjectStore
from cdclake.errors import ArchiveConflictError, ManifestError, ObjectNotFound, StoreError
from cdclake.lsn import (
    SegmentName,
    TimelineSwitch,
    format_lsn,
    parse_history,
    parse_lsn,
    parse_segment_name,
    segno_of,
)
from cdclake.wal.timelines import TimelinePath, newest_path

_LSN_FIELDS = ("first_lsn", "end_lsn")


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class SystemInfo:
    """The identity every segment of the stream must share."""

    system_id: int
    pg_version: int
    segment_size: int

    @classmethod
    def of(cls, hdr: SegmentHeader) -> SystemInfo:
        return cls(hdr.system_id, hdr.pg_version, hdr.segment_size)

    def to_json(self) -> bytes:
        # system_id as text: it exceeds 2**53 and JSON readers in other languages would round it
        return json.dumps({"system_id": str(self.system_id), "pg_version": self.pg_version,
                           "segment_size": self.segment_size}, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> SystemInfo:
        try:
            obj = json.loads(data)
            return cls(int(obj["system_id"]), int(obj["pg_version"]), int(obj["segment_size"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"stream identity {where} is not valid: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One archived segment."""

    segment: str  #: file name, e.g. 000000010000000000000003
    timeline: int
    segno: int
    segment_size: int
    size: int  #: bytes of the segment as PostgreSQL wrote it
    sha256: str  #: of those bytes (not of the compressed object)
    first_lsn: int  #: LSN of the segment's first byte
    end_lsn: int  #: LSN just past its last byte
    pg_version: int
    system_id: int
    key: str  #: object key of the segment (``.zst`` when compressed)
    compressed: bool
    stored_size: int  #: bytes of the object in the store
    shipped_at: str  #: UTC, ISO 8601
    shipped_by: str  #: ``wal-push`` or ``ship``

    @property
    def name(self) -> SegmentName:
        return SegmentName(self.timeline, self.segno)

    @classmethod
    def for_segment(cls, seg: SegmentName, hdr: SegmentHeader, *, sha256: str, key: str,
                    compressed: bool, stored_size: int, shipped_by: str,
                    shipped_at: str | None = None) -> ManifestEntry:
        return cls(
            segment=seg.name(hdr.segment_size), timeline=seg.timeline, segno=seg.segno,
            segment_size=hdr.segment_size, size=hdr.segment_size, sha256=sha256,
            first_lsn=seg.start_lsn(hdr.segment_size),
            end_lsn=seg.start_lsn(hdr.segment_size) + hdr.segment_size,
            pg_version=hdr.pg_version, system_id=hdr.system_id, key=key, compressed=compressed,
            stored_size=stored_size, shipped_by=shipped_by,
            shipped_at=shipped_at or utc_now_iso())

    def to_json(self) -> bytes:
        obj: dict[str, Any] = asdict(self)
        for f in _LSN_FIELDS:  # LSNs as PostgreSQL prints them: readable and exact
            obj[f] = format_lsn(obj[f])
        obj["system_id"] = str(self.system_id)
        return json.dumps(obj, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> ManifestEntry:
        try:
            obj = json.loads(data)
            for f in _LSN_FIELDS:
                obj[f] = parse_lsn(obj[f])
            obj["system_id"] = int(obj["system_id"])
            missing = {f.name for f in fields(cls)} - set(obj)
            if missing:
                raise KeyError(", ".join(sorted(missing)))
            entry = cls(**{f.name: obj[f.name] for f in fields(cls)})
            if parse_segment_name(entry.segment, entry.segment_size) != entry.name:
                raise ValueError(f"segment {entry.segment} does not match timeline/segno")
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"manifest entry {where} is not valid: {exc}") from exc
        return entry

    def same_segment(self, other: ManifestEntry) -> bool:
        """Whether two entries describe the same bytes (who shipped it and when may differ)."""
        return (self.segment, self.size, self.sha256) == (other.segment, other.size, other.sha256)


class Manifest:
    """Read and write the manifest of one stream."""

    def __init__(self, store: ObjectStore, layout: Layout) -> None:
        self.store = store
        self.layout = layout

    # -- stream identity -------------------------------------------------------------------

    def system(self) -> SystemInfo | None:
        key = self.layout.system_key()
        try:
            return SystemInfo.from_json(self.store.get(key), self.store.url(key))
        except ObjectNotFound:
            return None

    def ensure_system(self, info: SystemInfo, segment: str) -> SystemInfo:
        """Pin the stream's identity on first use; afterwards, refuse a segment of another.

        Raises ArchiveConflictError naming ``segment`` and both identities.
        """
        key = self.layout.system_key()
        if self.store.put(key, info.to_json(), if_absent=True):
            return info
        existing = self.system()
        if existing is None:
            raise StoreError(f"{self.store.url(key)} existed a moment ago and is gone; retry")
        if existing != info:
            raise ArchiveConflictError(
                f"segment {segment} is from system {info.system_id} (PostgreSQL "
                f"{info.pg_version}, {info.segment_size}-byte segments) but "
                f"{self.store.url()} archives system {existing.system_id} (PostgreSQL "
                f"{existing.pg_version}, {existing.segment_size}-byte segments): two clusters "
                "cannot share one stream prefix; give this one its own CDCLAKE_STORE_URL")
        return existing

    # -- entries ---------------------------------------------------------------------------

    def get(self, segment: str) -> ManifestEntry | None:
        key = self.layout.manifest_key(segment)
        try:
            return ManifestEntry.from_json(self.store.get(key), self.store.url(key))
        except ObjectNotFound:
            return None

    def record(self, entry: ManifestEntry) -> ManifestEntry:
        """Write ``entry`` unless one exists; return the entry that is now in the manifest.

        An existing entry for the same bytes is kept (the first shipment's time stays);
        one for different bytes raises ArchiveConflictError.
        """
        key = self.layout.manifest_key(entry.segment)
        if self.store.put(key, entry.to_json(), if_absent=True):
            return entry
        existing = self.get(entry.segment)
        if existing is None:
            raise StoreError(f"{self.store.url(key)} existed a moment ago and is gone; retry")
        if not existing.same_segment(entry):
            raise ArchiveConflictError(
                f"segment {entry.segment}: the manifest records sha256 {existing.sha256} "
                f"({existing.size} bytes, shipped {existing.shipped_at} by "
                f"{existing.shipped_by}), this copy has sha256 {entry.sha256} ({entry.size} "
                "bytes); multiple primaries archiving to one stream?")
        return existing

    def names(self) -> list[str]:
        """Segment names with an entry, sorted; one listing, no object reads."""
        out = []
        for info in self.store.list(self.layout.manifest_prefix()):
            name = self.layout.manifest_name_of(info.key)
            if name is not None:
                out.append(name)
        return out

    def segment_holding(self, lsn: int) -> str | None:
        """The shipped segment holding ``lsn`` (the newest timeline that has it), or None
        when none is shipped yet."""
        system = self.system()
        if system is None:
            return None
        size = system.segment_size
        wanted = segno_of(lsn, size)
        names = [n for n in self.names() if parse_segment_name(n, size).segno == wanted]
        return max(names, key=lambda n: parse_segment_name(n, size).timeline, default=None)

    def segments(self, segment_size: int) -> list[SegmentName]:
        """The shipped segments, sorted by (segno, timeline)."""
        segs = [parse_segment_name(n, segment_size) for n in self.names()]
        return sorted(segs, key=lambda s: (s.segno, s.timeline))

    def histories(self, timelines: Iterable[int]) -> dict[int, list[TimelineSwitch]]:
        """Parsed ``wal/<TLI>.history`` of each of ``timelines`` the store has (not 1)."""
        out: dict[int, list[TimelineSwitch]] = {}
        for tli in sorted(set(timelines)):
            history = self.history(tli)
            if history is not None:
                out[tli] = history
        return out

    def history(self, timeline: int) -> list[TimelineSwitch] | None:
        """Parsed ``wal/<TLI>.history``, or None when the store has none (timeline 1 never
        has one)."""
        text = self.history_text(timeline)
        return None if text is None else parse_history(
            text, self.store.url(self.layout.history_key(timeline)))

    def history_text(self, timeline: int) -> str | None:
        """``wal/<TLI>.history`` as text, or None when the store has none."""
        if timeline <= 1:
            return None
        key = self.layout.history_key(timeline)
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            return None
        try:
            return data.decode("ascii")
        except UnicodeDecodeError as exc:
            raise ManifestError(f"timeline history {self.store.url(key)} is not text") from exc

    def timeline_path(self, timelines: Iterable[int]) -> TimelinePath:
        """The path the stream follows (:mod:`cdclake.wal.timelines`) through ``timelines``
        and every newer timeline whose history the store has."""
        return newest_path(timelines, self.history)

    def gaps(self, *, head_lsn: int | None = None,
             head_timeline: int | None = None) -> list[Gap]:
        """Continuity of what the manifest records (for ``cdclake status``); see
        :func:`cdclake.archive.gaps.check_continuity`. ``head_lsn``: the source's current LSN
        (``pg_current_wal_lsn()``), to report segments written but not archived yet."""
        system = self.system()
        if system is None:
            return []
        segments = self.segments(system.segment_size)
        timelines = {s.timeline for s in segments} | (
            {head_timeline} if head_timeline is not None else set())
        return check_continuity(segments, self.histories(timelines),
                                segment_size=system.segment_size, head_lsn=head_lsn,
                                head_timeline=head_timeline)

    def entries(self) -> Iterator[ManifestEntry]:
        """Every entry, in name order (one read per entry)."""
        for name in self.names():
            entry = self.get(name)
            if entry is not None:
                yield entry
