# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled twins of ``XLogReader.__iter__``, ``XLogReader._read_record`` and ``_decode_body``
of :mod:`cdclake.wal.reader` (see :mod:`cdclake.native`).

A record's header, checks and CRC, then DecodeXLogRecord, over a C pointer into the segment's
bytes (the memoryview the reader holds, whose buffer is read without acquiring it again): the
same records, checks and errors as the pure-Python reference, which tests run beside it. Every
read is bounds-checked by hand (the reference relies on ``struct`` and ``IndexError`` for
that). A record continued on later pages is assembled by the reader's own ``_assemble``.
The CRC is computed by the function the ``crc32c`` package chose for this machine (hardware
or its software tables), called through a C pointer (``_crc_function``).
Records and block references are built without running their dataclass ``__init__`` (a
Python frame per object): every field is stored here, straight into its slot
(:mod:`cdclake.wal._slots`).
"""

import os
import sys

import crc32c
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.module cimport PyModule_GetState

from cdclake.wal._payload cimport Bytes, payload
from cdclake.wal._slots cimport blank, get, offset, put

from cdclake.errors import WalCorruptError
from cdclake.lsn import format_lsn
from cdclake.wal.record import (
    INVALID_REP_ORIGIN,
    INVALID_XID,
    BlockRef,
    RelFileLocator,
    XLogRecord,
)

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
cdef int RM_MAX_BUILTIN = 21
cdef int RM_MIN_CUSTOM = 128
cdef unsigned int XLP_FIRST_IS_CONTRECORD = 0x0001
cdef unsigned int XLP_FIRST_IS_OVERWRITE_CONTRECORD = 0x0008
cdef unsigned int XLOG_SWITCH = 0x40

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


cdef inline unsigned int _record_crc(const unsigned char *d, Py_ssize_t n, src, Py_ssize_t off,
                                     Py_ssize_t tot_len) except? 0:
    """A record's CRC-32C as PostgreSQL computes it: its data after the 24-byte header, then
    the header up to ``xl_crc``. ``n``: the bytes of the record at ``d`` there are."""
    cdef unsigned int crc
    if _step != NULL:
        crc = _step(0xFFFFFFFF, d + RECORD_HEADER, n - RECORD_HEADER)
        return _step(crc, d, 20) ^ 0xFFFFFFFF
    return _crc(src[off:off + 20], _crc(src[off + RECORD_HEADER:off + tot_len]))


cdef unsigned int crc32c_of(const unsigned char *d, Py_ssize_t n) except? 0:
    """The CRC-32C of ``n`` bytes at ``d``, as ``crc32c.crc32c`` gives it (through its step
    where :func:`fast_crc`); the spill files' entries are checked with it too."""
    if _step != NULL:
        return _step(0xFFFFFFFF, d, n) ^ 0xFFFFFFFF
    return _crc(PyBytes_FromStringAndSize(<const char *> d, n))


#: the reader module (imported when it imports this one): its _EndOfWal
cdef object _reader = None


cdef _end_of_wal(str reason):
    global _reader
    if _reader is None:
        _reader = sys.modules["cdclake.wal.reader"]
    return _reader._EndOfWal(reason)


class _CutOff(Exception):
    pass


cdef inline void _need(Py_ssize_t p, Py_ssize_t k, Py_ssize_t n) except *:
    if p + k > n:
        raise _CutOff(f"needs {k} bytes at offset {p}, the record has {n}")


cdef inline unsigned int _u16(const unsigned char *b, Py_ssize_t p, Py_ssize_t n) except? 0:
    _need(p, 2, n)
    return b[p] | (b[p + 1] << 8)


cdef inline unsigned int _u32(const unsigned char *b, Py_ssize_t p, Py_ssize_t n) except? 0:
    _need(p, 4, n)
    return b[p] | (b[p + 1] << 8) | (b[p + 2] << 16) | (<unsigned int> b[p + 3] << 24)


#: RelFileLocators by their 12 bytes: a WAL names few relations, each in many records
cdef dict _locators = {}


def _decode_body(rec, data, where):
    """See :func:`cdclake.wal.reader._decode_body`."""
    if type(data) is not bytes and type(data) is not memoryview:
        data = bytes(data)
    cdef Bytes b = payload(data)
    _decode(rec, b.p, b.n, data, 0, where)


cdef _block(int block_id, int flags):
    """A BlockRef with its defaults (the rest is set by the caller)."""
    blk = blank(BlockRef)
    put(blk, B_ID, block_id)
    put(blk, B_FORK, flags & 0x0F)
    put(blk, B_FLAGS, flags)
    put(blk, B_DATA, None)
    put(blk, B_IMAGE, None)
    put(blk, B_BIMG_INFO, 0)
    put(blk, B_HOLE_OFFSET, 0)
    put(blk, B_HOLE_LENGTH, 0)
    return blk


cdef _decode(rec, const unsigned char *b, Py_ssize_t n, src, Py_ssize_t base, where):
    """``_decode_body`` over the record's ``n`` bytes at ``b``: those of ``src`` from ``base``,
    which its payloads are sliced from (views of a segment, or bytes of an assembled record,
    as in the reference)."""
    cdef Py_ssize_t tot = rec.tot_len
    cdef Py_ssize_t p = RECORD_HEADER, datatotal = 0, main_len = 0, k
    cdef int block_id, last_id = -1, flags, nblocks = 0, i
    cdef unsigned int dlen, bimg_len, hole_off, hole_len, bimg_info
    cdef bint has_data
    # per block, until the payloads are sliced: data length, image length (-1: none)
    cdef Py_ssize_t dlens[33]
    cdef Py_ssize_t ilens[33]
    blocks = rec.blocks
    last_loc = None
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
                put(rec, R_ORIGIN, _u16(b, p, n))
                p += 2
                continue
            if block_id == XLR_BLOCK_ID_TOPLEVEL_XID:
                put(rec, R_TOPLEVEL_XID, _u32(b, p, n))
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
            blk = _block(block_id, flags)
            ilens[nblocks] = -1
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
                put(blk, B_BIMG_INFO, bimg_info)
                put(blk, B_HOLE_OFFSET, hole_off)
                put(blk, B_HOLE_LENGTH, hole_len)
                ilens[nblocks] = bimg_len
                datatotal += bimg_len
            if flags & BKPBLOCK_SAME_REL:
                if last_loc is None:
                    raise WalCorruptError(f"block {block_id}: SAME_REL without a previous "
                                          "relation", segment=where, lsn=rec.lsn)
                put(blk, B_RLOCATOR, last_loc)
            else:
                _need(p, 12, n)
                key = PyBytes_FromStringAndSize(<const char *> &b[p], 12)
                last_loc = _locators.get(key)
                if last_loc is None:
                    if len(_locators) > 65536:
                        _locators.clear()
                    last_loc = _locators[key] = RelFileLocator(
                        _u32(b, p, n), _u32(b, p + 4, n), _u32(b, p + 8, n))
                put(blk, B_RLOCATOR, last_loc)
                p += 12
            put(blk, B_BLKNO, _u32(b, p, n))
            p += 4
            blocks.append(blk)
            dlens[nblocks] = dlen
            nblocks += 1
    except _CutOff as exc:
        raise WalCorruptError(f"record body is cut off ({exc})", segment=where,
                              lsn=rec.lsn) from None
    if tot - p != datatotal:
        raise WalCorruptError(f"record length {tot} does not match its headers "
                              f"({p} + {datatotal})", segment=where, lsn=rec.lsn)
    p += base  # from here on, offsets into src
    for i in range(nblocks):
        blk = blocks[i]
        k = ilens[i]
        if k >= 0:
            put(blk, B_IMAGE, src[p:p + k])
            p += k
        k = dlens[i]
        if k:
            put(blk, B_DATA, src[p:p + k])
            p += k
    put(rec, R_MAIN_DATA, src[p:p + main_len])


cdef class Sieve:
    """Which records :func:`sift` builds: ``raw`` sees each record's header fields and its
    bytes (checked: header, prev-link, CRC; ``n`` of them at ``d``, the whole record) and
    says whether to build it (1) or read past it (0). This one builds every record."""

    cdef int raw(self, unsigned long long lsn, unsigned long long prev, unsigned int xid,
                 unsigned int rmid, unsigned int info, Py_ssize_t tot_len,
                 const unsigned char *d, Py_ssize_t n) except -1:
        return 1


cdef inline unsigned int _le16(const unsigned char *b) nogil:
    return b[0] | (b[1] << 8)


cdef inline unsigned int _le32(const unsigned char *b) nogil:
    return b[0] | (b[1] << 8) | (b[2] << 16) | (<unsigned int> b[3] << 24)


cdef int shape(const unsigned char *d, Py_ssize_t n, Py_ssize_t tot_len, Shape *s) nogil:
    """DecodeXLogRecord's walk over the ``n`` bytes at ``d`` of a record of ``tot_len`` bytes
    (checked by the reader) reading only what a sieve needs: 0, or -1 when its headers do
    not parse (a sieve then has the record built, and the reader says what is wrong)."""
    cdef Py_ssize_t p = RECORD_HEADER, datatotal = 0
    cdef int block_id, flags
    cdef unsigned int bimg_info
    s.toplevel = 0
    s.nblocks = 0
    s.main_len = 0
    while tot_len - p > datatotal:
        if p >= n:
            return -1
        block_id = d[p]
        p += 1
        if block_id == XLR_BLOCK_ID_DATA_SHORT:
            if p + 1 > n:
                return -1
            s.main_len = d[p]
            p += 1
            datatotal += s.main_len
            break
        if block_id == XLR_BLOCK_ID_DATA_LONG:
            if p + 4 > n:
                return -1
            s.main_len = _le32(d + p)
            p += 4
            datatotal += s.main_len
            break
        if block_id == XLR_BLOCK_ID_ORIGIN:
            p += 2
            continue
        if block_id == XLR_BLOCK_ID_TOPLEVEL_XID:
            if p + 4 > n:
                return -1
            s.toplevel = _le32(d + p)
            p += 4
            continue
        if block_id > XLR_MAX_BLOCK_ID:
            return -1
        if p + 3 > n:
            return -1
        flags = d[p]
        datatotal += _le16(d + p + 1)
        p += 3
        if flags & BKPBLOCK_HAS_IMAGE:
            if p + 5 > n:
                return -1
            datatotal += _le16(d + p)
            bimg_info = d[p + 4]
            p += 5
            if bimg_info & BKPIMAGE_HAS_HOLE and bimg_info & BKPIMAGE_COMPRESSED:
                p += 2
        if not flags & BKPBLOCK_SAME_REL:
            if p + 12 > n:
                return -1
            if s.nblocks == 0:
                s.first_db = _le32(d + p + 4)
                s.first_rel = _le32(d + p + 8)
            p += 12
        elif s.nblocks == 0:
            return -1
        p += 4
        s.nblocks += 1
    if tot_len - p != datatotal or tot_len > n:
        return -1
    return 0


#: what _read returns for a record it read past (a sieve did not want it)
cdef object _PASSED = object()


def __iter__(self):
    """See ``XLogReader.__iter__``: the same loop, with the records read by ``_read``."""
    return _walk(self, None)


def sift(self, Sieve sieve):
    """The records of reader ``self`` from its start LSN on that ``sieve`` asks for, read as
    ``__iter__`` reads them (the same checks, ends and errors): the others are checked and
    read past without a Python object built for them or their blocks — a pass that wants a
    few records of a segment (the Spark job's scan) costs the walk, not the records."""
    return _walk(self, sieve)


def _walk(self, Sieve sieve):
    end_of_wal = sys.modules["cdclake.wal.reader"]._EndOfWal
    cdef unsigned long long pos = self._plan()
    cdef Py_ssize_t size = self.segment_size
    cdef unsigned long long prev_lsn = 0
    cdef bint has_start = self.start_lsn is not None
    cdef bint has_end = self.end_lsn is not None
    cdef unsigned long long start = self.start_lsn if has_start else 0
    cdef unsigned long long end = self.end_lsn if has_end else 0
    cdef unsigned long long passed_to = 0
    cdef unsigned int info
    cdef bint visible
    try:
        pos = self._first_record(pos)
        while True:
            if pos % PAGE_SIZE == 0:
                header, info, _ = self._page(pos)
                if info & XLP_FIRST_IS_CONTRECORD and not (
                        info & XLP_FIRST_IS_OVERWRITE_CONTRECORD):
                    raise WalCorruptError("page starts with the continuation of a record "
                                          "that did not begin on the previous page",
                                          segment=self._where(pos), lsn=pos)
                pos += header
            if has_end and pos >= end:
                self.end_reason = "end LSN reached"
                break
            visible = not has_start or pos >= start
            rec = _read(self, pos, prev_lsn, sieve, visible, &passed_to)
            if rec is _PASSED:
                prev_lsn = pos
                pos = passed_to
                continue
            if rec is None:  # an overwritten contrecord: restart at the next page
                pos = (pos // PAGE_SIZE + 1) * PAGE_SIZE
                while True:
                    header, info, _ = self._page(pos)
                    if info & XLP_FIRST_IS_OVERWRITE_CONTRECORD:
                        pos += header
                        break
                    pos += PAGE_SIZE
                prev_lsn = 0
                continue
            prev_lsn = get(rec, R_LSN)  # the record _read built: its slots are set
            if get(rec, R_RMID) == 0 and get(rec, R_INFO) & 0xF0 == XLOG_SWITCH:
                # The rest of the segment is padding.
                put(rec, R_END_LSN, (prev_lsn // size + 1) * size)
            if visible:
                yield rec
            pos = get(rec, R_END_LSN)
    except end_of_wal as stop:
        self.end_reason = str(stop.args[0])
        self._check_really_end(pos if stop.lsn is None else stop.lsn, pos)
    self.end_of_wal = pos


def _read_record(self, pos, prev_lsn):
    """See ``XLogReader._read_record``."""
    return _read(self, pos, prev_lsn, None, True, NULL)


cdef _read(self, unsigned long long pos, unsigned long long prev_lsn, Sieve sieve,
           bint visible, unsigned long long *passed_to):
    """The record at ``pos`` (None: an overwritten contrecord ends it); with a ``sieve``,
    :data:`_PASSED` for one it does not want or that is not ``visible`` (before the start
    LSN), and where the next record starts in ``passed_to``."""
    cdef Py_ssize_t size = self.segment_size
    cdef Py_ssize_t cpos = pos
    cached = self._seg_cache  # the reader's own cache, read here without a Python call
    if cached is None or cached[0] != cpos // size:
        self._segment(cpos // size)
        cached = self._seg_cache
    view = cached[1]
    where = cached[2]
    tli = cached[3]  # the timeline of the record's segment, where it starts
    cdef Bytes b = payload(view)
    cdef const unsigned char *v = b.p
    cdef Py_ssize_t n = b.n
    cdef Py_ssize_t off = cpos % size
    cdef Py_ssize_t page_left = PAGE_SIZE - off % PAGE_SIZE
    cdef Py_ssize_t tot_len, end_pos
    if off + 4 > n:
        raise _end_of_wal(f"end of segment file {where}")
    tot_len = _u32(v, off, n)
    if tot_len == 0:
        raise _end_of_wal(f"zero record length at {format_lsn(pos)}")
    if tot_len < RECORD_HEADER:
        raise WalCorruptError(f"invalid record length {tot_len} (at least "
                              f"{RECORD_HEADER} expected)", segment=where, lsn=pos)
    if tot_len > 1 << 30:
        raise WalCorruptError(f"record length {tot_len} is impossibly large",
                              segment=where, lsn=pos)
    if tot_len <= page_left:
        if off + tot_len > n:
            raise _end_of_wal(f"record at {format_lsn(pos)} is cut off by the end of the file")
        end_pos = cpos + ((tot_len + 7) & ~7)
    else:
        assembled = self._assemble(pos, tot_len, bytes(view[off:off + page_left]))
        if assembled is None:
            return None
        data, end_pos = assembled
        return _record(self, pos, end_pos, tot_len, data, 0, where, prev_lsn, tli, sieve,
                       visible, passed_to)
    return _record(self, pos, end_pos, tot_len, view, off, where, prev_lsn, tli, sieve,
                   visible, passed_to)


cdef _record(self, unsigned long long pos, Py_ssize_t end_pos, Py_ssize_t tot_len, src,
             Py_ssize_t off, where, unsigned long long prev_lsn, tli, Sieve sieve,
             bint visible, unsigned long long *passed_to):
    """The record of ``tot_len`` bytes at ``off`` in ``src`` (its segment's view, or the bytes
    it was assembled into): header checks, CRC, then its body — or, with a ``sieve`` that
    does not want it, :data:`_PASSED` (see :func:`_read`)."""
    cdef Bytes b = payload(src)
    cdef const unsigned char *d = b.p + off
    cdef Py_ssize_t n = min(tot_len, b.n - off)
    cdef unsigned int xid = _u32(d, 4, n)
    cdef unsigned long long prev = (_u32(d, 8, n) | (<unsigned long long> _u32(d, 12, n) << 32))
    cdef unsigned int info = _u16(d, 16, n) & 0xFF, rmid = d[17]
    cdef unsigned int crc = _u32(d, 20, n)
    if prev_lsn and prev != prev_lsn:
        raise WalCorruptError(f"record's prev-link {format_lsn(prev)} does not point to "
                              f"the previous record {format_lsn(prev_lsn)}",
                              segment=where, lsn=pos)
    if rmid > RM_MAX_BUILTIN and rmid < RM_MIN_CUSTOM:
        raise WalCorruptError(f"invalid resource manager id {rmid}", segment=where, lsn=pos)
    if _record_crc(d, n, src, off, tot_len) != crc:
        raise WalCorruptError("incorrect CRC-32C in record", segment=where, lsn=pos)
    if sieve is not None and (not visible or not sieve.raw(pos, prev, xid, rmid, info,
                                                           tot_len, d, n)):
        if rmid == 0 and info & 0xF0 == XLOG_SWITCH:  # the rest of the segment is padding
            end_pos = (pos // self.segment_size + 1) * self.segment_size
        passed_to[0] = end_pos
        return _PASSED
    rec = blank(XLogRecord)
    put(rec, R_LSN, pos)
    put(rec, R_END_LSN, end_pos)
    put(rec, R_PREV, prev)
    put(rec, R_XID, xid)
    put(rec, R_RMID, rmid)
    put(rec, R_INFO, info)
    put(rec, R_TOT_LEN, tot_len)
    put(rec, R_BLOCKS, [])
    put(rec, R_MAIN_DATA, b"")
    put(rec, R_ORIGIN, INVALID_REP_ORIGIN)
    put(rec, R_TOPLEVEL_XID, INVALID_XID)
    put(rec, R_TIMELINE, tli)
    put(rec, R_SEGMENT, where)
    _decode(rec, d, n, src, off, where)
    return rec
