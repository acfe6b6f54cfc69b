"""Spill files: a transaction's changes serialized when the reorder buffer passes work_mem.

As in PostgreSQL (ReorderBufferSerializeTXN), changes go to one file per transaction and segment,
named ``xid-<XID>-lsn-<HI>-<LO>.spill`` after the start LSN of the segment the change's record
lies in, and are read back in order at commit. The format is our own and versioned, because
spill files also carry open transactions from one batch to the next through the object store:

    file   := MAGIC entry*
    entry  := u32 body_len, u32 crc32c(body), body
    body   := u8 action, u64 lsn, u32 seq, u16 origin, u8 flags, [locator 3*u32],
              [old tuple], [new tuple], [payload]
    tuple  := u16 infomask2, u16 infomask, u8 t_hoff, u32 len, bytes
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import crc32c

from cdclake.decoding.changes import (
    MESSAGE,
    TOAST_CHUNK,
    TRUNCATE,
    Change,
    Message,
    ToastChunk,
    Truncate,
)
from cdclake.errors import SpillError
from cdclake.wal.record import RelFileLocator, WalTuple

MAGIC = b"CDCSPIL1"

_ENTRY = struct.Struct("<II")
_HEAD = struct.Struct("<BQIHB")
_LOC = struct.Struct("<III")
_TUP = struct.Struct("<HHBI")
_TRUNC = struct.Struct("<BBI")
_MSG = struct.Struct("<BII")
_CHUNK = struct.Struct("<IiI")
_U32 = struct.Struct("<I")

F_CLEAR_TOAST = 0x01
F_LOCATOR = 0x02
F_OLD = 0x04
F_NEW = 0x08


def spill_file_name(xid: int, segment_start_lsn: int) -> str:
    return f"xid-{xid}-lsn-{segment_start_lsn >> 32:X}-{segment_start_lsn & 0xFFFFFFFF:X}.spill"


def _pack_tuple(out: list[bytes], t: WalTuple) -> None:
    out.append(_TUP.pack(t.infomask2, t.infomask, t.t_hoff, len(t.data)))
    out.append(t.data)


def encode_change(ch: Change) -> bytes:
    flags = F_CLEAR_TOAST if ch.clear_toast else 0
    if ch.locator is not None:
        flags |= F_LOCATOR
    if ch.old is not None:
        flags |= F_OLD
    if ch.new is not None:
        flags |= F_NEW
    parts = [_HEAD.pack(ch.action, ch.lsn, ch.seq, ch.origin, flags)]
    if ch.locator is not None:
        parts.append(_LOC.pack(*ch.locator))
    if ch.old is not None:
        _pack_tuple(parts, ch.old)
    if ch.new is not None:
        _pack_tuple(parts, ch.new)
    p = ch.payload
    if ch.action == TRUNCATE:
        assert isinstance(p, Truncate)
        parts.append(_TRUNC.pack(p.cascade, p.restart_seqs, len(p.relids)))
        parts.append(struct.pack(f"<{len(p.relids)}I", *p.relids))
    elif ch.action == MESSAGE:
        assert isinstance(p, Message)
        prefix = p.prefix.encode()
        parts.append(_MSG.pack(p.transactional, len(prefix), len(p.content)))
        parts.append(prefix)
        parts.append(p.content)
    elif ch.action == TOAST_CHUNK:
        assert isinstance(p, ToastChunk)
        parts.append(_CHUNK.pack(p.value_id, p.seq, len(p.data)))
        parts.append(p.data)
    body = b"".join(parts)
    return _ENTRY.pack(len(body), crc32c.crc32c(body)) + body


def decode_change(body: bytes) -> Change:
    action, lsn, seq, origin, flags = _HEAD.unpack_from(body, 0)
    pos = _HEAD.size
    locator = old = new = None
    payload: object = None
    if flags & F_LOCATOR:
        locator = RelFileLocator(*_LOC.unpack_from(body, pos))
        pos += _LOC.size
    if flags & F_OLD:
        im2, im, hoff, n = _TUP.unpack_from(body, pos)
        pos += _TUP.size
        old = WalTuple(im2, im, hoff, body[pos:pos + n])
        pos += n
    if flags & F_NEW:
        im2, im, hoff, n = _TUP.unpack_from(body, pos)
        pos += _TUP.size
        new = WalTuple(im2, im, hoff, body[pos:pos + n])
        pos += n
    if action == TRUNCATE:
        cascade, restart, n = _TRUNC.unpack_from(body, pos)
        pos += _TRUNC.size
        payload = Truncate(struct.unpack_from(f"<{n}I", body, pos), bool(cascade), bool(restart))
    elif action == MESSAGE:
        transactional, plen, clen = _MSG.unpack_from(body, pos)
        pos += _MSG.size
        prefix = body[pos:pos + plen].decode()
        pos += plen
        payload = Message(prefix, body[pos:pos + clen], bool(transactional))
    elif action == TOAST_CHUNK:
        value_id, cseq, n = _CHUNK.unpack_from(body, pos)
        pos += _CHUNK.size
        payload = ToastChunk(value_id, cseq, body[pos:pos + n])
    return Change(action, lsn, seq, locator, old, new, bool(flags & F_CLEAR_TOAST), origin,
                  payload)


def open_private(path: Path, mode: str) -> BinaryIO:
    """Open a spill file for writing, created readable by this user only (0600): it holds
    row values, which other users of the machine must not read."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o600), mode)


def private_dir(path: Path) -> None:
    """Create a spill directory, 0700 (missing parents get the default mode)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def append_changes(path: Path, changes: list[Change]) -> int:
    """Append ``changes`` to the spill file at ``path`` (created with its magic); bytes written."""
    new = not path.exists()
    data = b"".join(encode_change(c) for c in changes)
    with open_private(path, "ab") as f:
        if new:
            f.write(MAGIC)
        f.write(data)
        f.flush()
    return len(data)


def read_changes(path: Path) -> Iterator[Change]:
    """Yield the changes of one spill file in the order they were written."""
    try:
        f: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed in finally, generator
    except OSError as exc:
        raise SpillError(f"spill file {path} cannot be read: {exc}") from exc
    try:
        if f.read(len(MAGIC)) != MAGIC:
            raise SpillError(f"spill file {path} is not a cdclake spill file (bad magic)")
        offset = len(MAGIC)
        while True:
            head = f.read(_ENTRY.size)
            if not head:
                return
            if len(head) < _ENTRY.size:
                raise SpillError(f"spill file {path} is truncated at offset {offset}")
            n, crc = _ENTRY.unpack(head)
            body = f.read(n)
            if len(body) < n or crc32c.crc32c(body) != crc:
                raise SpillError(f"spill file {path} is corrupt at offset {offset}")
            yield decode_change(body)
            offset += _ENTRY.size + n
    finally:
        f.close()


def remove_files(paths: list[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)
