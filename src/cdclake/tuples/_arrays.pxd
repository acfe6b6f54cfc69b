# cython: language_level=3
"""C types for ``arrays.py`` compiled as ``cdclake.tuples._arrays`` (Cython's pure-Python
mode): the element walk with C offsets, and integer arrays' text written digit by digit into
one buffer (``cdclake.native``)."""

import cython


@cython.locals(b=bytes)
cpdef tuple parse(p, int elem_len, elem_align, elem_oid=*)


@cython.locals(n=Py_ssize_t, bp=cython.p_const_uchar, ndim=int, dataoffset=int,
               nitems=Py_ssize_t, i=int, bitmap_at=Py_ssize_t, off=Py_ssize_t)
cdef tuple header(bytes b, elem_oid)


@cython.locals(n=Py_ssize_t, bp=cython.p_const_uchar, o=Py_ssize_t, stride=Py_ssize_t,
               i=Py_ssize_t, b0=int, size=Py_ssize_t, hdr=int, nul=Py_ssize_t, word=cython.uint)
cdef Py_ssize_t walk(bytes b, Py_ssize_t nitems, Py_ssize_t bitmap_at, Py_ssize_t off,
                     int elem_len, int m, list items, char *buf, int width) except -1


@cython.locals(b=bytes, width=int, nitems=Py_ssize_t, bitmap_at=Py_ssize_t, off=Py_ssize_t,
               out=bytearray, buf=cython.p_char, o=Py_ssize_t)
cpdef str text(p, int elem_len, elem_align, elem_oid, etext, delim, quote)
