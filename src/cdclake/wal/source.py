"""Where the XLogReader gets segment bytes from: a local directory or an object store.

The reader only needs the segment size, the segments that exist, and one segment's bytes; a
source that holds ``.zst`` segments decompresses them. Keeping this a small protocol lets the
same reader run over ``pg_wal``, an archive directory, or S3 inside a Spark task.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple, Protocol

from cdclake.errors import WalCorruptError, WalError, WalTruncatedError
from cdclake.lsn import (
    SegmentName,
    check_segment_size,
    is_history_name,
    is_segment_name,
    segments_per_xlogid,
)


class SegmentSource(Protocol):
    """Segments of one WAL stream."""

    @property
    def segment_size(self) -> int:
        """Bytes per segment (from the first segment's long page header or the manifest)."""
        ...

    def list_segments(self) -> list[SegmentName]:
        """Every segment present (any timeline), sorted by (segno, timeline)."""
        ...

    def read_segment(self, segment: SegmentName) -> bytes:
        """The segment's whole content, decompressed. Raises WalError if unreadable."""
        ...

    def read_history(self, timeline: int) -> str | None:
        """``<timeline>.history`` as text, or None if the source has none."""
        ...

    def describe(self, segment: SegmentName) -> str:
        """How to name the segment in an error message (file path or object key)."""
        ...


class DirectorySource:
    """Segments in local directories and/or explicit files (``pg_wal``, an archive directory).

    Files may be plain, ``.zst``-compressed (as ``cdclake ship --compress`` stores them) or
    ``.partial``. The segment size comes from the first segment's long page header.
    """

    def __init__(self, paths: Path | str | Iterable[Path | str]) -> None:
        if isinstance(paths, (str, Path)):
            paths = [paths]
        self._segments: dict[_Loose, Path] = {}
        self._histories: dict[int, Path] = {}
        files: list[Path] = []
        given = [Path(p) for p in paths]
        for p in given:
            if p.is_dir():
                files.extend(sorted(f for f in p.iterdir() if f.is_file()))
            elif p.exists():
                files.append(p)
            else:
                raise WalError(f"no such WAL file or directory: {p}")
        self._size: int | None = None
        self._given = ", ".join(map(str, given))
        for f in files:
            name = f.name[:-4] if f.name.endswith(".zst") else f.name
            if is_history_name(name):
                self._histories[int(name[:8], 16)] = f
            elif is_segment_name(name):
                seg = _parse_loose(name)
                # a complete segment wins over a .partial one of the same name
                if seg not in self._segments or self._segments[seg].name.endswith(".partial"):
                    self._segments[seg] = f

    @property
    def segment_size(self) -> int:
        if self._size is None:
            if not self._segments:
                raise WalError(f"no WAL segment (a file named like 000000010000000000000001) "
                               f"in {self._given}")
            first = min(self._segments, key=lambda s: (s.segno_hint, s.timeline))
            data = self._read(self._segments[first])
            # the file's own length is the best guess of the size for naming its LSN
            lsn = first.segno(len(data)) * len(data) if _valid_size(len(data)) else None
            self._size = long_header_segment_size(data[:40], str(self._segments[first]), lsn)
        return self._size

    def list_segments(self) -> list[SegmentName]:
        size = self.segment_size
        out = [SegmentName(s.timeline, s.segno(size), s.partial) for s in self._segments]
        return sorted(out, key=lambda s: (s.segno, s.timeline))

    def read_segment(self, segment: SegmentName) -> bytes:
        return self._read(self._path(segment))

    def read_history(self, timeline: int) -> str | None:
        p = self._histories.get(timeline)
        return None if p is None else self._read(p).decode()

    def describe(self, segment: SegmentName) -> str:
        return str(self._path(segment))

    def is_partial(self, segment: SegmentName) -> bool:
        return self._path(segment).name.replace(".zst", "").endswith(".partial")

    def _path(self, segment: SegmentName) -> Path:
        size = self.segment_size
        for loose, path in self._segments.items():
            if loose.timeline == segment.timeline and loose.segno(size) == segment.segno:
                return path
        raise WalError(f"segment {segment.name(size)} is not in this source")

    @staticmethod
    def _read(path: Path) -> bytes:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise WalError(f"cannot read {path}: {exc}") from exc
        if path.name.endswith(".zst"):
            import zstandard

            try:
                data = zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 31)
            except zstandard.ZstdError as exc:
                raise WalError(f"cannot decompress {path}: {exc}") from exc
        return data


class _Loose(NamedTuple):
    """A segment name whose segno depends on the (not yet known) segment size."""

    timeline: int
    log: int
    seg: int
    partial: bool

    @property
    def segno_hint(self) -> int:
        return (self.log << 32) | self.seg

    def segno(self, segment_size: int) -> int:
        return self.log * segments_per_xlogid(segment_size) + self.seg


def _parse_loose(name: str) -> _Loose:
    return _Loose(int(name[0:8], 16), int(name[8:16], 16), int(name[16:24], 16),
                  name.endswith(".partial"))


def _valid_size(size: int) -> bool:
    return 1 << 20 <= size <= 1 << 30 and not size & (size - 1)


def long_header_segment_size(head: bytes, where: str, lsn: int | None = None) -> int:
    """xlp_seg_size of a segment's first (long) page header.

    Errors are WalCorruptError/WalTruncatedError naming the file and, when known, the LSN of
    the segment start: a file that is not WAL at all must read as corrupt input, not as a
    generic failure.
    """
    if len(head) < 40:
        raise WalTruncatedError("segment is too short to hold a long page header",
                                segment=where, lsn=lsn)
    magic = int.from_bytes(head[0:2], "little")
    info = int.from_bytes(head[2:4], "little")
    if not info & 0x0002:
        raise WalCorruptError(f"first page of the segment has no long header (magic "
                              f"0x{magic:04X}, info 0x{info:04X}): not a WAL segment?",
                              segment=where, lsn=lsn)
    size = int.from_bytes(head[32:36], "little")
    try:
        return check_segment_size(size)
    except WalError as exc:
        raise WalCorruptError(f"{exc} (page magic 0x{magic:04X}): not a WAL segment?",
                              segment=where, lsn=lsn) from exc
