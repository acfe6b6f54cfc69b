"""Checks a segment file before it enters the archive, from its first page alone.

The archive must never hold a file that is not the segment its name says: a half-copied file
(``cp`` into an archive directory is not atomic), a recycled segment with stale content, a
file from another cluster or another PostgreSQL version. The long page header at offset 0
(access/xlog_internal.h, XLogLongPageHeaderData) tells all of that without reading records,
so wal-push and ship stay fast and independent of the full WAL reader.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake.errors import WalCorruptError, WalError, WalTruncatedError, WalVersionError
from cdclake.lsn import SegmentName, check_segment_size, format_lsn, parse_segment_name

#: XLOG_PAGE_MAGIC of each PostgreSQL major version cdclake reads.
PAGE_MAGIC_VERSIONS = {0xD110: 15, 0xD113: 16, 0xD116: 17, 0xD118: 18}
XLOG_BLCKSZ = 8192
XLP_FIRST_IS_CONTRECORD = 0x0001
XLP_LONG_HEADER = 0x0002
XLP_FIRST_IS_OVERWRITE_CONTRECORD = 0x0004
XLP_ALL_FLAGS = 0x0007
LONG_HEADER_SIZE = 40
# magic u16, info u16, tli u32, pageaddr u64, rem_len u32, pad u32, sysid u64, seg u32, blck u32
_LONG_HEADER = struct.Struct("<HHIQIIQII")


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """The fields of a segment's first page header that identify it."""

    magic: int
    pg_version: int
    info: int
    timeline: int  #: xlp_tli: the timeline of the first page (the parent's, on a switch segment)
    pageaddr: int  #: LSN of the segment's first byte
    system_id: int
    segment_size: int
    block_size: int


def read_long_header(data: bytes | memoryview, where: str) -> SegmentHeader:
    """Parse the long page header at the start of ``data``; ``where`` names the file."""
    if len(data) < LONG_HEADER_SIZE:
        raise WalTruncatedError(
            f"{len(data)} bytes is too short for a WAL segment's first page header", segment=where)
    magic, info, tli, pageaddr, _rem, _pad, sysid, seg_size, blcksz = _LONG_HEADER.unpack_from(
        data, 0)
    version = PAGE_MAGIC_VERSIONS.get(magic)
    if version is None:
        raise WalVersionError(
            f"page magic 0x{magic:04X} is not PostgreSQL 15-18 "
            f"({', '.join(f'0x{m:04X}={v}' for m, v in PAGE_MAGIC_VERSIONS.items())})",
            segment=where)
    if not info & XLP_LONG_HEADER or info & ~XLP_ALL_FLAGS:
        raise WalCorruptError(
            f"first page has info flags 0x{info:04X}; a segment starts with a long header",
            segment=where)
    return SegmentHeader(magic, version, info, tli, pageaddr, sysid, seg_size, blcksz)


def verify_segment(name: str, data: bytes | memoryview) -> tuple[SegmentName, SegmentHeader]:
    """Check that ``data`` is the complete segment ``name`` (or ``name.partial``).

    Raises WalTruncatedError if the file is shorter than its segment size (still being copied,
    or cut), WalVersionError for an unknown page magic, WalCorruptError for anything else that
    does not match the name.
    """
    hdr = read_long_header(data, name)
    try:
        check_segment_size(hdr.segment_size)
    except WalError as exc:
        raise WalCorruptError(f"header says segment size {hdr.segment_size}", segment=name) \
            from exc
    if hdr.block_size != XLOG_BLCKSZ:
        raise WalCorruptError(
            f"header says WAL block size {hdr.block_size}; cdclake reads {XLOG_BLCKSZ}",
            segment=name)
    if len(data) < hdr.segment_size:
        raise WalTruncatedError(
            f"file has {len(data)} bytes, its header says the segment size is "
            f"{hdr.segment_size}", segment=name)
    if len(data) > hdr.segment_size:
        raise WalCorruptError(
            f"file has {len(data)} bytes, more than the segment size {hdr.segment_size}",
            segment=name)
    try:
        seg = parse_segment_name(name, hdr.segment_size)
    except ValueError as exc:
        raise WalCorruptError(str(exc), segment=name) from exc
    expected = seg.start_lsn(hdr.segment_size)
    if hdr.pageaddr != expected:
        raise WalCorruptError(
            f"first page address {format_lsn(hdr.pageaddr)} does not match the file name, which "
            f"starts at {format_lsn(expected)}: a recycled or misnamed segment", segment=name)
    if hdr.timeline > seg.timeline or hdr.timeline == 0:
        raise WalCorruptError(
            f"first page is on timeline {hdr.timeline}, the file name says {seg.timeline}",
            segment=name)
    return seg, hdr
