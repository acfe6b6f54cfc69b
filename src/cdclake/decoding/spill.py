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
each back at its commit (a profile of a 684,000-change pgbench WAL once gave the encoding and
decoding in Python 1.5 s of a 4.3 s decode). So the format is written once, here, with the
reader's field primitives and their writing counterparts (:mod:`cdclake.wal.primitives`), and
this file is compiled as itself (Cython's pure-Python mode, ``_spill.pxd``): there an entry is
written into one buffer and read back into a Change and its WalTuples at their slots, without
``struct``, slices or their ``__init__``. A spill file is read back in blocks of
:data:`READ_SIZE`, not an entry at a time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

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

try:
    import cython
except ImportError:  # Cython builds cdclake; an install without it runs this file as Python
    from cdclake.native import NOT_COMPILED as cython

if cython.compiled:
    from cython.cimports.cdclake.wal._primitives import (
        bytes_of,
        crc_at,
        finish_buffer,
        new_buffer,
        new_tuple,
        span,
        u8,
        u16,
        u32,
        u64,
        w8,
        w16,
        w32,
        w64,
        w_bytes,
        writable,
    )
    from cython.cimports.cdclake.wal._slots import blank, field_of, offset, put
else:
    from cdclake.wal.primitives import (
        bytes_of,
        crc_at,
        field_of,
        finish_buffer,
        new_buffer,
        new_tuple,
        span,
        u8,
        u16,
        u32,
        u64,
        w8,
        w16,
        w32,
        w64,
        w_bytes,
        writable,
    )

MAGIC = b"CDCSPIL1"

#: sizes: an entry's length and CRC; a body's head (action, lsn, seq, origin, flags); a
#: locator; a tuple's header (infomask2, infomask, t_hoff, length); a TRUNCATE's (cascade,
#: restart_seqs, count), a MESSAGE's (transactional, prefix length, content length) and a
#: TOAST chunk's (value id, seq, length) payload headers
ENTRY = 8
HEAD = 16
LOC = 12
TUP = 9
TRUNC = 6
MSG = 9
CHUNK = 12

F_CLEAR_TOAST = 0x01
F_LOCATOR = 0x02
F_OLD = 0x04
F_NEW = 0x08

if cython.compiled:  # where a Change holds its fields (wal/_slots.pxd)
    C_ACTION = offset(Change, "action")
    C_LSN = offset(Change, "lsn")
    C_SEQ = offset(Change, "seq")
    C_LOCATOR = offset(Change, "locator")
    C_OLD = offset(Change, "old")
    C_NEW = offset(Change, "new")
    C_CLEAR_TOAST = offset(Change, "clear_toast")
    C_ORIGIN = offset(Change, "origin")
    C_PAYLOAD = offset(Change, "payload")
    T_INFOMASK2 = offset(WalTuple, "infomask2")
    T_INFOMASK = offset(WalTuple, "infomask")
    T_HOFF = offset(WalTuple, "t_hoff")
    T_DATA = offset(WalTuple, "data")
else:  # read by name
    C_ACTION = C_LSN = C_SEQ = C_LOCATOR = C_OLD = C_NEW = C_CLEAR_TOAST = C_ORIGIN = 0
    C_PAYLOAD = T_INFOMASK2 = T_INFOMASK = T_HOFF = T_DATA = 0


def spill_file_name(xid: int, segment_start_lsn: int) -> str:
    return f"xid-{xid}-lsn-{segment_start_lsn >> 32:X}-{segment_start_lsn & 0xFFFFFFFF:X}.spill"


# -- writing ----------------------------------------------------------------------------------


def _tuple_size(t: Any) -> int:
    return 0 if t is None else TUP + len(field_of(t, WalTuple, T_DATA, "data"))


def entry_size(c: Change) -> int:
    """The bytes of ``c``'s entry."""
    n = (ENTRY + HEAD + (0 if field_of(c, Change, C_LOCATOR, "locator") is None else LOC)
         + _tuple_size(field_of(c, Change, C_OLD, "old"))
         + _tuple_size(field_of(c, Change, C_NEW, "new")))
    action = field_of(c, Change, C_ACTION, "action")
    p = field_of(c, Change, C_PAYLOAD, "payload")
    if action == TRUNCATE:
        n += TRUNC + 4 * len(p.relids)
    elif action == MESSAGE:
        n += MSG + len(p.prefix.encode()) + len(p.content)
    elif action == TOAST_CHUNK:
        n += CHUNK + len(p.data)
    return n


def _put_tuple(b: Any, at: int, t: Any) -> int:
    data = field_of(t, WalTuple, T_DATA, "data")
    w16(b, at, field_of(t, WalTuple, T_INFOMASK2, "infomask2"))
    w16(b, at + 2, field_of(t, WalTuple, T_INFOMASK, "infomask"))
    w8(b, at + 4, field_of(t, WalTuple, T_HOFF, "t_hoff"))
    w32(b, at + 5, len(data))
    return w_bytes(b, at + TUP, data)


def _put_entry(b: Any, at: int, c: Change) -> int:
    """Write ``c``'s entry at ``at`` (:func:`entry_size` bytes); where it ends."""
    loc = field_of(c, Change, C_LOCATOR, "locator")
    old = field_of(c, Change, C_OLD, "old")
    new = field_of(c, Change, C_NEW, "new")
    flags = F_CLEAR_TOAST if field_of(c, Change, C_CLEAR_TOAST, "clear_toast") else 0
    if loc is not None:
        flags |= F_LOCATOR
    if old is not None:
        flags |= F_OLD
    if new is not None:
        flags |= F_NEW
    body = at + ENTRY
    action = field_of(c, Change, C_ACTION, "action")
    w8(b, body, action)
    w64(b, body + 1, field_of(c, Change, C_LSN, "lsn"))
    w32(b, body + 9, field_of(c, Change, C_SEQ, "seq"))
    w16(b, body + 13, field_of(c, Change, C_ORIGIN, "origin"))
    w8(b, body + 15, flags)
    p = body + HEAD
    if loc is not None:
        spc, db, rel = loc
        w32(b, p, spc)
        w32(b, p + 4, db)
        w32(b, p + 8, rel)
        p += LOC
    if old is not None:
        p = _put_tuple(b, p, old)
    if new is not None:
        p = _put_tuple(b, p, new)
    payload = field_of(c, Change, C_PAYLOAD, "payload")
    if action == TRUNCATE:
        w8(b, p, payload.cascade)
        w8(b, p + 1, payload.restart_seqs)
        w32(b, p + 2, len(payload.relids))
        p += TRUNC
        for relid in payload.relids:
            w32(b, p, relid)
            p += 4
    elif action == MESSAGE:
        prefix = payload.prefix.encode()
        w8(b, p, payload.transactional)
        w32(b, p + 1, len(prefix))
        w32(b, p + 5, len(payload.content))
        p = w_bytes(b, w_bytes(b, p + MSG, prefix), payload.content)
    elif action == TOAST_CHUNK:
        w32(b, p, payload.value_id)
        w32(b, p + 4, payload.seq)
        w32(b, p + 8, len(payload.data))
        p = w_bytes(b, p + CHUNK, payload.data)
    w32(b, at, p - body)
    w32(b, at + 4, crc_at(b, body, p - body))
    return p


def encode_change(c: Change) -> bytes:
    """``c``'s entry."""
    buf = new_buffer(entry_size(c))
    _put_entry(writable(buf), 0, c)
    return finish_buffer(buf)


def encode_runs(changes: Sequence[Change], segment_size: int) -> list[tuple[int, int, bytes]]:
    """``changes`` (in LSN order) as spill entries, one run per WAL segment their records lie
    in (each run goes to its segment's spill file): (segment number, changes, entries)."""
    out = []
    i = 0
    k = len(changes)
    while i < k:
        segno = field_of(changes[i], Change, C_LSN, "lsn") // segment_size
        j = i
        total = 0
        while j < k and field_of(changes[j], Change, C_LSN, "lsn") // segment_size == segno:
            total += entry_size(changes[j])
            j += 1
        buf = new_buffer(total)
        b = writable(buf)
        at = 0
        for n in range(i, j):
            at = _put_entry(b, at, changes[n])
        out.append((segno, j - i, finish_buffer(buf)))
        i = j
    return out


# -- reading ----------------------------------------------------------------------------------


def new_change(action: int, lsn: int, seq: int, loc: RelFileLocator | None, old: object,
               new: object, clear_toast: bool, origin: int, payload: object = None) -> Change:
    """``Change(...)``; compiled, its slots filled without running its ``__init__`` (a Python
    frame per change): how the spill reads changes back, and the decoder makes them
    (:mod:`cdclake.decoding.heapdecode`)."""
    if not cython.compiled:
        return Change(action, lsn, seq, loc, old, new, clear_toast,  # type: ignore[arg-type]
                      origin, payload)
    c = blank(Change)
    put(c, C_ACTION, action)
    put(c, C_LSN, lsn)
    put(c, C_SEQ, seq)
    put(c, C_LOCATOR, loc)
    put(c, C_OLD, old)
    put(c, C_NEW, new)
    put(c, C_CLEAR_TOAST, clear_toast)
    put(c, C_ORIGIN, origin)
    put(c, C_PAYLOAD, payload)
    return c


def _tuple_at(d: Any, at: int, end: int) -> WalTuple:
    n = u32(d, at + 5, end)
    if at + TUP + n > end:
        raise IndexError("a tuple past its entry")
    return new_tuple(u16(d, at, end), u16(d, at + 2, end), u8(d, at + 4, end),
                     span(d, at + TUP, at + TUP + n))


def _span(d: Any, at: int, n: int, end: int) -> bytes:
    if at + n > end:
        raise IndexError(f"needs {at + n} bytes, the entry ends at {end}")
    return span(d, at, at + n)


def decode_entries(data: bytes, offset: int, path: str) -> tuple[list[Change], int]:
    """The changes of the whole entries at the start of ``data`` (read from ``path`` at
    ``offset``), and the bytes they take; an entry whose CRC does not match, or whose body
    its layout does not fit, is a SpillError."""
    d = bytes_of(data)
    size = len(data)
    out = []
    pos = 0
    loc = None
    spc = db = rel = 0  # the last locator's, which consecutive changes of a table share
    while pos + ENTRY <= size:
        n = u32(d, pos, size)
        end = pos + ENTRY + n
        if end > size:
            break
        b = pos + ENTRY
        if crc_at(d, b, n) != u32(d, pos + 4, size):
            raise SpillError(f"spill file {path} is corrupt at offset {offset + pos}")
        try:
            action = u8(d, b, end)
            flags = u8(d, b + 15, end)
            at = b + HEAD
            if flags & F_LOCATOR:
                if (loc is None or u32(d, at, end) != spc or u32(d, at + 4, end) != db
                        or u32(d, at + 8, end) != rel):
                    spc, db, rel = u32(d, at, end), u32(d, at + 4, end), u32(d, at + 8, end)
                    loc = RelFileLocator(spc, db, rel)
                at += LOC
            old = new = None
            payload: object = None
            if flags & F_OLD:
                old = _tuple_at(d, at, end)
                at += TUP + u32(d, at + 5, end)
            if flags & F_NEW:
                new = _tuple_at(d, at, end)
                at += TUP + u32(d, at + 5, end)
            if action == TRUNCATE:
                cascade, restart, count = u8(d, at, end), u8(d, at + 1, end), u32(d, at + 2, end)
                at += TRUNC
                payload = Truncate(tuple([u32(d, at + 4 * i, end) for i in range(count)]),
                                   bool(cascade), bool(restart))
            elif action == MESSAGE:
                transactional, plen = u8(d, at, end), u32(d, at + 1, end)
                clen = u32(d, at + 5, end)
                prefix = _span(d, at + MSG, plen, end).decode()
                payload = Message(prefix, _span(d, at + MSG + plen, clen, end),
                                  bool(transactional))
            elif action == TOAST_CHUNK:
                value_id, cseq, clen = u32(d, at, end), u32(d, at + 4, end), u32(d, at + 8, end)
                payload = ToastChunk(value_id, cseq, _span(d, at + CHUNK, clen, end))
            out.append(new_change(action, u64(d, b + 1, end), u32(d, b + 9, end),
                               loc if flags & F_LOCATOR else None, old, new,
                               bool(flags & F_CLEAR_TOAST), u16(d, b + 13, end), payload))
        except (IndexError, UnicodeDecodeError):
            raise SpillError(f"spill file {path} is corrupt at offset {offset + pos}") from None
        pos = end
    return out, pos


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
            if len(rest) >= ENTRY:
                want = max(want, ENTRY + int.from_bytes(rest[:4], "little") - len(rest))
            block = f.read(want)
            if not block:
                if rest:
                    raise SpillError(f"spill file {path} is "
                                     f"{'truncated' if len(rest) < ENTRY else 'corrupt'} "
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


if not cython.compiled:  # every caller reads and writes spill files as C
    encode_runs = native.twin(encode_runs, "cdclake.decoding._spill")
    decode_entries = native.twin(decode_entries, "cdclake.decoding._spill")
    encode_change = native.twin(encode_change, "cdclake.decoding._spill")
