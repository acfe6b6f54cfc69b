# cython: language_level=3
"""C types for ``xact.py`` compiled as ``cdclake.wal.rmgr._xact`` (Cython's pure-Python
mode): the compiled decoder reads every commit and abort with ``finish`` (``cimport``)."""

import cython

cdef unsigned int XLOG_XACT_COMMIT, XLOG_XACT_COMMIT_PREPARED, XLOG_XACT_OPMASK
cdef unsigned int XLOG_XACT_HAS_INFO, XACT_XINFO_HAS_DBINFO, XACT_XINFO_HAS_SUBXACTS
cdef unsigned int XACT_XINFO_HAS_RELFILELOCATORS, XACT_XINFO_HAS_INVALS
cdef unsigned int XACT_XINFO_HAS_TWOPHASE, XACT_XINFO_HAS_ORIGIN, XACT_XINFO_HAS_GID
cdef unsigned int XACT_XINFO_HAS_DROPPED_STATS
cdef Py_ssize_t INVAL_MSG_SIZE


@cython.locals(op=cython.uint)
cpdef tuple finish(rec, int version)


@cython.locals(b='const unsigned char *', n=Py_ssize_t, p=Py_ssize_t, k=Py_ssize_t,
               xinfo=cython.uint, db_id=cython.uint, ts_id=cython.uint, dropped=Py_ssize_t,
               invals=Py_ssize_t, twophase_xid=cython.uint, xact_time=cython.longlong,
               origin_lsn=cython.ulonglong, origin_ts=cython.longlong, end=Py_ssize_t)
cpdef tuple finish_fields(unsigned int info, unsigned int op, object md, int version)


@cython.locals(k=cython.longlong)
cdef Py_ssize_t _count(const unsigned char *b, Py_ssize_t p, Py_ssize_t n,
                       Py_ssize_t item) except -1
