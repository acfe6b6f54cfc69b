"""Synthetic WAL files for the archive's unit tests.

The archive checks a segment from its first page header alone (magic, flags, page address,
system id, segment and block size), so a segment here is that header followed by
deterministic filler — enough to exercise every check without a server. Real segments from
PostgreSQL 15 and 18 are used by the e2e tests.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from cdclake.archive.segment import XLP_LONG_HEADER
from cdclake.lsn import segment_name
from cdclake.wal.reader import PAGE_SIZE, XLogReader
from cdclake.wal.source import DirectorySource

MB = 1 << 20
SEGSIZE = MB
SYSID = 7_300_000_000_000_000_123
MAGIC = {15: 0xD110, 16: 0xD113, 17: 0xD116, 18: 0xD118}


def segment_bytes(timeline: int, segno: int, *, segsize: int = SEGSIZE, version: int = 15,
                  sysid: int = SYSID, page_tli: int | None = None, pageaddr: int | None = None,
                  magic: int | None = None, info: int = XLP_LONG_HEADER, blcksz: int = 8192,
                  salt: bytes = b"") -> bytes:
    """A segment-shaped file: long page header + filler that depends on name and ``salt``."""
    header = struct.pack(
        "<HHIQIIQII", MAGIC[version] if magic is None else magic, info,
        timeline if page_tli is None else page_tli,
        segno * segsize if pageaddr is None else pageaddr, 0, 0, sysid, segsize, blcksz)
    seed = hashlib.sha256(f"{timeline}/{segno}".encode() + salt).digest()
    body = (seed * (segsize // len(seed) + 1))[: segsize - len(header)]
    return header + body


def write_segment(directory: Path, timeline: int, segno: int, **kwargs: object) -> Path:
    segsize = int(kwargs.get("segsize", SEGSIZE))  # type: ignore[call-overload]
    path = directory / segment_name(timeline, segno, segsize)
    path.write_bytes(segment_bytes(timeline, segno, **kwargs))  # type: ignore[arg-type]
    return path


def history_text(*switches: tuple[int, int]) -> str:
    """A ``.history`` file: (parent timeline, switch LSN) per line, as PostgreSQL writes it."""
    return "".join(f"{tli}\t{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}\tno recovery target specified\n"
                   for tli, lsn in switches)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def padding_offset(path: Path) -> int:
    """Where in the real segment file ``path`` a byte lies that no record's CRC covers: the
    alignment padding after a record ending inside a page (records start 8-byte aligned).
    PostgreSQL's reader skips it, and so does cdclake's."""
    reader = XLogReader(DirectorySource(path))
    for rec in reader:
        end = rec.lsn + rec.tot_len
        start = rec.lsn - rec.lsn % reader.segment_size
        if end % 8 and end % PAGE_SIZE and end - start < reader.segment_size:
            return end - start
    raise AssertionError(f"no record of {path} ends short of an 8-byte boundary")
