# cython: language_level=3
"""C types for ``heap.py`` compiled as ``cdclake.tuples._heap`` (Cython's pure-Python mode):
heap_deform_tuple's walk over the tuple's bytes through a C pointer (``cdclake.native``)."""

import cython

cdef int HEAP_HASNULL, HEAP_NATTS_MASK, SIZEOF_HEAP_TUPLE_HEADER


cdef class Walk:
    cdef object columns
    cdef Py_ssize_t n
    cdef int *attlen
    cdef int *mask
    cdef char *dropped


cdef dict _walks


@cython.locals(w=Walk)
cdef Walk walk_of(columns)


cdef Py_ssize_t external_size(int tag) noexcept


@cython.locals(raw=bytes, bp=cython.p_const_uchar, total=Py_ssize_t, natts=int, hasnulls=bint,
               base=Py_ssize_t, start=Py_ssize_t, w=Walk, end=Py_ssize_t, off=Py_ssize_t,
               out=list, i=Py_ssize_t, attlen=int, m=int, nxt=Py_ssize_t, b0=int,
               size=Py_ssize_t)
cpdef list deform(tup, columns)


cdef int ran_out(col, Py_ssize_t at, Py_ssize_t need, Py_ssize_t end) except -1
