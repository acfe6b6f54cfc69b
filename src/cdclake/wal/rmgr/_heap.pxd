# cython: language_level=3
"""C types for ``heap.py`` compiled as ``cdclake.wal.rmgr._heap`` (Cython's pure-Python
mode): the compiled decoder reads every INSERT, UPDATE and DELETE with these (``cimport``)."""

import cython

cdef unsigned int XLOG_HEAP_INSERT, XLOG_HEAP_DELETE, XLOG_HEAP_UPDATE, XLOG_HEAP_HOT_UPDATE
cdef unsigned int XLOG_HEAP_TRUNCATE, XLOG_HEAP_CONFIRM, XLOG_HEAP_INPLACE, XLOG_HEAP_OPMASK
cdef unsigned int XLH_UPDATE_PREFIX_FROM_OLD, XLH_UPDATE_SUFFIX_FROM_OLD
cdef unsigned int XLH_UPDATE_CONTAINS_OLD, XLH_DELETE_CONTAINS_OLD
cdef unsigned int XLH_INSERT_ON_TOAST_RELATION, XLH_INSERT_CONTAINS_NEW_TUPLE
cdef Py_ssize_t SIZE_OF_HEADER, SIZE_OF_INSERT, SIZE_OF_DELETE, SIZE_OF_UPDATE


@cython.locals(b='const unsigned char *', n=Py_ssize_t)
cpdef object tuple_at(object src, Py_ssize_t at)


cdef object _malformed(rec, unsigned int op, exc)


@cython.locals(b='const unsigned char *', n=Py_ssize_t, flags=cython.uint)
cpdef (unsigned int, unsigned int) insert_fields(rec, object md, object data) except *


@cython.locals(b='const unsigned char *', n=Py_ssize_t, flags=cython.uint)
cpdef (unsigned int, unsigned int, unsigned int, unsigned int) delete_fields(
    rec, object md) except *


@cython.locals(b='const unsigned char *', d='const unsigned char *', n=Py_ssize_t,
               k=Py_ssize_t, flags=cython.uint, prefix=cython.uint, suffix=cython.uint,
               at=Py_ssize_t)
cpdef (unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
       unsigned int, unsigned int, Py_ssize_t) update_fields(
    rec, unsigned int op, object md, object data) except *
