# cython: language_level=3
"""C types for ``heap2.py`` compiled as ``cdclake.wal.rmgr._heap2`` (Cython's pure-Python
mode): the compiled decoder reads every MULTI_INSERT with these (``cimport``)."""

import cython

cdef unsigned int XLOG_HEAP2_MULTI_INSERT, XLOG_HEAP2_NEW_CID, XLOG_HEAP2_OPMASK
cdef Py_ssize_t SIZE_OF_MULTI, SIZE_OF_MULTI_TUPLE


cdef object _malformed(rec, exc)


@cython.locals(b='const unsigned char *', d='const unsigned char *', n=Py_ssize_t,
               k=Py_ssize_t, p=Py_ssize_t, flags=cython.uint, ntuples=Py_ssize_t,
               _i=Py_ssize_t)
cpdef (unsigned int, Py_ssize_t, Py_ssize_t) multi_fields(rec, unsigned int info, object md,
                                                          object data) except *


@cython.locals(d='const unsigned char *', k=Py_ssize_t, p=Py_ssize_t, at=Py_ssize_t,
               dlen=Py_ssize_t, tuples=list, _i=Py_ssize_t)
cpdef list multi_tuples(object data, Py_ssize_t count)
