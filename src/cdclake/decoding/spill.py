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

A large transaction (a bulk load, ``pgbench -i``) spills nearly every change it has and reads
each back at its commit, so both directions have compiled twins (:func:`encode_runs`,
:func:`decode_entries`); a profile of a 684,000-change pgbench WAL gave the Python ones 1.5 s
of a 4.3 s decode. A spill file is read back in blocks of :data:`READ_SIZE`, not an entry at a
time.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import crc32c

from cdclake import native
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


def encode_runs(changes: Sequence[Change], segment_size: int) -> list[tuple[int, int, bytes]]:
    """``changes`` (in LSN order) as spill entries, one run per WAL segment their records lie
    in (each run goes to its segment's spill file): (segment number, changes, entries)."""
    out = []
    for segno, group in itertools.groupby(changes, key=lambda c: c.lsn // segment_size):
        run = list(group)
        out.append((segno, len(run), b"".join(encode_change(c) for c in run)))
    return out


def decode_entries(data: bytes, offset: int, path: str) -> tuple[list[Change], int]:
    """The changes of the whole entries at the start of ``data`` (read from ``path`` at
    ``offset``), and the bytes they take; an entry whose CRC does not match is a SpillError."""
    out = []
    pos = 0
    while pos + _ENTRY.size <= len(data):
        n, crc = _ENTRY.unpack_from(data, pos)
        end = pos + _ENTRY.size + n
        if end > len(data):
            break
        body = data[pos + _ENTRY.size:end]
        if crc32c.crc32c(body) != crc:
            raise SpillError(f"spill file {path} is corrupt at offset {offset + pos}")
        out.append(decode_change(body))
        pos = end
    return out, pos


encode_runs = native.twin(encode_runs, "cdclake.decoding._spill")
decode_entries = native.twin(decode_entries, "cdclake.decoding._spill")


def open_private(path: Path, mode: str) -> BinaryIO:
    """Open a spill file for writing, created readable by this user only (0600): it holds
    row values, which other users of the machine must not read."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, 0o600), mode)


def private_dir(path: Path) -> None:
    """Create a spill directory, 0700 (missing parents get the default mode)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def append_entries(path: Path, data: bytes) -> None:
    """Append spill entries (:func:`encode_runs`) to the spill file at ``path``, created with
    its magic."""
    new = not path.exists()
    with open_private(path, "ab") as f:
        if new:
            f.write(MAGIC)
        f.write(data)
        f.flush()


#: the bytes a spill file is read in (PostgreSQL restores 4096 changes at a time)
READ_SIZE = 1 << 20


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
        rest = b""
        while True:
            # an entry longer than a block (a large message) is read whole
            want = READ_SIZE
            if len(rest) >= _ENTRY.size:
                want = max(want, _ENTRY.size + _U32.unpack_from(rest)[0] - len(rest))
            block = f.read(want)
            if not block:
                if rest:
                    raise SpillError(f"spill file {path} is "
                                     f"{'truncated' if len(rest) < _ENTRY.size else 'corrupt'} "
                                     f"at offset {offset}")
                return
            data = rest + block if rest else block
            changes, used = decode_entries(data, offset, str(path))
            offset += used
            rest = data[used:]
            yield from changes
    finally:
        f.close()


def remove_files(paths: list[Path]) -> None:
    for p in paths:
        p.unlink(missing_ok=True)
