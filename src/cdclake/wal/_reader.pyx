# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twin of :func:`cdclake.wal.reader._decode_body` (see :mod:`cdclake.native`).

DecodeXLogRecord over a C view of the record: the same block references, the same checks and
the same errors as the pure-Python reference, which tests run beside it. Every read is
bounds-checked against the record's bytes by hand (the reference relies on ``struct`` and
``IndexError`` for that).
"""

from cdclake.errors import WalCorruptError
from cdclake.wal.record import BlockRef, RelFileLocator

cdef int PAGE_SIZE = 8192
cdef int RECORD_HEADER = 24
cdef int XLR_MAX_BLOCK_ID = 32
cdef int XLR_BLOCK_ID_DATA_SHORT = 255
cdef int XLR_BLOCK_ID_DATA_LONG = 254
cdef int XLR_BLOCK_ID_ORIGIN = 253
cdef int XLR_BLOCK_ID_TOPLEVEL_XID = 252
cdef int BKPBLOCK_HAS_IMAGE = 0x10
cdef int BKPBLOCK_HAS_DATA = 0x20
cdef int BKPBLOCK_SAME_REL = 0x80
cdef int BKPIMAGE_HAS_HOLE = 0x01
cdef int BKPIMAGE_COMPRESSED = 0x04 | 0x08 | 0x10


class _CutOff(Exception):
    pass


cdef inline void _need(Py_ssize_t p, Py_ssize_t k, Py_ssize_t n) except *:
    if p + k > n:
        raise _CutOff(f"needs {k} bytes at offset {p}, the record has {n}")


cdef inline unsigned int _u16(const unsigned char[::1] b, Py_ssize_t p, Py_ssize_t n) except? 0:
    _need(p, 2, n)
    return b[p] | (b[p + 1] << 8)


cdef inline unsigned int _u32(const unsigned char[::1] b, Py_ssize_t p, Py_ssize_t n) except? 0:
    _need(p, 4, n)
    return b[p] | (b[p + 1] << 8) | (b[p + 2] << 16) | (<unsigned int> b[p + 3] << 24)


def _decode_body(rec, data, where):
    """See :func:`cdclake.wal.reader._decode_body`."""
    cdef const unsigned char[::1] b = data
    cdef Py_ssize_t n = b.shape[0]
    cdef Py_ssize_t tot = rec.tot_len
    cdef Py_ssize_t p = RECORD_HEADER, datatotal = 0, main_len = 0, k
    cdef int block_id, last_id = -1, flags
    cdef unsigned int dlen, bimg_len, hole_off, hole_len, bimg_info
    cdef bint has_data
    blocks = rec.blocks
    last_loc = None
    lengths = []  # (block, data length, image length) until the payloads are sliced
    try:
        while tot - p > datatotal:
            _need(p, 1, n)
            block_id = b[p]
            p += 1
            if block_id == XLR_BLOCK_ID_DATA_SHORT:
                _need(p, 1, n)
                main_len = b[p]
                p += 1
                datatotal += main_len
                break
            if block_id == XLR_BLOCK_ID_DATA_LONG:
                main_len = _u32(b, p, n)
                p += 4
                datatotal += main_len
                break
            if block_id == XLR_BLOCK_ID_ORIGIN:
                rec.origin = _u16(b, p, n)
                p += 2
                continue
            if block_id == XLR_BLOCK_ID_TOPLEVEL_XID:
                rec.toplevel_xid = _u32(b, p, n)
                p += 4
                continue
            if block_id > XLR_MAX_BLOCK_ID or block_id <= last_id:
                raise WalCorruptError(f"invalid block id {block_id}", segment=where,
                                      lsn=rec.lsn)
            last_id = block_id
            _need(p, 3, n)
            flags = b[p]
            dlen = b[p + 1] | (b[p + 2] << 8)
            p += 3
            has_data = (flags & BKPBLOCK_HAS_DATA) != 0
            if has_data != (dlen > 0):
                raise WalCorruptError(f"block {block_id}: HAS_DATA does not match data length "
                                      f"{dlen}", segment=where, lsn=rec.lsn)
            datatotal += dlen
            blk = BlockRef(block_id, None, flags & 0x0F, 0, flags)
            image_len = None
            if flags & BKPBLOCK_HAS_IMAGE:
                _need(p, 5, n)
                bimg_len = b[p] | (b[p + 1] << 8)
                hole_off = b[p + 2] | (b[p + 3] << 8)
                bimg_info = b[p + 4]
                p += 5
                if bimg_info & BKPIMAGE_HAS_HOLE and bimg_info & BKPIMAGE_COMPRESSED:
                    hole_len = _u16(b, p, n)
                    p += 2
                elif bimg_info & BKPIMAGE_HAS_HOLE:
                    hole_len = PAGE_SIZE - bimg_len
                else:
                    hole_len = 0
                if ((bimg_info & BKPIMAGE_HAS_HOLE and (hole_off == 0 or hole_len == 0
                                                        or bimg_len == PAGE_SIZE))
                        or (not bimg_info & BKPIMAGE_HAS_HOLE and (hole_off or hole_len))
                        or (not bimg_info & BKPIMAGE_COMPRESSED and not bimg_info
                            & BKPIMAGE_HAS_HOLE and bimg_len != PAGE_SIZE)
                        or bimg_len > PAGE_SIZE):
                    raise WalCorruptError(f"block {block_id}: inconsistent image header "
                                          f"(len {bimg_len}, hole {hole_off}+{hole_len}, "
                                          f"info 0x{bimg_info:02X})", segment=where,
                                          lsn=rec.lsn)
                blk.bimg_info = bimg_info
                blk.hole_offset = hole_off
                blk.hole_length = hole_len
                image_len = bimg_len
                datatotal += bimg_len
            if flags & BKPBLOCK_SAME_REL:
                if last_loc is None:
                    raise WalCorruptError(f"block {block_id}: SAME_REL without a previous "
                                          "relation", segment=where, lsn=rec.lsn)
                blk.rlocator = last_loc
            else:
                last_loc = blk.rlocator = RelFileLocator(_u32(b, p, n), _u32(b, p + 4, n),
                                                         _u32(b, p + 8, n))
                p += 12
            blk.blkno = _u32(b, p, n)
            p += 4
            blocks.append(blk)
            lengths.append((blk, dlen, image_len))
    except _CutOff as exc:
        raise WalCorruptError(f"record body is cut off ({exc})", segment=where,
                              lsn=rec.lsn) from None
    if tot - p != datatotal:
        raise WalCorruptError(f"record length {tot} does not match its headers "
                              f"({p} + {datatotal})", segment=where, lsn=rec.lsn)
    for blk, dlen, image_len in lengths:
        if image_len is not None:
            k = image_len
            blk.image = data[p:p + k]
            p += k
        if dlen:
            blk.data = data[p:p + dlen]
            p += dlen
    rec.main_data = data[p:p + main_len]
