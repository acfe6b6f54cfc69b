"""Logical decoding messages (replication/message.h): pg_logical_emit_message()."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cdclake.errors import WalCorruptError
from cdclake.wal.record import XLogRecord

XLOG_LOGICAL_MESSAGE = 0x00
_HEAD = struct.Struct("<IB3xQQ")  # dbId, transactional, prefix_size, message_size


@dataclass(slots=True)
class LogicalMessage:
    db_id: int
    transactional: bool
    prefix: str
    message: bytes


def parse(rec: XLogRecord) -> LogicalMessage:
    md = rec.main_data
    try:
        db_id, transactional, psize, msize = _HEAD.unpack_from(md, 0)
        p = _HEAD.size
        if p + psize + msize > len(md) or psize == 0:
            raise ValueError(f"sizes {psize}+{msize} exceed the record")
        prefix = bytes(md[p:p + psize - 1]).decode()
        message = bytes(md[p + psize:p + psize + msize])
    except (struct.error, ValueError) as exc:
        raise WalCorruptError(f"malformed LogicalMessage record: {exc}", segment=rec.segment,
                              lsn=rec.lsn) from None
    return LogicalMessage(db_id, bool(transactional), prefix, message)
