"""The WAL reader's segment source over the object store, so decoding reads the archive
directly — locally or inside a Spark task (the store pickles without its client).

Full segments only: ``.partial`` files are the unfinished tail of an abandoned timeline and
PostgreSQL's own recovery never reads them either; the new timeline's copy of that segment is
the one on the path.
"""

from __future__ import annotations

from cdclake.archive.compress import decompress
from cdclake.archive.layout import Layout, WalFileKind, wal_file_kind
from cdclake.archive.manifest import Manifest
from cdclake.archive.segment import read_long_header
from cdclake.archive.store import ObjectStore
from cdclake.errors import ObjectNotFound, WalError
from cdclake.wal.lsn import SegmentName, parse_segment_name


class StoreSegmentSource:
    """Segments of one stream in a store (implements cdclake.wal.source.SegmentSource)."""

    def __init__(self, store: ObjectStore, layout: Layout | None = None,
                 segment_size: int | None = None) -> None:
        self.store = store
        self.layout = layout if layout is not None else Layout()
        self._segment_size = segment_size
        self._keys: dict[SegmentName, str] = {}

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
        size = self.segment_size()
        keys: dict[SegmentName, str] = {}
        for info in self.store.list(self.layout.wal_prefix()):
            parsed = self.layout.wal_file_of(info.key)
            if parsed is None or wal_file_kind(parsed[0]) is not WalFileKind.SEGMENT:
                continue
            try:
                seg = parse_segment_name(parsed[0], size)
            except ValueError as exc:
                raise WalError(str(exc), segment=self.store.url(info.key)) from exc
            # plain and .zst copies are the same bytes (wal-push guarantees it): keep plain
            if seg not in keys or not parsed[1]:
                keys[seg] = info.key
        self._keys = keys
        return sorted(keys, key=lambda s: (s.segno, s.timeline))

    def read_segment(self, segment: SegmentName) -> bytes:
        size = self.segment_size()
        name = segment.name(size)
        known = self._keys.get(segment)
        candidates = [known] if known else [self.layout.segment_key(segment, size),
                                            self.layout.segment_key(segment, size,
                                                                    compressed=True)]
        for key in candidates:
            try:
                return self._read_key(key, name)
            except ObjectNotFound:
                continue
        raise WalError(f"segment is not in the archive at {self.store.url()}", segment=name)

    def _read_key(self, key: str, name: str) -> bytes:
        data = self.store.get(key)
        if self.layout.wal_file_of(key) == (name, True):
            return decompress(data, self.store.url(key))
        return data

    def read_history(self, timeline: int) -> str | None:
        return Manifest(self.store, self.layout).history_text(timeline)

    def describe(self, segment: SegmentName) -> str:
        size = self.segment_size()
        key = self._keys.get(segment) or self.layout.segment_key(segment, size)
        return self.store.url(key)
