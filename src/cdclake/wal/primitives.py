"""What the reader does to a record's bytes, below its logic: read a little-endian field
inside the record, compute the record's CRC-32C, build the record, block and tuple objects. (The
rmgrs' layouts the decoder reads, ``wal/rmgr/xact.py``, ``heap.py`` and ``heap2.py``, are
read with the same field reads.)

The reader (:mod:`cdclake.wal.reader`) is written once, in Python, and compiled as itself
(Cython's pure-Python mode, ``cdclake.native``); these primitives are where the two builds
differ. This module is the reference the Python build calls; the compiled build calls
``_primitives`` (its ``.pxd`` and ``.pyx``): the same functions over C pointers, the CRC step of
the ``crc32c`` package called directly, the objects' slots filled without running their
dataclass ``__init__``. Fields are read from ``src`` (a record's ``bytes`` or its segment's
memoryview, through :func:`bytes_of`) at absolute offsets, never past ``end`` (where the
record ends in ``src``): a read that would is an IndexError, which the reader reports as a
record cut off.
"""

from __future__ import annotations

import struct
from typing import Any

import crc32c

from cdclake.wal.record import BlockRef, RelFileLocator, WalTuple, XLogRecord

Bytes = bytes | memoryview

#: XLogRecord's header: tot_len, xid, prev, info, rmid, (2 pad), crc
_HEADER = struct.Struct("<IIQBBxxI")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_LOCATOR = struct.Struct("<III")


def bytes_of(src: Bytes) -> Bytes:
    """What the field reads below read ``src`` through: ``src`` itself (compiled: a C pointer
    to its bytes, taken once for all the reads of a record)."""
    return src


def readable(src: object) -> bool:
    """Whether :func:`bytes_of` can read ``src``: ``bytes``, or a C-contiguous memoryview of
    bytes (the reader's payloads always are; another view is copied first)."""
    return type(src) is bytes or (type(src) is memoryview and src.c_contiguous
                                  and src.itemsize == 1)


def contiguous(src: Bytes) -> Bytes:
    """``src`` as :func:`bytes_of` can read it: itself, or a copy of a view it cannot."""
    return src if readable(src) else bytes(src)


def need(at: int, end: int) -> None:
    """A layout that ends at ``at`` must be within the ``end`` bytes there are."""
    if at > end:
        raise IndexError(f"needs {at} bytes, has {end}")


def _short(k: int, at: int, end: int) -> IndexError:
    return IndexError(f"needs {k} bytes at offset {at}, the record ends at {end}")


def u8(b: Bytes, at: int, end: int) -> int:
    if at >= end:
        raise _short(1, at, end)
    return b[at]


def u16(b: Bytes, at: int, end: int) -> int:
    if at + 2 > end:
        raise _short(2, at, end)
    return _U16.unpack_from(b, at)[0]  # type: ignore[no-any-return]


def u32(b: Bytes, at: int, end: int) -> int:
    if at + 4 > end:
        raise _short(4, at, end)
    return _U32.unpack_from(b, at)[0]  # type: ignore[no-any-return]


def u64(b: Bytes, at: int, end: int) -> int:
    if at + 8 > end:
        raise _short(8, at, end)
    return _U64.unpack_from(b, at)[0]  # type: ignore[no-any-return]


def i64(b: Bytes, at: int, end: int) -> int:
    if at + 8 > end:
        raise _short(8, at, end)
    return _I64.unpack_from(b, at)[0]  # type: ignore[no-any-return]


def span(b: Bytes, at: int, end: int) -> bytes:
    """A copy of the bytes from ``at`` to ``end`` (the caller has checked they are there)."""
    return bytes(b[at:end])


def field_of(obj: object, cls: type, at: int, name: str) -> Any:
    """``obj.<name>`` (compiled: an instance of ``cls`` itself is read at its slot ``at``,
    ``wal/_slots.pxd``; the lookup through the type costs more than the read)."""
    return getattr(obj, name)


# -- writing: what the spill files' entries are written with (decoding/spill.py) ---------------


def new_buffer(n: int) -> bytearray:
    """A buffer of ``n`` bytes to write into (compiled: a ``bytes`` no one has seen yet)."""
    return bytearray(n)


def writable(buf: bytearray) -> bytearray:
    """What the writes below write ``buf`` through: ``buf`` itself (compiled: a pointer)."""
    return buf


def finish_buffer(buf: bytearray) -> bytes:
    """The bytes written."""
    return bytes(buf)


def w8(b: bytearray, at: int, v: int) -> None:
    b[at] = v


def w16(b: bytearray, at: int, v: int) -> None:
    _U16.pack_into(b, at, v)


def w32(b: bytearray, at: int, v: int) -> None:
    _U32.pack_into(b, at, v)


def w64(b: bytearray, at: int, v: int) -> None:
    _U64.pack_into(b, at, v)


def w_bytes(b: bytearray, at: int, src: Bytes) -> int:
    """``src`` written at ``at``; where it ends."""
    end = at + len(src)
    b[at:end] = src
    return end


def crc_at(b: Bytes | bytearray, at: int, n: int) -> int:
    """The CRC-32C of the ``n`` bytes at ``at``."""
    return crc32c.crc32c(memoryview(b)[at:at + n])


def record_header(src: Bytes, off: int) -> tuple[int, int, int, int, int, int]:
    """The 24-byte header of the record at ``off`` (the reader has checked they are there):
    tot_len, xid, prev, info, rmid, crc."""
    return _HEADER.unpack_from(src, off)  # type: ignore[return-value]


def record_crc(src: Bytes, off: int, tot_len: int) -> int:
    """The record's CRC-32C as PostgreSQL computes it: its bytes after the 24-byte header,
    then the header up to ``xl_crc``."""
    return crc32c.crc32c(src[off:off + 20], crc32c.crc32c(src[off + 24:off + tot_len]))


def locator(b: Bytes, at: int, end: int) -> RelFileLocator:
    """The RelFileLocator whose 12 bytes are at ``at``."""
    if at + 12 > end:
        raise _short(12, at, end)
    return RelFileLocator(*_LOCATOR.unpack_from(b, at))


def new_block(block_id: int, flags: int, rlocator: RelFileLocator, blkno: int,
              bimg_info: int, hole_offset: int, hole_length: int) -> BlockRef:
    """A block reference without its payloads yet (:func:`set_payloads`)."""
    return BlockRef(block_id, rlocator, flags & 0x0F, blkno, flags, None, None, bimg_info,
                    hole_offset, hole_length)


def set_payloads(blk: BlockRef, image: Bytes | None, data: Bytes | None) -> None:
    blk.image = image
    blk.data = data


def new_tuple(infomask2: int, infomask: int, t_hoff: int, data: bytes) -> WalTuple:
    return WalTuple(infomask2, infomask, t_hoff, data)


def new_record(lsn: int, end_lsn: int, prev: int, xid: int, rmid: int, info: int,
               tot_len: int, blocks: list[BlockRef], main_data: Bytes, origin: int,
               toplevel_xid: int, timeline: int, segment: str) -> XLogRecord:
    return XLogRecord(lsn, end_lsn, prev, xid, rmid, info, tot_len, blocks, main_data,
                      origin, toplevel_xid, timeline, segment)
