"""The WAL reader's segment source over the object store, so decoding reads the archive
directly — locally or inside a Spark task (the store pickles without its client).

Full segments only: ``.partial`` files are the unfinished tail of an abandoned timeline and
PostgreSQL's own recovery never reads them either; the new timeline's copy of that segment is
the one on the path.

The manifest says what is archived: a segment is listed once its entry is written, which
happens after the segment is complete in the store (a push that died in between left none: the
segment is not archived yet, and the push's retry completes it). Every segment read back is
checked against the sha256 its entry recorded when it was archived: a record's CRC does not
cover its alignment padding or a page's unused tail, so a damaged or replaced copy could
otherwise be decoded without anyone noticing. Each read is hashed where it happens, in the
Spark task that reads the segment anyway (some 10 ms per 16 MiB segment with the CPU's SHA
extensions, without the GIL held: about 2% of a pgbench decode's CPU).
"""

from __future__ import annotations

from cdclake.archive.compress import decompress
from cdclake.archive.layout import Layout, WalFileKind, wal_file_kind
from cdclake.archive.manifest import Manifest, ManifestEntry
from cdclake.archive.segment import read_long_header
from cdclake.archive.store import ObjectStore, sha256_hex
from cdclake.errors import ObjectNotFound, SegmentDigestError, WalError
from cdclake.lsn import SegmentName


class StoreSegmentSource:
    """Segments of one stream in a store (implements cdclake.wal.source.SegmentSource)."""

    def __init__(self, store: ObjectStore, layout: Layout | None = None,
                 segment_size: int | None = None) -> None:
        self.store = store
        self.layout = layout if layout is not None else Layout()
        self._segment_size = segment_size
        self._entries: dict[SegmentName, ManifestEntry] = {}

    def __repr__(self) -> str:
        return f"StoreSegmentSource({self.store.url()!r})"

    def segment_size(self) -> int:
        """From the stream's identity, or else the first segment's header.

        Raises WalError if the store holds no segment to tell.
        """
        if self._segment_size is None:
            system = Manifest(self.store, self.layout).system()
            if system is not None:
                self._segment_size = system.segment_size
            else:
                self._segment_size = self._size_from_first_segment()
        return self._segment_size

    def _size_from_first_segment(self) -> int:
        for info in self.store.list(self.layout.wal_prefix()):
            parsed = self.layout.wal_file_of(info.key)
            if parsed is None or wal_file_kind(parsed[0]) is not WalFileKind.SEGMENT:
                continue
            data = self._read_key(info.key, parsed[0])
            return read_long_header(data, self.store.url(info.key)).segment_size
        raise WalError(f"no WAL segments in {self.store.url(self.layout.wal_prefix())}")

    def list_segments(self) -> list[SegmentName]:
        """The segments the manifest records, by segment number then timeline."""
        return Manifest(self.store, self.layout).segments(self.segment_size())

    def read_segment(self, segment: SegmentName) -> bytes:
        """The segment as PostgreSQL wrote it, checked against its manifest entry.

        Raises WalError when it has no entry or its object is gone, SegmentDigestError when
        its bytes are not the ones archived."""
        name = segment.name(self.segment_size())
        entry = self._entry(segment)
        if entry is None:
            raise WalError(f"segment is not in the archive at {self.store.url()} (no manifest "
                           "entry)", segment=name)
        try:
            data = self._read_key(entry.key, name)
        except ObjectNotFound as exc:
            raise WalError(f"segment is not in the archive at {self.store.url(entry.key)}, "
                           "though its manifest entry says it was archived", segment=name) from exc
        found = sha256_hex(data)
        if found != entry.sha256:
            raise SegmentDigestError(
                f"{self.store.url(entry.key)} has sha256 {found}, not the {entry.sha256} its "
                f"manifest entry recorded when {entry.shipped_by} archived it "
                f"({entry.shipped_at}): the stored copy was damaged or replaced, and nothing "
                "is decoded from it; put back a copy with the recorded sha256 (from the "
                "source's pg_wal or a backup)", segment=name)
        return data

    def _entry(self, segment: SegmentName) -> ManifestEntry | None:
        if segment not in self._entries:
            entry = Manifest(self.store, self.layout).get(segment.name(self.segment_size()))
            if entry is None:
                return None
            self._entries[segment] = entry
        return self._entries[segment]

    def _read_key(self, key: str, name: str) -> bytes:
        data = self.store.get(key)
        if self.layout.wal_file_of(key) == (name, True):
            return decompress(data, self.store.url(key))
        return data

    def read_history(self, timeline: int) -> str | None:
        return Manifest(self.store, self.layout).history_text(timeline)

    def describe(self, segment: SegmentName) -> str:
        entry = self._entry(segment)
        key = entry.key if entry else self.layout.segment_key(segment, self.segment_size())
        return self.store.url(key)
