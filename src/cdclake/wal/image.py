"""Full-page images: restore the 8 KiB page a record carries, and read a tuple out of it.

A catalog insert is not logically logged, so when its record carries a full-page image the
tuple is only in that image (docs/architecture.md). Images are stored without their "hole"
(the free space between line pointers and tuples) and possibly compressed with pglz, lz4 or
zstd (``wal_compression``).
"""

from __future__ import annotations

import struct

from cdclake import pglz
from cdclake.errors import WalCorruptError
from cdclake.wal.record import (
    BKPIMAGE_COMPRESS_LZ4,
    BKPIMAGE_COMPRESS_PGLZ,
    BKPIMAGE_COMPRESS_ZSTD,
    SIZEOF_HEAP_TUPLE_HEADER,
    BlockRef,
    WalTuple,
)

PAGE_SIZE = 8192
PAGE_HEADER = 24
LP_NORMAL = 1
_ITEMID = struct.Struct("<I")
_TUPHDR = struct.Struct("<HHB")  # t_infomask2 @18, t_infomask @20, t_hoff @22


def restore_page(block: BlockRef) -> bytes:
    """The page as it was when the image was taken (RestoreBlockImage)."""
    if block.image is None:
        raise WalCorruptError(f"block {block.id} of {block.rlocator} carries no image")
    img = bytes(block.image)
    info = block.bimg_info
    want = PAGE_SIZE - block.hole_length
    try:
        if info & BKPIMAGE_COMPRESS_PGLZ:
            img = pglz.decompress(img, want)
        elif info & BKPIMAGE_COMPRESS_LZ4:
            import lz4.block

            img = lz4.block.decompress(img, uncompressed_size=want)
        elif info & BKPIMAGE_COMPRESS_ZSTD:
            import zstandard

            img = zstandard.ZstdDecompressor().decompress(img, max_output_size=want)
    except Exception as exc:  # each library raises its own error type
        raise WalCorruptError(f"cannot decompress the image of block {block.id} "
                              f"({block.rlocator} blk {block.blkno}): {exc}") from None
    if len(img) != want:
        raise WalCorruptError(f"image of block {block.id} ({block.rlocator} blk {block.blkno}) "
                              f"restores to {len(img)} bytes, expected {want}")
    if block.hole_length:
        img = img[:block.hole_offset] + bytes(block.hole_length) + img[block.hole_offset:]
    return img


def page_tuple(page: bytes, offnum: int) -> WalTuple:
    """The heap tuple at line pointer ``offnum`` (1-based) of ``page``, in WalTuple form."""
    pos = PAGE_HEADER + (offnum - 1) * 4
    if offnum < 1 or pos + 4 > PAGE_SIZE:
        raise WalCorruptError(f"line pointer {offnum} is outside the page")
    item = _ITEMID.unpack_from(page, pos)[0]
    lp_off = item & 0x7FFF
    lp_flags = (item >> 15) & 0x3
    lp_len = item >> 17
    if lp_flags != LP_NORMAL or lp_len < SIZEOF_HEAP_TUPLE_HEADER or lp_off + lp_len > PAGE_SIZE:
        raise WalCorruptError(f"line pointer {offnum} does not point to a tuple "
                              f"(off {lp_off}, flags {lp_flags}, len {lp_len})")
    tup = page[lp_off:lp_off + lp_len]
    im2, im, hoff = _TUPHDR.unpack_from(tup, 18)
    return WalTuple(im2, im, hoff, bytes(tup[SIZEOF_HEAP_TUPLE_HEADER:]))
