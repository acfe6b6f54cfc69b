"""Relation mapper updates (utils/relmapper.h): where mapped catalogs like pg_class live."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake.errors import WalCorruptError
from cdclake.wal.record import XLogRecord

XLOG_RELMAP_UPDATE = 0x00
RELMAPPER_FILEMAGIC = 0x592717
_HEAD = struct.Struct("<IIi")  # dbid, tsid, nbytes
_FILE = struct.Struct("<ii")  # magic, num_mappings


@dataclass(slots=True)
class RelmapUpdate:
    db_id: int  #: 0 for the shared map
    ts_id: int
    mappings: dict[int, int]  #: relation oid -> relfilenumber


def parse(rec: XLogRecord) -> RelmapUpdate | None:
    if rec.info & 0xF0 != XLOG_RELMAP_UPDATE:
        return None
    md = rec.main_data
    try:
        db, ts, _nbytes = _HEAD.unpack_from(md, 0)
        magic, n = _FILE.unpack_from(md, _HEAD.size)
        if magic != RELMAPPER_FILEMAGIC or not 0 <= n <= 64:
            raise ValueError(f"bad relmap file magic 0x{magic:X} or count {n}")
        flat = struct.unpack_from(f"<{2 * n}I", md, _HEAD.size + _FILE.size)
    except (struct.error, ValueError) as exc:
        raise WalCorruptError(f"malformed RelMap record: {exc}", segment=rec.segment,
                              lsn=rec.lsn) from None
    return RelmapUpdate(db, ts, {flat[i]: flat[i + 1] for i in range(0, 2 * n, 2)})
