"""Varlena headers, inline compression and TOAST (varatt.h, detoast.c, toast_compression.c).

A varlena on disk starts with one of (little-endian):

* ``xxxxxxx1`` — 1-byte header, total length in the high 7 bits (no alignment padding);
* ``00000001`` — an external TOAST pointer: a vartag byte, then (VARTAG_ONDISK = 18) an
  unaligned ``varatt_external``: va_rawsize int32 (original size *with* header), va_extinfo
  uint32 (stored size in the low 30 bits, compression method in the top 2), va_valueid,
  va_toastrelid;
* ``xxxxxx00`` — 4-byte header, length = header >> 2;
* ``xxxxxx10`` — 4-byte header, compressed inline: then va_tcinfo (raw size in the low 30 bits,
  method in the top 2: 0 pglz, 1 lz4) and the compressed stream.

Out-of-line values live in the TOAST relation as rows (chunk_id, chunk_seq, chunk_data), of
TOAST_MAX_CHUNK_SIZE (1996 on 8 kB pages) bytes but the last; joined in chunk_seq order they
are the stored datum without its 4-byte header (so a compressed value starts with its
va_tcinfo). A chunk's length word starts with a zero byte when the chunk and its header
make a multiple of 64 bytes; a zero byte is padding only where alignment, counted from the
tuple's start (att_align_pointer), moves the offset, as :mod:`cdclake.tuples.heap` reads it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import lz4.block

from cdclake import pglz
from cdclake.errors import TupleDecodeError
from cdclake.tuples import heap
from cdclake.tuples.desc import Column
from cdclake.wal.record import WalTuple

VARTAG_INDIRECT = 1
VARTAG_EXPANDED_RO = 2
VARTAG_EXPANDED_RW = 3
VARTAG_ONDISK = 18

VARHDRSZ = 4
VARLENA_EXTSIZE_BITS = 30
VARLENA_EXTSIZE_MASK = (1 << VARLENA_EXTSIZE_BITS) - 1

TOAST_PGLZ_COMPRESSION_ID = 0
TOAST_LZ4_COMPRESSION_ID = 1
_METHODS = {TOAST_PGLZ_COMPRESSION_ID: "pglz", TOAST_LZ4_COMPRESSION_ID: "lz4"}

_VARATT_EXTERNAL = struct.Struct("<iIII")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")

#: a TOAST relation's columns (catalog/toasting.c, create_toast_table): chunk_id oid, chunk_seq
#: int4, chunk_data bytea, all int-aligned and of plain storage (a chunk never gets a 1-byte
#: header); chunk_data starts at offset 8 of a MAXALIGNed attribute area, never after padding
TOAST_COLUMNS = (
    Column(1, "chunk_id", "chunk_id", 26, -1, 4, "i", True, not_null=True),
    Column(2, "chunk_seq", "chunk_seq", 23, -1, 4, "i", True, not_null=True),
    Column(3, "chunk_data", "chunk_data", 17, -1, -1, "i", False, not_null=True),
)


@dataclass(frozen=True, slots=True)
class ToastPointer:
    """A ``varatt_external``: where an out-of-line value lives and how it is stored."""

    rawsize: int  #: va_rawsize: the original datum's size including its 4-byte header
    extsize: int  #: bytes stored in the TOAST relation (compressed size incl. va_tcinfo)
    compression: str | None  #: 'pglz', 'lz4', or None when stored uncompressed
    valueid: int  #: chunk_id of the value's rows in the TOAST relation
    toastrelid: int  #: oid of the TOAST relation

    @property
    def where(self) -> str:
        return f"TOAST value {self.valueid} in toast relation {self.toastrelid}"


def is_external(raw: bytes) -> bool:
    """True for an out-of-line TOAST pointer (``VARATT_IS_EXTERNAL``: first byte 0x01)."""
    return len(raw) > 0 and raw[0] == 0x01


def parse_toast_pointer(raw: bytes) -> ToastPointer:
    """Read an on-disk external pointer; other vartags cannot appear on disk and are errors."""
    if len(raw) < 2 or raw[0] != 0x01:
        raise TupleDecodeError(
            f"not an external TOAST pointer: datum starts with {bytes(raw[:2]).hex() or 'nothing'}")
    tag = raw[1]
    if tag != VARTAG_ONDISK:
        kind = {VARTAG_INDIRECT: "indirect", VARTAG_EXPANDED_RO: "expanded read-only",
                VARTAG_EXPANDED_RW: "expanded read-write"}.get(tag, "unknown")
        raise TupleDecodeError(
            f"TOAST pointer with vartag {tag} ({kind}) cannot appear on disk; only on-disk "
            f"pointers (vartag {VARTAG_ONDISK}) are decodable")
    if len(raw) != 2 + _VARATT_EXTERNAL.size:
        raise TupleDecodeError(
            f"on-disk TOAST pointer has {len(raw)} bytes, expected {2 + _VARATT_EXTERNAL.size}")
    rawsize, extinfo, valueid, toastrelid = _VARATT_EXTERNAL.unpack_from(raw, 2)
    extsize = extinfo & VARLENA_EXTSIZE_MASK
    compression = None
    if extsize < rawsize - VARHDRSZ:  # VARATT_EXTERNAL_IS_COMPRESSED
        method = extinfo >> VARLENA_EXTSIZE_BITS
        compression = _METHODS.get(method)
        if compression is None:
            raise TupleDecodeError(
                f"TOAST value {valueid} in toast relation {toastrelid} uses unknown "
                f"compression method {method}")
    if rawsize < VARHDRSZ:
        raise TupleDecodeError(
            f"TOAST value {valueid} in toast relation {toastrelid} has impossible raw size "
            f"{rawsize}")
    return ToastPointer(rawsize, extsize, compression, valueid, toastrelid)


def payload(raw: bytes, *, what: str = "varlena datum") -> bytes:
    """The value bytes of an inline varlena: header removed, inline compression undone.

    ``what`` names the datum in errors (e.g. the column). External pointers have no inline
    payload: fetch the chunks and call :func:`reassemble`.
    """
    b0 = raw[0]
    if b0 & 1:
        n = b0 >> 1
        if n == len(raw):
            return raw[1:]
        if b0 == 1:
            raise TupleDecodeError(
                f"{what} is an external TOAST pointer: its value is in the TOAST relation")
        raise TupleDecodeError(f"{what}: 1-byte varlena header says {n} bytes, have {len(raw)}")
    if len(raw) < 4:
        raise TupleDecodeError(f"{what}: 4-byte varlena header cut off ({len(raw)} bytes)")
    size = _U32.unpack_from(raw)[0] >> 2
    if size != len(raw):
        raise TupleDecodeError(f"{what}: varlena header says {size} bytes, have {len(raw)}")
    if not b0 & 2:
        return raw[4:]
    if size < 8:
        raise TupleDecodeError(f"{what}: compressed varlena of {size} bytes has no va_tcinfo")
    tcinfo = _U32.unpack_from(raw, 4)[0]
    return _decompress(memoryview(raw)[8:], tcinfo & VARLENA_EXTSIZE_MASK,
                       tcinfo >> VARLENA_EXTSIZE_BITS, what)


def _decompress(data: bytes | memoryview, rawsize: int, method: int, what: str) -> bytes:
    if method == TOAST_PGLZ_COMPRESSION_ID:
        try:
            return pglz.decompress(data, rawsize)
        except pglz.PglzError as exc:
            raise TupleDecodeError(f"{what}: {exc}") from exc
    if method == TOAST_LZ4_COMPRESSION_ID:
        try:
            out = lz4.block.decompress(data, uncompressed_size=rawsize)
        except lz4.block.LZ4BlockError as exc:
            raise TupleDecodeError(f"{what}: lz4 compressed data is corrupt ({exc})") from exc
        if len(out) != rawsize:
            raise TupleDecodeError(
                f"{what}: lz4 data decompressed to {len(out)} bytes, expected {rawsize}")
        return out
    raise TupleDecodeError(f"{what}: unknown compression method {method}")


def toast_chunk(tup: WalTuple) -> tuple[int, int, bytes]:
    """(chunk_id, chunk_seq, chunk bytes) of a TOAST relation row.

    Deformed as any heap tuple is (:func:`cdclake.tuples.heap.deform`, compiled or not), by
    :data:`TOAST_COLUMNS`: no dictionary entry is needed, and a chunk row is aligned as every
    other tuple (the zero first byte of the length word of a chunk of 60, 124, ... 1980 bytes
    is no padding, as a walk of its own once took it to be).
    """
    natts = tup.infomask2 & 0x07FF
    if natts != 3 or tup.infomask & 0x0001:
        raise TupleDecodeError(
            f"TOAST chunk row must have 3 non-null attributes (natts={natts}, "
            f"nulls={'yes' if tup.infomask & 1 else 'no'})")
    try:
        chunk_id, chunk_seq, chunk_data = cast(list[bytes], heap.deform(tup, TOAST_COLUMNS))
    except TupleDecodeError as exc:
        raise TupleDecodeError(f"TOAST chunk row: {exc}") from None
    value_id = _U32.unpack(chunk_id)[0]
    seq = _I32.unpack(chunk_seq)[0]
    return value_id, seq, payload(chunk_data, what=f"TOAST value {value_id} chunk {seq}")


def reassemble(pointer: ToastPointer, chunks: Sequence[bytes]) -> bytes:
    """Join a value's chunks (index = chunk_seq) into its payload, decompressing if needed."""
    data = b"".join(chunks)
    if len(data) != pointer.extsize:
        raise TupleDecodeError(
            f"{pointer.where}: {len(chunks)} chunks hold {len(data)} bytes, the pointer says "
            f"{pointer.extsize}; the WAL misses some of its chunks")
    if pointer.compression is None:
        if len(data) != pointer.rawsize - VARHDRSZ:
            raise TupleDecodeError(
                f"{pointer.where}: uncompressed value of {len(data)} bytes, the pointer says "
                f"{pointer.rawsize - VARHDRSZ}")
        return data
    if len(data) < 4:
        raise TupleDecodeError(f"{pointer.where}: compressed value lacks its va_tcinfo")
    tcinfo = _U32.unpack_from(data)[0]
    rawsize = tcinfo & VARLENA_EXTSIZE_MASK
    method = tcinfo >> VARLENA_EXTSIZE_BITS
    if rawsize != pointer.rawsize - VARHDRSZ or _METHODS.get(method) != pointer.compression:
        raise TupleDecodeError(
            f"{pointer.where}: compressed header (raw size {rawsize}, method {method}) does "
            f"not match the pointer (raw size {pointer.rawsize - VARHDRSZ}, "
            f"{pointer.compression})")
    return _decompress(memoryview(data)[4:], rawsize, method, pointer.where)
