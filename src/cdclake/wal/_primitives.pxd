# cython: language_level=3
"""The compiled reader's primitives (see :mod:`cdclake.wal.primitives`, the reference they
equal): the field reads inline, over the C pointer to a record's bytes that ``bytes_of``
gives (of ``bytes``, or of its segment's memoryview, whose buffer is read without acquiring
it again), the rest in ``_primitives.pyx``; and the writes a spill file's entries are made
with (``decoding/spill.py``), into a ``bytes`` no one has seen yet. ``crc32c_of`` is the CRC
those entries are checked with."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy

from cdclake.wal._payload cimport Bytes, payload, readable


cdef inline const unsigned char *bytes_of(object src) noexcept:
    return payload(src).p


cdef inline object contiguous(object src):
    return src if readable(src) else bytes(src)


cdef inline int need(Py_ssize_t at, Py_ssize_t end) except -1:
    if at > end:
        raise IndexError(f"needs {at} bytes, has {end}")
    return 0


cdef inline long long u8(const unsigned char *b, Py_ssize_t at, Py_ssize_t end) except -1:
    if at >= end:
        raise IndexError(f"needs 1 bytes at offset {at}, the record ends at {end}")
    return b[at]


cdef inline long long u16(const unsigned char *b, Py_ssize_t at, Py_ssize_t end) except -1:
    if at + 2 > end:
        raise IndexError(f"needs 2 bytes at offset {at}, the record ends at {end}")
    return b[at] | (b[at + 1] << 8)


cdef inline long long u32(const unsigned char *b, Py_ssize_t at, Py_ssize_t end) except -1:
    if at + 4 > end:
        raise IndexError(f"needs 4 bytes at offset {at}, the record ends at {end}")
    return (b[at] | (b[at + 1] << 8) | (b[at + 2] << 16)
            | (<unsigned int> b[at + 3] << 24))


cdef inline unsigned long long u64(const unsigned char *b, Py_ssize_t at,
                                   Py_ssize_t end) except? 0:
    if at + 8 > end:
        raise IndexError(f"needs 8 bytes at offset {at}, the record ends at {end}")
    cdef unsigned long long v = 0
    cdef int i
    for i in range(7, -1, -1):
        v = (v << 8) | b[at + i]
    return v


cdef inline long long i64(const unsigned char *b, Py_ssize_t at, Py_ssize_t end) except? -1:
    if at + 8 > end:
        raise IndexError(f"needs 8 bytes at offset {at}, the record ends at {end}")
    return <long long> u64(b, at, end)


cdef inline bytes span(const unsigned char *b, Py_ssize_t at, Py_ssize_t end):
    return PyBytes_FromStringAndSize(<const char *> b + at, end - at)


cdef (Py_ssize_t, unsigned int, unsigned long long, unsigned int, unsigned int,
      unsigned int) record_header(object src, Py_ssize_t off) noexcept
cdef unsigned int record_crc(object src, Py_ssize_t off, Py_ssize_t tot_len) except? 0
cdef unsigned int crc32c_of(const unsigned char *d, Py_ssize_t n) except? 0
cdef object locator(const unsigned char *b, Py_ssize_t at, Py_ssize_t end)
cdef object new_block(int block_id, int flags, object rlocator, unsigned int blkno,
                      int bimg_info, int hole_offset, int hole_length)
cdef int set_payloads(object blk, object image, object data) except -1
cdef inline bytes new_buffer(Py_ssize_t n):
    return PyBytes_FromStringAndSize(NULL, n)


cdef inline unsigned char *writable(bytes buf) noexcept:
    return <unsigned char *> PyBytes_AS_STRING(buf)


cdef inline bytes finish_buffer(bytes buf):
    return buf


cdef inline void w8(unsigned char *b, Py_ssize_t at, unsigned long long v) noexcept:
    b[at] = <unsigned char> v


cdef inline void w16(unsigned char *b, Py_ssize_t at, unsigned long long v) noexcept:
    b[at] = <unsigned char> v
    b[at + 1] = <unsigned char> (v >> 8)


cdef inline void w32(unsigned char *b, Py_ssize_t at, unsigned long long v) noexcept:
    cdef int i
    for i in range(4):
        b[at + i] = <unsigned char> (v >> (8 * i))


cdef inline void w64(unsigned char *b, Py_ssize_t at, unsigned long long v) noexcept:
    cdef int i
    for i in range(8):
        b[at + i] = <unsigned char> (v >> (8 * i))


cdef inline Py_ssize_t w_bytes(unsigned char *b, Py_ssize_t at, object src) except -1:
    cdef Bytes s = payload(src)
    memcpy(b + at, s.p, s.n)
    return at + s.n


cdef inline unsigned int crc_at(const unsigned char *b, Py_ssize_t at, Py_ssize_t n) except? 0:
    return crc32c_of(b + at, n)


cdef object new_tuple(unsigned int infomask2, unsigned int infomask, unsigned int t_hoff,
                      bytes data)
cdef object new_record(unsigned long long lsn, unsigned long long end_lsn,
                       unsigned long long prev, unsigned int xid, unsigned int rmid,
                       unsigned int info, Py_ssize_t tot_len, list blocks, object main_data,
                       unsigned int origin, unsigned int toplevel_xid, object timeline,
                       object segment)
