# cython: language_level=3
"""C types for ``numeric.py`` compiled as ``cdclake.tuples._numeric`` (Cython's pure-Python
mode): numeric_out's text written digit by digit into a buffer, with no big integer in
between (``cdclake.native``)."""

import cython

cdef unsigned int NUMERIC_SIGN_MASK, NUMERIC_NEG, NUMERIC_SHORT, NUMERIC_SPECIAL


@cython.locals(size=Py_ssize_t, head=cython.uint, flag=cython.uint, neg=bint, dscale=int,
               weight=int, start=Py_ssize_t)
cdef (bint, int, int, Py_ssize_t, Py_ssize_t) header(bytes p) except *


@cython.locals(d=int)
cdef int digit(bytes p, Py_ssize_t start, Py_ssize_t i) except -1


@cython.locals(neg=bint, dscale=int, weight=int, start=Py_ssize_t, ndigits=Py_ssize_t,
               n=Py_ssize_t, d=Py_ssize_t, i=int, end=Py_ssize_t, out=bytearray)
cpdef str text(p)


cdef str special(bytes p)


@cython.locals(neg=bint, dscale=int, weight=int, start=Py_ssize_t, ndigits=Py_ssize_t,
               i=Py_ssize_t)
cpdef unpack(bytes p)


cpdef decimal(p)
