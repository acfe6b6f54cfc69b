# cython: language_level=3
"""C types for ``rmgrs.py`` compiled as ``cdclake.decoding._rmgrs`` (Cython's pure-Python
mode): its ``decodable`` is the rmgr table's compiled twin (``cdclake.native``), whose sieve
reads the records a decoder reads past as C; the scan's compiled sieve (``spark/_facts``)
asks ``heap_route``, ``plain`` and ``truncates`` as C (``cimport``)."""

import cython

from cdclake.wal._reader cimport Sieve, Walk

cdef int IGNORE, ALL, TXN, CATALOG
cdef unsigned int RM_HEAP_ID, RM_HEAP2_ID, FIRST_NORMAL_OBJECT_ID
cdef unsigned int XLOG_HEAP_OPMASK, XLOG_HEAP_TRUNCATE, XLOG_HEAP_INSERT, XLOG_HEAP_DELETE
cdef unsigned int XLOG_HEAP_UPDATE, XLOG_HEAP_HOT_UPDATE, XLOG_HEAP2_OPMASK
cdef unsigned int XLOG_HEAP2_MULTI_INSERT, XLH_INSERT_IS_SPECULATIVE
cdef unsigned int XLH_INSERT_ON_TOAST_RELATION, XLH_DELETE_IS_SUPER
cdef bytes _HEAP_CHANGE, _READS


@cython.locals(op=cython.uint)
cpdef int heap_route(unsigned int rmid, unsigned int info, unsigned int xid,
                     Py_ssize_t nblocks, unsigned int first_db, unsigned int first_rel,
                     unsigned int db_oid) except -1


@cython.locals(op=cython.uint, end=Py_ssize_t, b='const unsigned char *')
cpdef bint plain(unsigned int rmid, unsigned int info, object src, Py_ssize_t main,
                 Py_ssize_t main_len) except -1


cpdef bint truncates(unsigned int rmid, unsigned int info) except -1


cdef class Decodable(Sieve):
    cdef unsigned int db
    cdef bint seen

    @cython.locals(rmid=cython.uint)
    cpdef bint wants(self, Walk walk) except -1


cdef Py_ssize_t R_LSN, R_XID, R_RMID, R_TOPLEVEL_XID

