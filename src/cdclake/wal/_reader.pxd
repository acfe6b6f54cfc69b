# cython: language_level=3
"""C types for ``reader.py`` compiled as ``cdclake.wal._reader`` (Cython's pure-Python mode):
its ``Walk`` is the reader's compiled twin (``cdclake.native``), and the compiled scans'
sieves (``cdclake.decoding._rmgrs``, ``cdclake.spark._facts``) extend its ``Sieve``
(``cimport``)."""

import cython

cdef Py_ssize_t PAGE_SIZE, RECORD_HEADER
cdef unsigned int XLP_FIRST_IS_CONTRECORD, XLP_FIRST_IS_OVERWRITE_CONTRECORD, XLOG_SWITCH
cdef unsigned int RM_MAX_BUILTIN, RM_MIN_CUSTOM, INVALID_REP_ORIGIN, INVALID_XID
cdef int XLR_MAX_BLOCK_ID, XLR_BLOCK_ID_DATA_SHORT, XLR_BLOCK_ID_DATA_LONG
cdef int XLR_BLOCK_ID_ORIGIN, XLR_BLOCK_ID_TOPLEVEL_XID
cdef int BKPBLOCK_HAS_IMAGE, BKPBLOCK_HAS_DATA, BKPBLOCK_SAME_REL
cdef int BKPIMAGE_HAS_HOLE, BKPIMAGE_COMPRESSED


cdef inline Py_ssize_t _maxalign(Py_ssize_t n) noexcept


cdef class Walk


cdef class Sieve:
    cpdef bint wants(self, Walk walk) except -1


cdef class Walk:
    cdef object reader
    cdef Sieve sieve
    cdef bint started, done, has_start, has_end
    cdef unsigned long long pos, prev_lsn, next_lsn, start, end
    cdef Py_ssize_t size
    # the record a sieve is asked about
    cdef readonly unsigned long long lsn, prev
    cdef readonly unsigned int xid, rmid, info, toplevel, first_db, first_rel
    cdef readonly Py_ssize_t tot_len, nblocks, main, main_len
    cdef readonly object src

    @cython.locals(pos=cython.ulonglong, header=Py_ssize_t, info=cython.uint,
                   visible=cython.bint)
    cdef object _next(self)

    @cython.locals(size=Py_ssize_t, off=Py_ssize_t, n=Py_ssize_t, tot_len=Py_ssize_t,
                   page_left=Py_ssize_t, cached=tuple)
    cdef object _read(self, unsigned long long pos, bint visible)

    @cython.locals(_tot=Py_ssize_t, xid=cython.uint, prev=cython.ulonglong, info=cython.uint,
                   rmid=cython.uint, crc=cython.uint, prev_lsn=cython.ulonglong,
                   main=Py_ssize_t, main_len=Py_ssize_t, origin=cython.uint,
                   _origin=cython.uint, toplevel=cython.uint, blocks=list, _n=Py_ssize_t,
                   _db=cython.uint, _rel=cython.uint)
    cdef object _record(self, unsigned long long pos, unsigned long long end_pos,
                        Py_ssize_t tot_len, object src, Py_ssize_t off, object where,
                        object timeline, bint visible)


@cython.locals(end=Py_ssize_t, p=Py_ssize_t, datatotal=Py_ssize_t, main_len=Py_ssize_t,
               origin=cython.uint, toplevel=cython.uint, last_id=cython.int,
               block_id=cython.int, flags=cython.int, dlen=Py_ssize_t, ilen=Py_ssize_t,
               bimg_len=cython.int, hole_off=cython.int, hole_len=cython.int,
               bimg_info=cython.int, lens=cython.int[66], nblocks=Py_ssize_t, i=Py_ssize_t,
               k=Py_ssize_t, first_db=cython.uint, first_rel=cython.uint,
               blkno=cython.uint, b='const unsigned char *')
cpdef (Py_ssize_t, Py_ssize_t, unsigned int, unsigned int, Py_ssize_t, unsigned int,
       unsigned int) body(object src, Py_ssize_t base, Py_ssize_t tot_len,
                          unsigned long long lsn, object where, list blocks)
