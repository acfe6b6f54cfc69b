# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled reader's primitives: see :mod:`cdclake.wal.primitives`, the reference they
equal, and ``_primitives.pxd``.

The CRC is computed by the function the ``crc32c`` package chose for this machine (hardware or
its software tables), called through a C pointer (:func:`_crc_function`). Records, block
references and tuples are built without running their dataclass ``__init__`` (a Python frame per
object): every field is stored here, straight into its slot (:mod:`cdclake.wal._slots`).
"""

import os
import sys

import crc32c
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.module cimport PyModule_GetState

from cdclake.wal._payload cimport payload
from cdclake.wal._slots cimport blank, offset, put

from cdclake.wal.record import BlockRef, RelFileLocator, WalTuple, XLogRecord

cdef Py_ssize_t R_LSN = offset(XLogRecord, "lsn")
cdef Py_ssize_t R_END_LSN = offset(XLogRecord, "end_lsn")
cdef Py_ssize_t R_PREV = offset(XLogRecord, "prev")
cdef Py_ssize_t R_XID = offset(XLogRecord, "xid")
cdef Py_ssize_t R_RMID = offset(XLogRecord, "rmid")
cdef Py_ssize_t R_INFO = offset(XLogRecord, "info")
cdef Py_ssize_t R_TOT_LEN = offset(XLogRecord, "tot_len")
cdef Py_ssize_t R_BLOCKS = offset(XLogRecord, "blocks")
cdef Py_ssize_t R_MAIN_DATA = offset(XLogRecord, "main_data")
cdef Py_ssize_t R_ORIGIN = offset(XLogRecord, "origin")
cdef Py_ssize_t R_TOPLEVEL_XID = offset(XLogRecord, "toplevel_xid")
cdef Py_ssize_t R_TIMELINE = offset(XLogRecord, "timeline")
cdef Py_ssize_t R_SEGMENT = offset(XLogRecord, "segment")
cdef Py_ssize_t B_ID = offset(BlockRef, "id")
cdef Py_ssize_t B_RLOCATOR = offset(BlockRef, "rlocator")
cdef Py_ssize_t B_FORK = offset(BlockRef, "fork")
cdef Py_ssize_t B_BLKNO = offset(BlockRef, "blkno")
cdef Py_ssize_t B_FLAGS = offset(BlockRef, "flags")
cdef Py_ssize_t B_DATA = offset(BlockRef, "data")
cdef Py_ssize_t B_IMAGE = offset(BlockRef, "image")
cdef Py_ssize_t B_BIMG_INFO = offset(BlockRef, "bimg_info")
cdef Py_ssize_t B_HOLE_OFFSET = offset(BlockRef, "hole_offset")
cdef Py_ssize_t B_HOLE_LENGTH = offset(BlockRef, "hole_length")

#: the crc32c package's function, looked up once rather than twice per record
cdef object _crc = crc32c.crc32c

#: ``uint32_t fn(uint32_t crc, const unsigned char *data, unsigned long length)``: the CRC
#: step the crc32c package's ``crc32c()`` runs between inverting its value and its result
ctypedef unsigned int (*crc_step)(unsigned int, const unsigned char *, unsigned long) nogil
cdef crc_step _step = NULL


cdef crc_step _crc_function():
    """The crc32c package's own CRC step, as its module keeps it: the first field of the
    ``crc32c._crc32c`` module's state (``CRC32CState.crc_fn``: hardware where the CPU has it,
    else its tables). Called through the pointer, a record's CRC costs the CRC; through
    ``crc32c.crc32c`` it costs two calls with their argument parsing, buffer requests and
    slices (some 2,000 instructions a record, more than the CRC of a small record). Only if
    the step agrees with ``crc32c.crc32c`` on every length up to 300 bytes; otherwise (a
    crc32c build keeping a different state) NULL, and the records are checked through
    ``crc32c.crc32c``."""
    module = sys.modules.get("crc32c._crc32c")
    if module is None:
        return NULL
    cdef void *state = PyModule_GetState(module)
    if state == NULL:
        return NULL
    cdef crc_step step = (<crc_step *> state)[0]
    if step == NULL:
        return NULL
    sample = os.urandom(300)
    cdef const unsigned char *p = sample
    cdef Py_ssize_t k
    for k in range(len(sample) + 1):
        if (step(0xFFFFFFFF, p, k) ^ 0xFFFFFFFF) != _crc(sample[:k]):
            return NULL
    return step


_step = _crc_function()


def fast_crc() -> bool:
    """Whether records are checked through the crc32c package's step directly."""
    return _step != NULL


cdef (Py_ssize_t, unsigned int, unsigned long long, unsigned int, unsigned int,
      unsigned int) record_header(object src, Py_ssize_t off) noexcept:
    cdef const unsigned char *d = payload(src).p + off
    cdef unsigned int lo = d[8] | (d[9] << 8) | (d[10] << 16) | (<unsigned int> d[11] << 24)
    cdef unsigned int hi = d[12] | (d[13] << 8) | (d[14] << 16) | (<unsigned int> d[15] << 24)
    return (d[0] | (d[1] << 8) | (d[2] << 16) | (<unsigned int> d[3] << 24),
            d[4] | (d[5] << 8) | (d[6] << 16) | (<unsigned int> d[7] << 24),
            lo | (<unsigned long long> hi << 32), d[16], d[17],
            d[20] | (d[21] << 8) | (d[22] << 16) | (<unsigned int> d[23] << 24))


cdef unsigned int record_crc(object src, Py_ssize_t off, Py_ssize_t tot_len) except? 0:
    cdef const unsigned char *d
    cdef unsigned int crc
    if _step != NULL:
        d = payload(src).p + off
        crc = _step(0xFFFFFFFF, d + 24, tot_len - 24)
        return _step(crc, d, 20) ^ 0xFFFFFFFF
    return _crc(src[off:off + 20], _crc(src[off + 24:off + tot_len]))


cdef unsigned int crc32c_of(const unsigned char *d, Py_ssize_t n) except? 0:
    """The CRC-32C of ``n`` bytes at ``d``, as ``crc32c.crc32c`` gives it."""
    if _step != NULL:
        return _step(0xFFFFFFFF, d, n) ^ 0xFFFFFFFF
    return _crc(PyBytes_FromStringAndSize(<const char *> d, n))


#: RelFileLocators by their 12 bytes: a WAL names few relations, each in many records
cdef dict _locators = {}


cdef object locator(const unsigned char *b, Py_ssize_t at, Py_ssize_t end):
    if at + 12 > end:
        raise IndexError(f"needs 12 bytes at offset {at}, the record ends at {end}")
    b += at
    key = PyBytes_FromStringAndSize(<const char *> b, 12)
    loc = _locators.get(key)
    if loc is None:
        if len(_locators) > 65536:
            _locators.clear()
        loc = _locators[key] = RelFileLocator(
            b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24),
            b[4] | (b[5] << 8) | (b[6] << 16) | (<unsigned int> b[7] << 24),
            b[8] | (b[9] << 8) | (b[10] << 16) | (<unsigned int> b[11] << 24))
    return loc


cdef Py_ssize_t T_INFOMASK2 = offset(WalTuple, "infomask2")
cdef Py_ssize_t T_INFOMASK = offset(WalTuple, "infomask")
cdef Py_ssize_t T_HOFF = offset(WalTuple, "t_hoff")
cdef Py_ssize_t T_DATA = offset(WalTuple, "data")


cdef object new_tuple(unsigned int infomask2, unsigned int infomask, unsigned int t_hoff,
                      bytes data):
    t = blank(WalTuple)
    put(t, T_INFOMASK2, infomask2)
    put(t, T_INFOMASK, infomask)
    put(t, T_HOFF, t_hoff)
    put(t, T_DATA, data)
    return t


cdef object new_block(int block_id, int flags, object rlocator, unsigned int blkno,
                      int bimg_info, int hole_offset, int hole_length):
    blk = blank(BlockRef)
    put(blk, B_ID, block_id)
    put(blk, B_RLOCATOR, rlocator)
    put(blk, B_FORK, flags & 0x0F)
    put(blk, B_BLKNO, blkno)
    put(blk, B_FLAGS, flags)
    put(blk, B_DATA, None)
    put(blk, B_IMAGE, None)
    put(blk, B_BIMG_INFO, bimg_info)
    put(blk, B_HOLE_OFFSET, hole_offset)
    put(blk, B_HOLE_LENGTH, hole_length)
    return blk


cdef int set_payloads(object blk, object image, object data) except -1:
    put(blk, B_IMAGE, image)
    put(blk, B_DATA, data)
    return 0


cdef object new_record(unsigned long long lsn, unsigned long long end_lsn,
                       unsigned long long prev, unsigned int xid, unsigned int rmid,
                       unsigned int info, Py_ssize_t tot_len, list blocks, object main_data,
                       unsigned int origin, unsigned int toplevel_xid, object timeline,
                       object segment):
    rec = blank(XLogRecord)
    put(rec, R_LSN, lsn)
    put(rec, R_END_LSN, end_lsn)
    put(rec, R_PREV, prev)
    put(rec, R_XID, xid)
    put(rec, R_RMID, rmid)
    put(rec, R_INFO, info)
    put(rec, R_TOT_LEN, tot_len)
    put(rec, R_BLOCKS, blocks)
    put(rec, R_MAIN_DATA, main_data)
    put(rec, R_ORIGIN, origin)
    put(rec, R_TOPLEVEL_XID, toplevel_xid)
    put(rec, R_TIMELINE, timeline)
    put(rec, R_SEGMENT, segment)
    return rec
