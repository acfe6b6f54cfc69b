# cython: language_level=3
"""C types for ``facts.py`` compiled as ``cdclake.spark._facts`` (Cython's pure-Python mode):
the scan's sieve, told each record by the compiled walk as C; its ``collector`` is the
compiled twin (``cdclake.native``)."""

import cython

from cdclake.wal._reader cimport Sieve, Walk

cdef int TXN, CATALOG
cdef unsigned int RM_HEAP2_ID, RM_HEAP_ID, RM_LOGICALMSG_ID, RM_XACT_ID
cdef unsigned int XLOG_HEAP_INSERT, XLOG_HEAP_OPMASK


cdef class FactCollector(Sieve):
    cdef public unsigned int db
    cdef public dict parent_of, changes
    cdef public set unsplit
    cdef public object first_lsn, first_prev, last_lsn
    cdef unsigned long long last
    cdef unsigned int run_xid
    cdef Py_ssize_t run_bytes

    @cython.locals(rmid=cython.uint, xid=cython.uint)
    cpdef bint wants(self, Walk walk) except -1

    cpdef count(self, int kind, unsigned int xid, unsigned int rmid, unsigned int info,
                Py_ssize_t tot_len, object src, Py_ssize_t main, Py_ssize_t main_len)

    cpdef flush(self)
